"""Outputs the caller keeps alive do not push dispatch or combine onto fresh memory: with three
earlier results still held (micro-batches in flight, layer after layer), every dispatch is written
straight into the output arena, and every combine output is a block of the arena too (faulted in
when the buffer was made), cycling through a bounded set of blocks. (A fresh multi-megabyte host
buffer costs a page fault per page, more than the operation itself: combine outputs from fresh
pooled memory made the first calls with results held ~6x slower at 4096 x 7168.)"""
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

from . import refs

# Combine outputs of T x H BF16 = 1 MiB: the size the engine's pool would otherwise serve.
T, H, E, K = 128, 4096, 16, 4
ALIVE, CALLS = 3, 8


def _reuse(rank, world):
    import deep_ep
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=T, hidden=H, num_topk=K,
                           explicitly_destroy=True)
    transport = buf._engine.transport
    arena = transport.arena_address(rank), transport.arena_address(rank) + transport.arena_bytes
    idx, w = refs.make_routing(T, K, E, seed=rank)
    x = refs.make_x(T, H, seed=rank)
    first = buf.dispatch(x, idx, w, num_experts=E)
    expect = first[0].clone(), first[1].clone()
    alive, outside = [first], 0
    first = None
    for _ in range(CALLS):
        out = buf.dispatch(x, idx, w, num_experts=E)
        assert torch.equal(out[0], expect[0]) and torch.equal(out[1], expect[1])
        outside += not arena[0] <= out[0].data_ptr() < arena[1]
        alive = [*alive, out][-ALIVE:]
        out = None
    handle, y = alive[-1][3], expect[0]
    alive = None
    ref, _, _ = buf.combine(y, handle)
    alive, storages, combine_outside = [], set(), 0
    for _ in range(CALLS):
        combined, _, _ = buf.combine(y, handle)
        assert torch.equal(combined, ref)
        storages.add(combined.untyped_storage().data_ptr())
        combine_outside += not arena[0] <= combined.data_ptr() < arena[1]
        alive = [*alive, combined][-ALIVE:]
    # An asynchronous combine hands out its output at once: from the arena too, filled by the epilogue.
    combined, _, event = buf.combine(y, handle, async_with_compute_stream=True)
    event.current_stream_wait()
    assert torch.equal(combined, ref)
    combine_outside += not arena[0] <= combined.data_ptr() < arena[1]
    kept = combined   # an output the caller still holds when the buffer goes stays readable
    alive = handle = combined = None
    buf.destroy()
    assert torch.equal(kept, ref)
    return outside, combine_outside, len(storages)


def test_outputs_alive_reuse_memory():
    for outside, combine_outside, num_storages in run_ranks(_reuse, 2):
        assert outside == 0, f"{outside} of {CALLS} dispatches fell back to private outputs"
        assert combine_outside == 0, f"{combine_outside} of {CALLS + 1} combine outputs are outside the output arena"
        # ALIVE held + the new one (+ the reference result) at most, never one per call.
        assert num_storages <= ALIVE + 2, f"{num_storages} distinct combine output buffers in {CALLS} calls"
