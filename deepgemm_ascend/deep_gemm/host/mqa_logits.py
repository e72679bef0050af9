"""MQA logits (DeepSeek lightning indexer) entry points; kernels in host/mqa_logits.cpp."""
from __future__ import annotations

import torch

from deepjit import descriptors

from ._lib import LIB, kernel, threads
from .gemm import _elem_type


def _params(s, h, d, s_kv, q, kv_type, logits, compressed=False, clean=False, next_n=1, block_kv=0, page=0,
            max_blocks=0, batch=0):
    """The kernels' named shape parameters (host/mqa_logits_args.hpp); keep it alive for the call."""
    return descriptors.pack(
        descriptors.struct_type(LIB.source("host/mqa_logits_args.hpp"), "MqaLogitsParams"), S=s, H=h, D=d,
        SKV=s_kv, q_type=_elem_type(q), kv_type=kv_type, ld=logits.stride(0),
        logits_f32=1 if logits.dtype == torch.float32 else 0, compressed=int(compressed), clean=int(clean),
        width=logits.size(1), next_n=next_n, block_kv=block_kv, page_stride=page, max_blocks=max_blocks, batch=batch)


def mqa_logits(q: torch.Tensor, q_sf: torch.Tensor | None, kv: torch.Tensor, kv_sf: torch.Tensor,
               weights: torch.Tensor, ks: torch.Tensor, ke: torch.Tensor, logits: torch.Tensor,
               compressed: bool = False, clean_logits: bool = True, num_threads: int | None = None) -> None:
    """``logits[i, j] = sum_h weights[i, h] * relu(q[i, h] . kv[j] * kv_sf[j])`` for j in ``[ks[i], ke[i])``.

    q ``[S, H, D]`` FP8 (``q_sf=None``) or FP4 ``[S, H, D/2]`` with FP32 ``q_sf [S, H, D/32]``;
    kv ``[S_kv, D]`` FP8 with FP32 ``kv_sf [S_kv]`` or FP4 ``[S_kv, D/2]`` with ``kv_sf [S_kv, D/32]``;
    weights ``[S, H]`` FP32; ks/ke int32 ``[S]``; logits ``[S, W]`` FP32 or BF16 (row stride free,
    unit column stride). Uncompressed: column j is KV position j, columns outside the range are
    -inf when ``clean_logits``. Compressed: column t is KV position ``ks[i] + t``, only
    ``t < ke - ks`` written. All tensors contiguous (logits: rows may be padded)."""
    s, h = weights.shape
    if s == 0:
        return
    kv_type = _elem_type(kv)
    d = kv.size(1) * (2 if kv_type == 2 else 1)
    p = _params(s, h, d, kv.size(0), q, kv_type, logits, compressed, clean_logits)
    kernel("dg_mqa_logits", "host/mqa_logits.cpp", {"DG_PAGED": 0})(
        descriptors.address(p), q, q_sf, kv, kv_sf, weights, ks.to(torch.int32).contiguous(),
        ke.to(torch.int32).contiguous(), logits,
        threads(num_threads))


def paged_mqa_logits(q, q_sf, kv_cache: torch.Tensor, weights, context_lens: torch.Tensor,
                     block_table: torch.Tensor, logits: torch.Tensor, clean_logits: bool = False,
                     num_threads: int | None = None) -> None:
    """Paged decode variant: q ``[B, next_n, H, D]`` (FP8) or FP4 ``[B, next_n, H, D/2]`` + FP32
    ``q_sf [B, next_n, H, D/32]``; kv_cache uint8 ``[num_blocks, block_kv, 1, D + 4]`` (FP8: per
    page all values, then one FP32 scale per token) or ``[..., D/2 + 4]`` (FP4: values, then one
    packed-UE8M0 int32 per token); ``stride(0)`` is the page stride in bytes. weights
    ``[B*next_n, H]`` FP32; context_lens int32 ``[B, next_n]``; block_table int32 ``[B, max_blocks]``;
    logits ``[B*next_n, W]``: row (b, t) gets positions ``[0, context_lens[b, t])``; other columns
    are -inf when ``clean_logits``, else untouched."""
    b, next_n, h = q.shape[:3]
    if b == 0:
        return
    row = kv_cache.size(-1) - 4
    kv_type = 2 if q_sf is not None else 1
    d = row * (2 if kv_type == 2 else 1)
    p = _params(b * next_n, h, d, 0, q, kv_type, logits, clean=clean_logits, next_n=next_n,
                block_kv=kv_cache.size(1), page=kv_cache.stride(0), max_blocks=block_table.size(1), batch=b)
    kernel("dg_paged_mqa_logits", "host/mqa_logits.cpp", {"DG_PAGED": 1})(
        descriptors.address(p), q, q_sf, kv_cache, weights, context_lens.to(torch.int32).contiguous(), block_table,
        logits,
        threads(num_threads))


def paged_mqa_metadata(context_lens: torch.Tensor, indices: torch.Tensor | None, num_sms: int) -> torch.Tensor:
    """int32 ``[num_sms + 1, 2]`` worker start points (kernel in host/mqa_metadata.cpp): ``context_lens``
    contiguous int32 ``[B, next_n]`` or 1-D ``[B]``, ``indices`` contiguous int32 ``[T]`` or None."""
    out = torch.empty(num_sms + 1, 2, dtype=torch.int32)
    next_n = context_lens.size(1) if context_lens.dim() == 2 else 1
    kernel("dg_paged_mqa_metadata", "host/mqa_metadata.cpp")(out, context_lens, context_lens.numel(), next_n, indices,
                                                               num_sms)
    return out
