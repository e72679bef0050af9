"""BucketBuffer collectives and EPBuffer load-balancing transfers, over the shared-memory window
(3 ranks) and over collectives (2 ranks, transport forced), checked exactly."""
import os
import re

import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import in_sequence, run_ranks


def _values(rank, n, salt):
    return torch.arange(n, dtype=torch.float32) * (rank + 1) + salt * 1000


def _bucket(rank, world, transport):
    import deep_ep
    os.environ["EP_TRANSPORT"] = transport
    plan = deep_ep.BufferAllocator()
    gathered = plan.allocate((world * 64,), torch.float32)
    reduced = plan.allocate((world * 32,), torch.float32)
    scattered = plan.allocate((world * 48,), torch.float32)
    shard = plan.allocate((64,), torch.float32)
    buf = deep_ep.BucketBuffer(dist.group.WORLD, plan, explicitly_destroy=True)
    assert gathered.device.type == "cpu" and buf.storage.numel() == plan.num_bytes

    gathered[rank * 64:(rank + 1) * 64] = _values(rank, 64, 1)
    out = buf.all_gather(gathered[rank * 64:(rank + 1) * 64]).wait()
    assert out.data_ptr() == gathered.data_ptr()
    assert torch.equal(out, torch.cat([_values(r, 64, 1) for r in range(world)]))
    dst = torch.empty(world, 64, dtype=torch.float32)
    shard.copy_(_values(rank, 64, 1))
    (got,) = buf.all_gather([shard], dsts=[dst]).wait()
    assert torch.equal(dst.view(-1), out) and torch.equal(got, out)
    with pytest.raises(ValueError, match="registered offsets"):  # a source at a different offset per rank
        buf.all_gather(gathered[rank * 64:(rank + 1) * 64], dsts=dst)

    reduced.copy_(_values(rank, world * 32, 2))
    buf.all_reduce(reduced, scale=0.5).wait()
    assert torch.equal(reduced, sum(_values(r, world * 32, 2) for r in range(world)) * 0.5)
    scattered.copy_(_values(rank, world * 48, 3))
    mine = buf.reduce_scatter(scattered, scale=2.0).wait()
    expected = (sum(_values(r, world * 48, 3) for r in range(world)) * 2.0)[rank * 48:(rank + 1) * 48]
    assert torch.equal(mine, expected) and torch.equal(scattered[rank * 48:(rank + 1) * 48], expected)

    plain = _values(rank, 16, 4)
    with pytest.raises(ValueError, match=re.escape("srcs[0]: expected a tensor in this BucketBuffer's storage (allocate it with "
                                                  "the BufferAllocator plan) or a call inside `with buffer.session():`, got a "
                                                  "tensor not registered in the storage")):
        buf.all_reduce(plain)
    with buf.session():
        got = buf.all_gather(plain).wait()
        buf.all_reduce(plain).wait()
    assert torch.equal(got, torch.cat([_values(r, 16, 4) for r in range(world)]))
    assert torch.equal(plain, sum(_values(r, 16, 4) for r in range(world)))
    buf.destroy()
    return buf.contexts[0].transport_kind


def _lb(rank, world, transport):
    import deep_ep
    os.environ["EP_TRANSPORT"] = transport
    plan = deep_ep.BufferAllocator()
    red_w = plan.allocate((2, 8), torch.float32)
    red_g = plan.allocate((2, 8), torch.float32)
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=8, hidden=128, num_topk=2,
                           lb_allocation_plan_or_num_bytes=plan, explicitly_destroy=True)
    num_local = 2
    weights = torch.stack([(rank * num_local + e) * 10 + torch.arange(8.0, dtype=torch.float32) for e in range(num_local)])
    # Rank r hosts both experts of rank r + 1 in its two redundant slots.
    mapping = torch.tensor([[((r + 1) % world) * 2, ((r + 1) % world) * 2 + 1] for r in range(world)],
                           dtype=torch.int32)
    buf.lb_prefetch_weights(red_w, weights, mapping).wait()
    for c in range(2):
        e = int(mapping[rank, c])
        assert torch.equal(red_w[c], e * 10 + torch.arange(8.0, dtype=torch.float32))
    red_g.copy_(torch.stack([torch.full((8,), rank + c + 1.0, dtype=torch.float32) for c in range(2)]))
    grads = torch.ones(num_local, 8, dtype=torch.float32)
    buf.lb_reduce_grads(red_g, grads, mapping).wait()
    for local in range(num_local):
        contrib = sum(r + c + 1.0 for r in range(world) for c in range(2) if int(mapping[r, c]) == rank * 2 + local)
        assert torch.equal(grads[local], torch.full((8,), 1.0 + contrib, dtype=torch.float32))
    with pytest.raises(ValueError, match=re.escape(
            "redundancy_mapping: expected rows naming other ranks' experts (a rank must not host its own experts), "
            "got rank 0 hosting its own expert 0")):
        buf.lb_prefetch_weights(red_w, weights, torch.arange(world * 2, dtype=torch.int32).view(world, 2))
    buf.destroy()

    # PPBuffer: two tensors around the ring, matched in order.
    pp = deep_ep.PPBuffer(dist.group.WORLD, 1024, 4, explicitly_destroy=True)
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    sent = [pp.send(torch.full((16,), 100.0 * rank + i, dtype=torch.float32), nxt) for i in range(2)]
    got = [torch.empty(16, dtype=torch.float32) for _ in range(2)]
    for i in range(2):
        pp.recv(got[i], prv).wait()
    for e in sent:
        e.wait()
    assert [g[0].item() for g in got] == [100.0 * prv, 100.0 * prv + 1]
    with pytest.raises(ValueError, match=re.escape("x: expected at most num_max_tensor_bytes (1024) bytes, got 4000 bytes")):
        pp.send(torch.empty(1000, dtype=torch.float32), nxt)
    pp.destroy()
    return True


@pytest.mark.parametrize("world, transport", [(3, "shm"), (2, "dist")])
def test_bucket_and_load_balancing(world, transport):
    outs = run_ranks(in_sequence, world, (_bucket, transport), (_lb, transport), timeout=180)
    assert outs == [[transport, True]] * world
