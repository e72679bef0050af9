"""Ascend scale-factor layout ops: the vector kernel ``sf_layout_ops.asc`` behind the backend table's
``sf_copy``, ``sf_pack_ue8m0`` and ``sf_unpack_ue8m0`` (deep_gemm.layout's MN-major TMA-aligned FP32
copies, UE8M0 packing and unpacking) on NPU tensors, or on the twin with ``DG_BACKEND=ascend``.

Entry points (the canonical arguments of ``deep_gemm.reference``; each writes ``out`` in place, any strides)::

    sf_copy(sf, out, gran_mn)          # FP32 [B?, ceil(MN/gran_mn), SK] -> FP32 [B?, MN, SK]
    sf_pack_ue8m0(sf, out, gran_mn)    # FP32 -> int32 (4 exponent bytes a word) / int16 (2) [B?, MN, words]
    sf_unpack_ue8m0(packed, out)       # int32 / int16 [B?, MN, P] -> FP32 [B?, MN, SK], SK <= P * bytes

``accepts`` names the forms the kernel covers (src rows enough for MN; the reference raises on the others).
"""
from __future__ import annotations

import torch

from .. import runtime
from .._lib import LIB
from ._launch import args, kernel, on_twin

ELEMENTS_PER_BLOCK = 4096  # output elements one vector core takes before the grid grows
MODES = {"copy": 0, "pack": 1, "unpack": 2}


def _strides3(x: torch.Tensor) -> tuple[int, int, int]:
    return (x.stride(0) if x.dim() == 3 else 0), x.stride(-2), x.stride(-1)


def _run(mode: str, src: torch.Tensor, out: torch.Tensor, sk: int, gran: int, word_bytes: int) -> None:
    batch, mn, cols = (out.size(0) if out.dim() == 3 else 1), out.size(-2), out.size(-1)
    total = batch * mn * cols
    if total == 0:
        return
    device = LIB.ascend_runtime(on_twin(out)).device
    vec_per_core = device.get_num_vec_cores() // device.get_num_aicore_cores()
    grid = min(-(-total // ELEMENTS_PER_BLOCK), vec_per_core * runtime.ascend_blocks(device.get_num_aicore_cores()))
    (isb, ism, isk), (osb, osm, osk) = _strides3(src), _strides3(out)
    kernel("dg_sf_layout", "ascend/sf_layout_ops.asc", {"DG_SF_MODE": MODES[mode], "DG_WORD_BYTES": word_bytes})(
        grid, args("DgSfLayoutArgs", src=src, out=out, batch=batch, mn=mn, cols=cols, sk=sk, gran=gran,
                   isb=isb, ism=ism, isk=isk, osb=osb, osm=osm, osk=osk))


def sf_copy(sf: torch.Tensor, out: torch.Tensor, gran_mn: int) -> None:
    _run("copy", sf, out, out.size(-1), gran_mn, 4)


def sf_pack_ue8m0(sf: torch.Tensor, out: torch.Tensor, gran_mn: int) -> None:
    _run("pack", sf, out, sf.size(-1), gran_mn, out.element_size())


def sf_unpack_ue8m0(packed: torch.Tensor, out: torch.Tensor) -> None:
    _run("unpack", packed, out, out.size(-1), 1, packed.element_size())


def _rows_cover(src: torch.Tensor, out: torch.Tensor, gran: int) -> bool:
    return src.dim() == out.dim() and src.shape[:-2] == out.shape[:-2] and src.size(-2) * gran >= out.size(-2)


# The kernel moves 4-byte FP32 scales and 2- or 4-byte words at element strides: any other dtype would
# move its reads or writes past the tensors, so those forms stay on the reference.
def copy_accepts(sf, out, gran_mn) -> bool:
    return (_rows_cover(sf, out, gran_mn) and sf.dtype == out.dtype == torch.float32
            and sf.size(-1) >= out.size(-1))


def pack_accepts(sf, out, gran_mn) -> bool:
    return _rows_cover(sf, out, gran_mn) and sf.dtype == torch.float32 and out.dtype in (torch.int32, torch.int16)


def unpack_accepts(packed, out) -> bool:
    return (_rows_cover(packed, out, 1) and packed.dtype in (torch.int32, torch.int16) and out.dtype == torch.float32
            and out.size(-1) <= packed.size(-1) * packed.element_size())
