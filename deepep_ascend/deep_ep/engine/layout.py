"""Byte layouts shared by both transports and the host kernels, and the buffer size formula.

Dispatch slot (one token to one rank): ``[x row][scale packs][meta]``, each part 64-byte aligned;
meta = ``int32 src_token_idx, int32 first_topk_slot, int32 pad[2], int32 local_expert[K],
int32 within_expert_idx[K], float weight[K]`` (see host/common.hpp).
Combine row: ``[bf16 x[H]][float weight[K]]``, the weights 64-byte aligned.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..utils.math import align

COUNTS_BYTES = 64 << 10       # count rows [R, 1 + num_local_experts] int32 before the dispatch slots
ALLOCATION_ALIGNMENT = 2 << 20
TMA_ALIGNMENT = 32
RDMA_ALIGNMENT = 32
MAX_TOPK = 64


@dataclass(frozen=True)
class SlotLayout:
    x_bytes: int
    sf_off: int
    meta_off: int
    slot_bytes: int

    @staticmethod
    def of(hidden: int, elem_size: int, num_packs: int, num_topk: int) -> SlotLayout:
        x_bytes = hidden * elem_size
        sf_off = align(x_bytes, 64)
        meta_off = sf_off + align(num_packs * 4, 64)
        return SlotLayout(x_bytes, sf_off, meta_off, meta_off + align(16 + 12 * num_topk, 64))


@dataclass(frozen=True)
class RowLayout:
    w_off: int
    row_bytes: int

    @staticmethod
    def of(hidden: int, num_topk: int) -> RowLayout:
        w_off = align(hidden * 2, 64)
        return RowLayout(w_off, w_off + align(num_topk * 4, 64))


def dispatch_bytes(num_ranks: int, num_max_tokens_per_rank: int, slot: SlotLayout) -> int:
    return COUNTS_BYTES + num_ranks * num_max_tokens_per_rank * slot.slot_bytes


def combine_bytes(num_ranks: int, num_max_tokens_per_rank: int, num_topk: int, row: RowLayout,
                  multiple_reduction: bool) -> int:
    rows = num_ranks if multiple_reduction else max(num_ranks, num_topk)
    return num_max_tokens_per_rank * rows * row.row_bytes


def buffer_size_hint(num_ranks: int, num_max_tokens_per_rank: int, hidden: int, num_topk: int = 0,
                     use_fp8_dispatch: bool = False, allow_multiple_reduction: bool = True) -> int:
    """Bytes for one rank's region, 2 MiB aligned. ``num_topk=0`` sizes for 32; a BF16 buffer
    (``use_fp8_dispatch=False``) also fits FP8 dispatches with float32 scales."""
    k = num_topk or 32
    packs = -(-hidden // 128)
    slot = SlotLayout.of(hidden, 1 if use_fp8_dispatch else 2, packs, k)
    row = RowLayout.of(hidden, k)
    need = max(dispatch_bytes(num_ranks, num_max_tokens_per_rank, slot),
               combine_bytes(num_ranks, num_max_tokens_per_rank, k, row, allow_multiple_reduction))
    return align(need, ALLOCATION_ALIGNMENT)
