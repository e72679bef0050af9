"""A guard against host reads of device tensors, for the Ascend paths (graph capture forbids them): tensors
marked device-only -- and whatever is computed from them -- raise ``HostRead`` on any operation that reads
their values on the host (``.item()``, ``.tolist()``, ``bool()``, ``int()``, ``nonzero``, ``unique``, a
boolean-mask index, ...). On the twin every tensor is a CPU tensor, so the guard is what proves the NPU
path would not sync."""
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

T = torch.Tensor
# Operations whose result size or value needs the tensor's contents on the host.
HOST_READS = {T.item, T.tolist, T.numpy, T.__bool__, T.__int__, T.__index__, T.__float__, T.nonzero, torch.nonzero,
              T.unique, torch.unique, T.unique_consecutive, torch.unique_consecutive, T.masked_select,
              torch.masked_select, T.equal, torch.equal, torch.allclose, T.argwhere, torch.argwhere, T.bincount,
              torch.bincount, T.cpu, T.__repr__, T.__format__, T.__contains__}


class HostRead(AssertionError):
    pass


def _sizes_from_values(func, args, kwargs) -> bool:
    """Calls that need values on the host: one-argument ``where``, ``repeat_interleave`` by a tensor of
    repeats without ``output_size`` (the output size), and a boolean-mask index or masked assignment."""
    if func in (torch.where, T.where) and len(args) + len(kwargs) == 1:
        return True
    if func in (torch.repeat_interleave, T.repeat_interleave) and "output_size" not in kwargs:
        repeats = kwargs.get("repeats", args[1] if len(args) > 1 else None)
        return repeats is None or isinstance(repeats, T)  # one argument: the tensor is the repeats
    return func in (T.__getitem__, T.__setitem__) and any(
        isinstance(x, T) and x.dtype == torch.bool for x in tree_leaves(args[1:2]))


class DeviceOnly(TorchFunctionMode):
    """Raises on a host read of a marked tensor; whatever is computed from one is marked in turn."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        marked = [x for x in tree_leaves((args, kwargs)) if isinstance(x, T) and getattr(x, "_device_only", False)]
        if marked and (func in HOST_READS or _sizes_from_values(func, args, kwargs)):
            raise HostRead(f"host read ({getattr(func, '__name__', func)}) of a device tensor on the Ascend path")
        out = func(*args, **kwargs)
        if marked:
            for t in tree_leaves(out):
                if isinstance(t, T):
                    t._device_only = True
        return out


def mark(*tensors):
    """Marks ``tensors`` (None skipped) device-only; returns them."""
    for t in tensors:
        if t is not None:
            t._device_only = True
    return tensors


def guarding(*args) -> DeviceOnly:
    """Marks every tensor in ``args`` (nested in tuples and lists too) device-only; returns the mode to enter."""
    mark(*[x for x in tree_leaves(args) if isinstance(x, T)])
    return DeviceOnly()
