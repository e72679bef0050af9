"""Choosing the implementation for validated, canonical arguments.

Every public op calls ``run(name, device, *args)`` once its checks passed. The implementation
is ``deep_gemm.reference.<name>`` unless the backend for ``device`` is "host" and
``deep_gemm.host`` exports a function of the same name, which then gets the same arguments
(canonical operands from ``_operands``) plus ``num_threads=LIB.num_threads``. NPU tensors use the
reference until Ascend kernels exist. ``DG_BACKEND=reference|host|ascend`` forces a path.
"""
from __future__ import annotations

import importlib

from . import _lib, reference

_MISSING = object()
_host_module = _MISSING


def _host():
    global _host_module
    if _host_module is _MISSING:
        try:
            _host_module = importlib.import_module(f"{__package__}.host")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.host":
                raise
            _host_module = None
    return _host_module


def implementation(name: str, device):
    """(callable, is_host) serving ``name`` for tensors on ``device``."""
    if _lib.LIB.backend_for(device) == "host":
        host = _host()
        fn = getattr(host, name, None) if host is not None else None
        if fn is not None:
            return fn, True
    return getattr(reference, name), False


def run(name: str, device, *args, **kwargs):
    fn, is_host = implementation(name, device)
    if is_host:
        kwargs["num_threads"] = _lib.LIB.num_threads
    return fn(*args, **kwargs)
