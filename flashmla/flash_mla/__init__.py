"""FlashMLA: sparse MLA attention over FP8/FP4 paged KV caches.

Drop-in for deepseek-ai/FlashMLA: ``get_mla_metadata``, ``flash_mla_with_kvcache`` (sparse decode
over the V3.2, MODEL1/V4 and V4.1 FP8/FP4 caches, and dense paged decode), ``flash_mla_sparse_fwd``
(sparse prefill) and the dense varlen prefill functions. CPU tensors run the host kernels in
``host/``; NPU tensors run the Ascend kernel in ``ascend/`` for sparse decode over every cache
format and placement and sparse prefill (d_qk 512 and 576), the plain-PyTorch ``reference/`` for the
rest. The KV-cache helpers live in ``kv_cache``.
"""
from deepjit.guard import warn_if_upstream_installed  # noqa: E402

warn_if_upstream_installed("flash_mla", "flash-mla-ascend", ("flash_mla",))

from . import flash_mla_interface, torch_ops  # noqa: E402,F401  (torch_ops registers torch.ops.flash_mla.*)
from ._lib import LIB, __version__  # noqa: E402,F401  (flash_mla.LIB: the handle tests and tools use)
from .interface import (  # noqa: E402
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_mla_sparse_fwd,
    flash_mla_with_kvcache,
)
from .kv_cache import (  # noqa: E402
    KVCacheFormat,
    abs_indices_to_indices_in_kvcache,
    convert_kv_layout,
    dequantize_k_cache,
    quantize_k_cache,
)
from .metadata import FlashMLASchedMeta, get_mla_metadata  # noqa: E402

__all__ = [
    "get_mla_metadata",
    "flash_mla_with_kvcache",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_mla_sparse_fwd",
    "FlashMLASchedMeta",
    "KVCacheFormat",
    "quantize_k_cache",
    "dequantize_k_cache",
    "convert_kv_layout",
    "abs_indices_to_indices_in_kvcache",
]
