"""Plain-PyTorch implementations of every op: device-agnostic, FP32 math, the oracle of the tests."""
from .dense import dense_decode, varlen_attention
from .kv_layout import relayout_reference
from .sparse import KVScope, sparse_decode, sparse_prefill

__all__ = ["KVScope", "dense_decode", "relayout_reference", "sparse_decode", "sparse_prefill", "varlen_attention"]
