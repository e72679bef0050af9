"""``convert_kv_layout`` in plain PyTorch: the oracle of the host relayout kernel."""
from __future__ import annotations

import torch

from .._operands import KVCacheFormat, gather_records


def relayout_reference(quant_k_cache: torch.Tensor, fmt: KVCacheFormat, to: str) -> torch.Tensor:
    """``convert_kv_layout`` on validated arguments, in plain PyTorch (the oracle of the host kernel)."""
    source = "interleaved" if to == "block_split" else "block_split"
    nb, p = quant_k_cache.shape[0], quant_k_cache.shape[1]
    s = fmt.spec
    rec = gather_records(quant_k_cache, fmt, source, torch.arange(nb * p, device=quant_k_cache.device))
    rec = rec.reshape(nb, p, s.bytes_per_token)
    if to == "interleaved":
        buf = rec.reshape(nb, p * s.bytes_per_token)
    else:
        buf = torch.cat([rec[:, :, :s.data_bytes].reshape(nb, p * s.data_bytes),   # explicit sizes: nb may be 0
                         rec[:, :, s.data_bytes:].reshape(nb, p * s.scale_bytes)], dim=1)
    return buf.contiguous().view(nb, p, 1, s.bytes_per_token).view(quant_k_cache.dtype)

