"""deep_ep argument errors no other test reaches, each with its full message
(``"<name>: expected <what>, got <value>"``) and exception type: the V1 ``Config`` and ``Buffer`` class
methods and constructor arguments, the ``deep_ep.utils`` helpers, ``EP_TRANSPORT``, the allocator, and
the buffers' own arguments. One process: a one-rank gloo group over a HashStore, made and destroyed
by the module's fixture."""

import pytest
import torch

import deep_ep
from deep_ep.buffers.ep import _check_async_flags
from deep_ep.transport.topology import forced_transport
from deep_ep.utils import gate, refs
from deep_ep.utils.math import inplace_unique, per_token_cast_to_fp8
from tests.testkit.distributed import one_rank_group
from tests.testkit.errors import refused

V1_RANKS = (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160)


def test_v1_config_and_class_methods():
    refused(ValueError, "num_sms: expected an even number, got 3", deep_ep.Config, 3)
    refused(ValueError, "num_max_nvl_chunked_send_tokens: expected a value < num_max_nvl_chunked_recv_tokens (8), "
             "got 8", deep_ep.Config, 20, 8, 8)
    refused(ValueError, "new_num_sms: expected an even number, got 3", deep_ep.Buffer.set_num_sms, 3)
    assert deep_ep.Buffer.num_sms % 2 == 0
    for which in ("dispatch", "combine"):
        refused(ValueError, f"num_ranks: expected one of {V1_RANKS} (the ranks with a {which} config), got 3",
                 getattr(deep_ep.Buffer, f"get_{which}_config"), 3)


def test_v1_buffer_sizes_before_any_group_is_touched():
    refused(ValueError, "group: expected a torch.distributed group (mpi4py comm is not supported here), got None",
             deep_ep.Buffer, None, 1 << 20)
    refused(ValueError, "num_nvl_bytes: expected a non-negative multiple of 128, got 100",
             deep_ep.Buffer, None, 100, comm=object())
    refused(ValueError, "num_rdma_bytes: expected a non-negative multiple of 128, got True",
             deep_ep.Buffer, None, 128, True, comm=object())
    refused(ValueError, "num_nvl_bytes: expected a value > 0, or num_rdma_bytes > 0, got 0 with num_rdma_bytes 0",
             deep_ep.Buffer, None, 0, 0, comm=object())


def test_utils_helpers(monkeypatch):
    refused(ValueError, "x: expected a hidden size (dim 1) that is a multiple of 128, got shape (4, 100)",
             per_token_cast_to_fp8, torch.zeros(4, 100))
    refused(ValueError, "x: expected a 2-D tensor, got shape (4,)", inplace_unique, torch.zeros(4, dtype=torch.long), 8)
    refused(ValueError, "rank_count: expected shape (3, 2) with rows summing to num_topk (2), got shape (3, 3)",
             gate.generate_topk_idx, torch.ones(3, 3, dtype=torch.int32), 3, 8, 2, 2)
    refused(ValueError, "rank_count: expected shape (3, 2) with rows summing to num_topk (2), got row sums [1, 2]",
             gate.generate_topk_idx, torch.tensor([[1, 1], [1, 0], [2, 0]], dtype=torch.int32), 3, 8, 2, 2)
    refused(ValueError, "ratio: expected a value >= 1, got 0.5", gate.generate_rank_count, 4, 8, 2, 2, 0.5)
    refused(ValueError, "reduce_in_scaleup: expected False unless reduce_in_local=True, got True with "
             "reduce_in_local=False", refs.combine, torch.zeros(2, 1, 8), torch.zeros(2, 1, dtype=torch.long), 1, 1, 2,
             None, False, True)
    monkeypatch.setenv("EP_TRANSPORT", "rdma")
    refused(ValueError, "EP_TRANSPORT: expected one of auto, shm, hybrid, dist, got 'rdma'", forced_transport)


def test_allocator_and_size_hints():
    plan = deep_ep.BufferAllocator()
    plan.allocate((2, 8), torch.float32)
    refused(ValueError, f"storage: expected uint8 with at least {plan.num_bytes} bytes, got torch.float32 with 1",
             plan.materialize, torch.zeros(1))
    refused(TypeError, "dtype: expected a torch.dtype, got str",
             deep_ep.ElasticBuffer.get_engram_storage_size_hint, 8, 64, 4, "bfloat16")


@pytest.fixture(scope="module")
def group():
    with one_rank_group() as g:
        yield g


