"""DeepEP and DeepEP-Ascend: expert-parallel dispatch and combine.

V2.5 buffers (``EPBuffer``, ``BucketBuffer``, ``EngramBuffer``, ``PPBuffer``, ``BufferAllocator``,
``BufferBase``),
the V2.1 ``ElasticBuffer`` and the V1 ``Buffer`` facade, over a symmetric shared-memory window
between the ranks of one host and ``torch.distributed`` collectives across hosts.
"""

from deepjit.guard import warn_if_upstream_installed  # noqa: E402

from ._lib import __version__  # noqa: F401  (beside LIB: the version keys the kernel cache)

warn_if_upstream_installed("deep_ep", "deep-ep-ascend", ("deep_ep",))

import torch  # noqa: E402

topk_idx_t = torch.int64

from . import comm  # noqa: E402
from .buffers.allocator import BufferAllocator  # noqa: E402
from .buffers.base import BufferBase  # noqa: E402
from .buffers.bucket import BucketBuffer  # noqa: E402
from .buffers.elastic import ElasticBuffer  # noqa: E402
from .buffers.engram import EngramBuffer  # noqa: E402
from .buffers.ep import EPBuffer  # noqa: E402
from .buffers.legacy import Buffer, Config  # noqa: E402
from .buffers.pp import PPBuffer  # noqa: E402
from .comm import (  # noqa: E402
    destroy_all_managed_hccl_comm,
    destroy_all_managed_nccl_comm,
    get_logical_domain_size,
    get_physical_domain_size,
)
from .engine.handle import EPHandle  # noqa: E402
from .engine.layout import ALLOCATION_ALIGNMENT, RDMA_ALIGNMENT, TMA_ALIGNMENT  # noqa: E402
from .engine.session import BufferBrokenError  # noqa: E402
from .utils.event import EventHandle, EventOverlap  # noqa: E402


def get_num_allocation_alignment() -> int:
    return ALLOCATION_ALIGNMENT


def get_num_tma_alignment() -> int:
    return TMA_ALIGNMENT


def get_num_rdma_alignment() -> int:
    return RDMA_ALIGNMENT


def get_buffer_size_hint(group, num_max_tokens_per_rank: int, hidden: int, num_topk: int = 0,
                         use_fp8_dispatch: bool = False, allow_hybrid_mode: bool = True,
                         allow_multiple_reduction: bool = True) -> int:
    return EPBuffer.get_buffer_size_hint(group, num_max_tokens_per_rank, hidden, num_topk, use_fp8_dispatch,
                                         allow_hybrid_mode, allow_multiple_reduction)


__all__ = ["BucketBuffer", "Buffer", "BufferAllocator", "BufferBase", "BufferBrokenError", "Config", "EPBuffer", "ElasticBuffer", "EngramBuffer", "EPHandle", "EventHandle",
           "EventOverlap", "comm", "destroy_all_managed_hccl_comm", "destroy_all_managed_nccl_comm",
           "get_buffer_size_hint", "get_logical_domain_size", "get_num_allocation_alignment", "get_num_rdma_alignment",
           "get_num_tma_alignment", "get_physical_domain_size", "topk_idx_t", "PPBuffer"]
