"""Scheduling metadata: the lazy ``FlashMLASchedMeta`` of the current upstream API.

``get_mla_metadata`` ignores its arguments (the older positional form
``get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, h_kv, h_q, is_fp8, topk)`` is still accepted)
and returns ``(FlashMLASchedMeta(), None)``. The first ``flash_mla_with_kvcache`` call records the
shape configuration; later calls with the same object must match it. These paths run every request
in one piece (no split-KV), so ``num_splits`` is upstream's per-request split prefix sum for that
schedule, ``[0, 1, ..., b]`` (int32, on q's device); ``tile_scheduler_metadata`` (upstream's per-SM
work ranges) has no counterpart and stays ``None``.
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class FlashMLASchedMeta:
    @dataclasses.dataclass
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: int | None
        extra_page_block_size: int | None
        extra_topk: int | None
        enable_batch_invariant: bool = False

    have_initialized: bool = False
    config: Config | None = None
    tile_scheduler_metadata: torch.Tensor | None = None
    num_splits: torch.Tensor | None = None


def get_mla_metadata(*args, **kwargs) -> tuple[FlashMLASchedMeta, None]:
    """An empty ``FlashMLASchedMeta``, filled by the first decode call (arguments are ignored)."""
    return FlashMLASchedMeta(), None


def record_or_check(meta: FlashMLASchedMeta, config: FlashMLASchedMeta.Config, device=None) -> None:
    """Records ``config`` (and the one-split-per-request ``num_splits``) on first use; afterwards every
    field must be equal (ValueError naming it)."""
    if not meta.have_initialized:
        meta.config = config
        meta.num_splits = torch.arange(config.b + 1, dtype=torch.int32, device=device)
        meta.have_initialized = True
        return
    if meta.config is None:
        raise ValueError("tile_scheduler_metadata: marked initialised but holds no config")
    for field in dataclasses.fields(config):
        want, got = getattr(meta.config, field.name), getattr(config, field.name)
        if want != got:
            raise ValueError(f"tile_scheduler_metadata: expected config.{field.name} {want!r} as on the first call "
                             f"(use one FlashMLASchedMeta per shape configuration), got {got!r}")
