"""Launcher of ``kv_relayout.asc`` for the backend table's Ascend column of ``convert_kv_layout``.

``kv_relayout(quant_k_cache, fmt, to)`` takes the arguments ``kv_cache.convert_kv_layout`` validated
(a V4.1 cache ``[num_blocks, page, 1, bpt]`` with compact tokens, any block stride) and returns the
compact cache in placement ``to``, as the reference and the host kernel do. Every V4.1 cache is
covered, so there is no ``accepts`` predicate."""
from __future__ import annotations

import torch

from deepjit import descriptors, kernel_args

from .._lib import LIB
from .._operands import KVCacheFormat

TOKENS_PER_ITEM = 128  # kChunk of kv_relayout.asc: the tokens one vector core moves per work item


def kv_relayout(quant_k_cache: torch.Tensor, fmt: KVCacheFormat, to: str) -> torch.Tensor:
    nb, page = quant_k_cache.shape[0], quant_k_cache.shape[1]
    s = fmt.spec
    src = quant_k_cache.view(torch.uint8)
    out = torch.empty(nb, page, 1, s.bytes_per_token, dtype=torch.uint8, device=src.device)
    items = nb * -(-page // TOKENS_PER_ITEM)
    if items:
        fields = {"in": src, "out": out, "num_blocks": nb, "page": page, "in_block_stride": src.stride(0),
                  "data_bytes": s.data_bytes, "scale_bytes": s.scale_bytes, "to_block_split": int(to == "block_split")}
        struct = descriptors.struct_type(LIB.source("ascend/kernel_args.h"), "FmlaKvRelayoutArgs")
        LIB.ascend_kernel("fmla_kv_relayout", "ascend/kv_relayout.asc")(
            min(items, LIB.num_vector_cores(src.device)), kernel_args.pack(struct, **fields))
    return out.view(quant_k_cache.dtype)
