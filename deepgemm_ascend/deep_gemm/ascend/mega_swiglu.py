"""Mega MoE's SwiGLU step on the Ascend vector cores (``mega_swiglu.asc``): the Ascend form of
``deep_gemm.mega.swiglu_apply_weight_to_fp8`` applied to the L1 GEMM output in its gate / up interleaved column
order. CPU tensors run on deepjit's twin.

Entry points::

    swiglu_quant(l1_out, weights, ends, activation_clamp, to_fp8, gran=8, alignment=1) -> (act, act_sf) / act
    swiglu_quant_into(l1_out, weights, ends, activation_clamp, act, act_sf=None, gran=8, alignment=1) -> None

- ``l1_out``: BF16 ``[M, 2 * I]`` dense, ``I % 128 == 0``; column block ``b`` of ``2 * gran`` holds gate columns
  ``[b * gran, (b + 1) * gran)`` then the up columns of the same range (``deep_gemm.mega._interleave_order``).
- ``weights``: FP32 ``[M]`` (each row's top-k weight); ``ends``: int32 ``[G]`` psum end rows, read only by the kernel
  (no host read: graph capture): group g's rows ``[start_g, end_g)`` are computed, the others are not written;
  ``end_g = clamp(ends[g], start_g, M)``, ``start_g = min(align(end_{g-1}, alignment), M)`` (group 0 at 0), so
  with ``alignment`` 1 rows ``[0, end_{G-1})`` (the clamped end: ``ends[G - 1]`` for non-decreasing ends, else the
  largest end before it) and with the psum layout's alignment only the experts' rows.
- ``activation_clamp``: ``None`` or ``c >= 0``: ``gate = min(gate, c)``, ``up = clamp(up, -c, c)``.
- Per element in FP32: ``act = ((gate * sigmoid(gate)) * up) * weights[row]``, then with ``to_fp8`` E4M3 ``[M, I]``
  and UE8M0 scales per 32 columns packed four to an int32 ``[M, I / 128]`` (block ``4w + j`` in byte ``j``), as
  ``per_token_cast_to_fp8(act, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)``; else BF16 ``[M, I]``.

``swiglu_quant`` allocates its outputs (rows outside the groups hold whatever the allocation held);
``swiglu_quant_into`` writes caller-given ones (``act`` E4M3 with ``act_sf``, or BF16 with ``act_sf=None``), so rows
outside the groups keep what the caller put there.
"""
from __future__ import annotations

import torch

from deepjit import validation as v

from .._lib import LIB
from ._launch import args, kernel

UB_BYTES = 248 * 1024   # dav-3510's Unified Buffer
MAX_TILE_ROWS = 16      # rows a tile at most: enough to amortise a step's setup, few enough to spread rows


