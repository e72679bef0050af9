"""One named argument struct per hand-written Ascend kernel, passed in global memory.

AscendC entry parameters are GM pointers or built-in scalars; structured arguments travel as a struct
in global memory that the kernel reads at its start (the published tiling pattern: ``GM_ADDR tiling``,
``GET_TILING_DATA``). A kernel here declares its arguments once, as a plain struct in a header that the
``.asc`` includes and Python reads (``deepjit.descriptors``), and takes a pointer to it::

    struct DgBf16GemmArgs { __gm__ bfloat16_t* a; __gm__ bfloat16_t* b; __gm__ void* d; int64_t m, n, k; };
    extern "C" __global__ __cube__ void dg_bf16_gemm(__gm__ const DgBf16GemmArgs* args) {
      const DgBf16GemmArgs p = *args;   // one copy to the core's own memory, then plain fields
      ...

Python fills it BY NAME (a field missing, unknown or out of range raises naming it)::

    ARGS = descriptors.struct_type(LIB.source("ascend/bf16_gemm_args.h"), "DgBf16GemmArgs")
    kernel(grid, kernel_args.pack(ARGS, a=a, b=b, d=d, m=m, n=n, k=k))

``pack`` returns a ``KernelArgs``: the struct's bytes in a small uint8 tensor on the tensors' device (a
CPU tensor for the twin; for an NPU, a non-blocking copy from pinned host memory, so the launch never
waits on or reads the device) and the tensors its pointer fields name, kept alive with it. Under graph
capture the copy is recorded with this launch's bytes: a replay reuses them, so a captured launch must
not change its arguments (the same holds for any tiling buffer).

On the twin the tensors behind pointer fields are guarded like tensor arguments (out-of-bounds accesses
through them fail naming ``args.<field>``), and the struct's layout as the compiler lays it out is
compared with ``ctypes``' on first launch (``descriptors.check_layout``), so a header the parser misreads fails
naming the field.
"""
from __future__ import annotations

import ctypes

import torch

from . import descriptors
from . import validation as V


class KernelArgs:
    """A packed argument struct (``struct``, the ctypes value; ``tensor``, its bytes on ``device``) and the
    tensors its pointer fields reference (``referenced``: ``{"field" or "outer.inner": tensor}``)."""

    __slots__ = ("struct", "tensor", "referenced")

    def __init__(self, struct: ctypes.Structure, tensor: torch.Tensor, referenced: dict):
        self.struct, self.tensor, self.referenced = struct, tensor, referenced

    @property
    def device(self) -> torch.device:
        return self.tensor.device

    def __repr__(self):
        return f"KernelArgs({type(self.struct).__name__} on {self.device}, {len(self.referenced)} tensors)"


def _addresses(values: dict, prefix: str, referenced: dict) -> dict:
    """``values`` with every tensor replaced by its address (any device: descriptors take CPU tensors
    only), the tensors recorded under their dotted field names."""
    out = {}
    for name, value in values.items():
        if isinstance(value, dict):
            out[name] = _addresses(value, f"{prefix}{name}.", referenced)
        elif isinstance(value, torch.Tensor):
            referenced[prefix + name] = value
            out[name] = value.data_ptr()
        else:
            out[name] = value
    return out


def pack(struct_cls: type[ctypes.Structure], **values) -> KernelArgs:
    """The launch argument of a kernel taking ``__gm__ const <struct_cls>*``: every field set by name
    (``descriptors.pack``'s checks), the bytes on the device of the tensors the pointer fields name."""
    referenced: dict = {}
    struct = descriptors.pack(struct_cls, **_addresses(values, "", referenced))
    devices = {t.device for t in referenced.values()}
    if len(devices) > 1:
        raise V.fail(struct_cls.__name__, "pointer fields naming tensors on one device",
                     ", ".join(f"{f} on {t.device}" for f, t in referenced.items()))
    device = next(iter(devices), torch.device("cpu"))
    host = torch.frombuffer(bytearray(bytes(struct)), dtype=torch.uint8)
    tensor = host if device.type == "cpu" else host.pin_memory().to(device, non_blocking=True)
    return KernelArgs(struct, tensor, referenced)
