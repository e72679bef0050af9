"""An emulated accelerator for tests: ``on_device(t)`` is a CPU tensor that reports the ``meta``
device. Ops on such tensors compute on the CPU inside and return such tensors; an op that mixes
them with CPU tensors (other than 0-d scalars, which torch moves anywhere) raises, as torch does
on a real device, and so does a collective handed CPU tensors next to device ones. Copies to the
CPU (``.cpu()``, ``.tolist()``, ``int()``) are host reads, as on a device."""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

META = torch.device("meta")


class _OnDevice(torch.Tensor):
    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, strides=inner.stride(),
                                                   storage_offset=inner.storage_offset(), dtype=inner.dtype,
                                                   device=META)

    def __init__(self, inner: torch.Tensor):
        self.inner = inner

    def __repr__(self):
        return f"on_device({self.inner!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        leaves, _ = tree_flatten((args, kwargs))
        on_device = any(isinstance(t, _OnDevice) for t in leaves)
        cpu = [t for t in leaves if isinstance(t, torch.Tensor) and not isinstance(t, _OnDevice) and t.dim() > 0]
        if on_device and cpu:
            raise AssertionError(f"{func} mixes device tensors with CPU tensors of shapes "
                                 f"{[tuple(t.shape) for t in cpu]}")
        wants = kwargs.get("device")
        if wants is not None:
            kwargs["device"] = torch.device("cpu")
        out = func(*tree_map(_inner, args), **tree_map(_inner, kwargs))
        if func in (torch.ops.aten._to_copy.default, torch.ops.aten.to.device) and wants is not None \
                and torch.device(wants).type == "cpu":
            return out                                         # a host copy
        if on_device or (wants is not None and torch.device(wants) == META):
            return tree_map(lambda t: _OnDevice(t) if isinstance(t, torch.Tensor) else t, out)
        return out


def _inner(t):
    return t.inner if isinstance(t, _OnDevice) else t


def on_device(t):
    if isinstance(t, tuple):
        return tuple(on_device(u) for u in t)
    return _OnDevice(t.contiguous()) if t.is_contiguous() else _OnDevice(t)


def to_cpu(t):
    return None if t is None else (t.inner.clone() if isinstance(t, _OnDevice) else t)


class _Factories(TorchDispatchMode):
    """Tensors created for the ``meta`` device (``device=x.device``) land on the emulated one."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        wants = kwargs.get("device")
        leaves, _ = tree_flatten((args, kwargs))
        if wants is not None and torch.device(wants) == META and \
                not any(isinstance(t, _OnDevice) for t in leaves):
            kwargs["device"] = torch.device("cpu")
            return tree_map(lambda t: _OnDevice(t) if isinstance(t, torch.Tensor) else t, func(*args, **kwargs))
        return func(*args, **kwargs)


@contextlib.contextmanager
def emulated_device():
    """Inside: factories for the device make emulated tensors, and torch.distributed collectives
    take the emulated device's tensors (all of a call's tensors, or none)."""
    names = ("all_gather", "all_to_all_single", "all_reduce", "broadcast")
    saved = {n: getattr(dist, n) for n in names}

    def wrap(name, fn):
        def call(*args, **kwargs):
            leaves, _ = tree_flatten((args, kwargs))
            tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
            if any(isinstance(t, _OnDevice) for t in tensors):
                assert all(isinstance(t, _OnDevice) for t in tensors), f"dist.{name} given CPU and device tensors"
                return fn(*tree_map(_inner, args), **tree_map(_inner, kwargs))
            return fn(*args, **kwargs)
        return call

    for n in names:
        setattr(dist, n, wrap(n, saved[n]))
    try:
        with _Factories():
            yield
    finally:
        for n, fn in saved.items():
            setattr(dist, n, fn)