def _ub_bytes(rows: int, inter: int, to_fp8: bool) -> int:
    """mega_swiglu.asc's UB map for tiles of ``rows`` rows: two input stages (BF16 rows, then their FP32 weights
    32-byte aligned) and two output stages (act rows, then FP8's scale bytes, 32-byte aligned a row)."""
    sf_pitch = -(-(inter // 32) // 32) * 32 if to_fp8 else 0
    out_row = (inter if to_fp8 else 2 * inter) + sf_pitch
    return 2 * (rows * 4 * inter + -(-4 * rows // 32) * 32 + rows * out_row)


def tile_rows_that_fit(inter: int, to_fp8: bool, name: str = "l1_out") -> int:
    """Rows a tile can hold at this I; an I whose one row does not fit is refused, naming ``name``."""
    rows = MAX_TILE_ROWS
    while rows > 1 and _ub_bytes(rows, inter, to_fp8) > UB_BYTES:
        rows -= 1
    if _ub_bytes(rows, inter, to_fp8) > UB_BYTES:
        raise v.fail(name, f"an I whose row fits the kernel's UB stages ({UB_BYTES} bytes for two input and two "
                     f"output rows)", f"I = {inter} ({_ub_bytes(1, inter, to_fp8)} bytes)")
    return rows


def _check_inputs(l1_out, weights, ends, activation_clamp, gran, alignment) -> tuple[int, int, float | None]:
    v.tensor("l1_out", l1_out, (torch.bfloat16,), 2, contiguous=True)
    m, two_inter = l1_out.shape
    if two_inter % 256 or two_inter == 0:
        raise v.fail("l1_out", "2 * I columns with I a positive multiple of 128", f"shape {tuple(l1_out.shape)}")
    device = l1_out.device
    v.tensor("weights", weights, (torch.float32,), shape=(m,), contiguous=True, device=device, like="l1_out")
    v.tensor("ends", ends, (torch.int32,), 1, contiguous=True, device=device, like="l1_out")
    if ends.numel() == 0:
        raise v.fail("ends", "at least one group", "an empty tensor")
    v.integer("gran", gran, 1, 128)
    v.integer("alignment", alignment, 1, 2 ** 31 - 1)
    if gran & (gran - 1):
        raise v.fail("gran", "a power of two", gran)
    if activation_clamp is not None:
        activation_clamp = v.number("activation_clamp", activation_clamp)
        if not activation_clamp >= 0:
            raise v.fail("activation_clamp", "None or a value >= 0", activation_clamp)
    return m, two_inter // 2, activation_clamp


def swiglu_quant(l1_out: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor, activation_clamp: float | None,
                 to_fp8: bool, gran: int = 8, alignment: int = 1):
    m, inter, _ = _check_inputs(l1_out, weights, ends, activation_clamp, gran, alignment)
    to_fp8 = v.boolean("to_fp8", to_fp8)
    if to_fp8:
        act = torch.empty(m, inter, dtype=torch.float8_e4m3fn, device=l1_out.device)
        act_sf = torch.empty(m, inter // 128, dtype=torch.int32, device=l1_out.device)
        swiglu_quant_into(l1_out, weights, ends, activation_clamp, act, act_sf, gran, alignment)
        return act, act_sf
    act = torch.empty(m, inter, dtype=torch.bfloat16, device=l1_out.device)
    swiglu_quant_into(l1_out, weights, ends, activation_clamp, act, None, gran, alignment)
    return act


def swiglu_quant_into(l1_out: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor,
                      activation_clamp: float | None, act: torch.Tensor, act_sf: torch.Tensor | None = None,
                      gran: int = 8, alignment: int = 1, *, max_tile_rows: int | None = None,
                      grid: int | None = None) -> None:
    """``swiglu_quant`` into caller-given outputs. ``max_tile_rows`` / ``grid`` override the kernel's tile bound and
    vector-core count (tests reach the multi-tile double-buffered path with them at small shapes)."""
    m, inter, clamp = _check_inputs(l1_out, weights, ends, activation_clamp, gran, alignment)
    to_fp8 = act_sf is not None
    device = l1_out.device
    v.tensor("act", act, (torch.float8_e4m3fn,) if to_fp8 else (torch.bfloat16,), shape=(m, inter),
             contiguous=True, device=device, like="l1_out")
    if to_fp8:
        v.tensor("act_sf", act_sf, (torch.int32,), shape=(m, inter // 128), contiguous=True, device=device,
                 like="l1_out")
    inputs = (("l1_out", l1_out), ("weights", weights), ("ends", ends))
    v.output("act", act, *inputs)
    if to_fp8:
        v.output("act_sf", act_sf, *inputs, ("act", act))
    fit = tile_rows_that_fit(inter, to_fp8)
    rows = fit if max_tile_rows is None else min(v.integer("max_tile_rows", max_tile_rows, 1), fit)
    vector_cores = LIB.num_vector_cores(device)
    blocks = min(m, vector_cores if grid is None else v.integer("grid", grid, 1, vector_cores))
    if m == 0:
        return
    kernel("dg_mega_swiglu", "ascend/mega_swiglu.asc", {})(
        blocks, args("DgMegaSwigluArgs", **fields(l1_out, weights, ends, clamp, act, act_sf, gran, alignment, rows)))


def fields(l1_out, weights, ends, clamp: float | None, act, act_sf, gran: int, alignment: int, max_tile_rows: int) -> dict:
    """``DgMegaSwigluArgs``'s fields for checked arguments (also the step of Mega MoE's persistent kernel)."""
    m, inter = l1_out.size(0), l1_out.size(1) // 2
    return dict(l1_out=l1_out, weights=weights, ends=ends, act=act.view(torch.uint8),
                act_sf=act if act_sf is None else act_sf, m=m, inter=inter, num_groups=ends.numel(), gran=gran,
                max_tile_rows=max_tile_rows, to_fp8=int(act_sf is not None), has_clamp=int(clamp is not None),
                alignment=alignment, clamp=0.0 if clamp is None else clamp)
