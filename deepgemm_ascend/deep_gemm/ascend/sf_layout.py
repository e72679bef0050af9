"""Ascend scale-factor layout transform: the vector kernel ``sf_layout.asc`` behind
``transform_sf_into_required_layout`` and ``transform_k_grouped_sf_into_required_layout`` on the
Ascend path (NPU tensors, or ``DG_BACKEND=ascend`` on the twin).

Entry point (arguments validated by ``deep_gemm.layout`` from shapes and dtypes only)::

    transform_sf(sf, mn, k_blocks, gran_mn, grouping="none", ends=None, alignment=256) -> torch.Tensor

- ``sf``: FP32 ``[B?, ceil(mn / gran_mn), SK]`` (one scale per 32 K) or int16 UE8M0 pairs
  ``[B?, ceil(mn / gran_mn), ceil(SK / 2)]``, any strides; ``k_blocks`` = SK.
- Returns int16 ``[B?, mn, ceil(SK / 2)]``, MN-major with no padding (``stride(-2) == 1``,
  ``stride(-1) == mn``): K-block ``2p`` in the low byte of word ``p``, rows repeated ``gran_mn`` times;
  bytes past SK are 0 (FP32 values keep only their exponent byte).
- ``grouping``: ``"m"`` (M-grouped psum layout: rows ``[end_g, align(end_g, alignment))`` zeroed) or
  ``"k"`` (K-grouped psum layout: the K-blocks between ``ceil(end_g / 32)`` and the next group's
  aligned start zeroed), with ``ends`` the groups' int32 exclusive ends (read by the kernel only).
- FP32 scales that are not positive powers of two set a status word in the kernel; it is read (one
  host sync) and raised as ``ValueError`` only with ``DG_ASCEND_CHECKS=1``.
"""
from __future__ import annotations

import torch

from .. import runtime
from .._lib import LIB
from ._launch import args, kernel, on_twin

GROUPINGS = {"none": 0, "m": 1, "k": 2}
WORDS_PER_BLOCK = 4096  # output words one vector core takes before the grid grows


def _strides3(x: torch.Tensor) -> tuple[int, int, int]:
    return (x.stride(0) if x.dim() == 3 else 0), x.stride(-2), x.stride(-1)


def transform_sf(sf: torch.Tensor, mn: int, k_blocks: int, gran_mn: int, grouping: str = "none",
                 ends: torch.Tensor | None = None, alignment: int = 256) -> torch.Tensor:
    is_float = sf.dtype == torch.float32
    batch = sf.size(0) if sf.dim() == 3 else 1
    words = -(-sf.size(-1) // 2) if is_float else sf.size(-1)
    lead = (sf.size(0),) if sf.dim() == 3 else ()
    out = torch.empty(lead + (words, mn), dtype=torch.int16, device=sf.device).transpose(-1, -2)
    total = batch * mn * words
    if total == 0:
        return out
    status = torch.zeros(1, dtype=torch.int32, device=sf.device)
    groups = ends if ends is not None else status
    device = LIB.ascend_runtime(on_twin(sf)).device
    vec_per_core = device.get_num_vec_cores() // device.get_num_aicore_cores()
    grid = min(-(-total // WORDS_PER_BLOCK), vec_per_core * runtime.ascend_blocks(device.get_num_aicore_cores()))
    src = sf.view(torch.int32) if is_float else sf
    sb, sr, sc = _strides3(src)
    kernel("dg_sf_transform", "ascend/sf_layout.asc", {"DG_FLOAT_INPUT": int(is_float),
                                                       "DG_GROUPING": GROUPINGS[grouping]})(
        grid, args("DgSfTransformArgs", src=src, out=out, ends=groups, status=status, batch=batch, mn=mn, words=words,
                   k_blocks=k_blocks, gran_mn=gran_mn, sb=sb, sr=sr, sc=sc,
                   num_groups=0 if ends is None else ends.numel(), alignment=alignment))
    if is_float and LIB.env.get_int("ASCEND_CHECKS", 0) and int(status[0]):
        raise ValueError("sf values: expected positive powers of two (the Ascend UE8M0 contract), got a scale with "
                         "its sign or mantissa bits set")
    return out