def test_ep_buffer_arguments(group):
    refused(ValueError, "num_bytes: expected a size, or the MoE shape (num_max_tokens_per_rank > 0 and hidden > 0), "
             "got None with num_max_tokens_per_rank=0, hidden=128", deep_ep.EPBuffer, group, hidden=128)
    refused(ValueError, "num_bytes: expected a positive int, got -1", deep_ep.EPBuffer, group, num_bytes=-1)
    refused(ValueError, "previous_event: expected None unless allocate_on_comm_stream=True, got an event",
             _check_async_flags, deep_ep.EventHandle(), False, False, False)
    refused(ValueError, "defer_epilogue: expected False unless async_with_compute_stream=True, got True",
             _check_async_flags, None, False, False, True)
    refused(TypeError, "previous_event: expected an EventHandle, got int", _check_async_flags, 3, False, True, False)
    plan = deep_ep.BufferAllocator()
    slots = plan.allocate((2, 8), torch.float32)
    buf, other = (deep_ep.EPBuffer(group, num_max_tokens_per_rank=4, hidden=128, num_topk=2, explicitly_destroy=True,
                                   lb_allocation_plan_or_num_bytes=p) for p in (plan, 0))
    try:
        x, idx = torch.zeros(4, 128, dtype=torch.bfloat16), torch.tensor([[0, 1]] * 4)
        refused(ValueError, "do_handle_copy: expected False (EPBuffer keeps topk_idx by reference), got True",
                 buf.dispatch, x, idx, num_experts=2, do_handle_copy=True)
        recv_x, _, _, handle, _ = buf.dispatch(x, idx, num_experts=2)
        refused(ValueError, "handle: expected a handle this buffer made, got a handle of another buffer",
                 other.dispatch, x, handle=handle)
        refused(ValueError, "handle: expected a handle this buffer made, got a handle of another buffer",
                 other.combine, recv_x, handle)
        if buf._session.transport_kind == "shm":   # the LB region is the window's: offsets are checked
            refused(ValueError, "redundant_expert_weights[0]: expected a contiguous tensor planned in the buffer's "
                     "LB region (lb_allocation_plan_or_num_bytes), got a tensor outside it", buf.lb_prefetch_weights,
                     [torch.zeros(2, 8)], [torch.zeros(2, 8)], torch.full((1, 2), -1, dtype=torch.int32))
            refused(ValueError, "redundant_expert_weights[0]: expected a tensor planned in the buffer's LB region, "
                     "got a buffer created without one (lb_allocation_plan_or_num_bytes)", other.lb_prefetch_weights,
                     [torch.zeros(2, 8)], [torch.zeros(2, 8)], torch.full((1, 2), -1, dtype=torch.int32))
            refused(ValueError, "redundant_expert_grads: expected a contiguous tensor planned in the buffer's LB "
                     "region (lb_allocation_plan_or_num_bytes), got strides (1, 2)", buf.lb_reduce_grads,
                     slots.view(8, 2).t(), torch.zeros(2, 8), torch.full((1, 2), -1, dtype=torch.int32))
    finally:
        buf.destroy()
        other.destroy()
    refused(ValueError, "num_cpu_bytes: expected a non-negative int, got -1",
             deep_ep.ElasticBuffer, group, num_bytes=1 << 20, num_cpu_bytes=-1)
    refused(ValueError, "num_bytes: expected GPU + CPU bytes, more than num_cpu_bytes (4096), got 4096",
             deep_ep.ElasticBuffer, group, num_bytes=4096, num_cpu_bytes=4096)
    refused(ValueError, "num_max_inflight_tensors: expected a positive int, got 0", deep_ep.PPBuffer, group, 1024, 0)
    pp = deep_ep.PPBuffer(group, 1024, 2, explicitly_destroy=True)
    try:
        refused(ValueError, "x: expected a contiguous tensor, got strides (1, 4)", pp.send, torch.zeros(4, 4).t(), 0)
        refused(ValueError, "x: expected a contiguous tensor, got list", pp.recv, [0.0], 0)
    finally:
        pp.destroy()


def test_v1_buffer_arguments(group):
    buf = deep_ep.Buffer(group, 1 << 20, explicitly_destroy=True)
    try:
        refused(TypeError, "dtype: expected a torch.dtype, got str", buf.get_local_buffer_tensor, "int8")
        refused(ValueError, f"offset: expected a multiple of 4 in [0, {1 << 20}], got 2",
                 buf.get_local_buffer_tensor, torch.float32, offset=2)
        refused(ValueError, "size: expected non-negative ints, got (2, -1)", buf.get_local_buffer_tensor,
                 torch.int8, (2, -1))
        refused(ValueError, f"size: expected at most the buffer's {1 << 20} bytes from offset 4, got {1 << 18} "
                 f"elements of torch.float32", buf.get_local_buffer_tensor, torch.float32, 1 << 18, 4)
        refused(ValueError, "low_latency_mode: expected True at construction for low_latency_dispatch, got False",
                 buf.low_latency_dispatch, torch.zeros(2, 128, dtype=torch.bfloat16),
                 torch.zeros(2, 1, dtype=torch.int64), 2, 2)
    finally:
        buf.destroy()


def test_bucket_buffer_arguments(group):
    refused(ValueError, "allocation_plan_or_num_bytes: expected a positive size, got 0", deep_ep.BucketBuffer, group, 0)
    buf = deep_ep.BucketBuffer(group, 1 << 12, explicitly_destroy=True)
    try:
        refused(ValueError, "comm_precision: expected 'fp32' or 'bf16', got 'fp8'", buf.reduce_scatter,
                 torch.zeros(4), comm_precision="fp8")
        refused(ValueError, "group: expected one of this BucketBuffer's groups, got another group",
                 buf.get_context_idx, object())
        refused(ValueError, "srcs: expected 1 to 64 tensors, got 0", buf.all_reduce, [])
        refused(TypeError, "srcs[0]: expected a tensor, got int", buf.all_reduce, [3])
        refused(TypeError, "srcs[0]: expected dtype torch.float32 for all_reduce, got torch.float16", buf.all_reduce,
                 torch.zeros(4, dtype=torch.float16))
        refused(ValueError, "dsts: expected 1 tensors like srcs, got 2", buf.all_gather, [torch.zeros(4)],
                 dsts=[torch.zeros(4), torch.zeros(4)])
        refused(ValueError, "dsts[0]: expected 1 x 4 elements, got 3", buf.all_gather, [torch.zeros(4)],
                 dsts=[torch.zeros(3)])
    finally:
        buf.destroy()
