"""Upstream's ``flash_mla.flash_mla_interface`` module path: the six public ops, the scheduling metadata
and the private dense-prefill entry points upstream's tests and callers import from here."""
from .interface import (
    FlashAttnVarlenFunc,
    _flash_attn_varlen_backward,
    _flash_attn_varlen_forward,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_mla_sparse_fwd,
    flash_mla_with_kvcache,
)
from .metadata import FlashMLASchedMeta, get_mla_metadata

__all__ = ["get_mla_metadata", "flash_mla_with_kvcache", "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
           "flash_attn_varlen_kvpacked_func", "flash_mla_sparse_fwd", "FlashMLASchedMeta", "FlashAttnVarlenFunc",
           "_flash_attn_varlen_forward", "_flash_attn_varlen_backward"]
