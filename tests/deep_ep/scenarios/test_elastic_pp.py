"""V2.1 ``ElasticBuffer`` pipeline-parallel calls, upstream-style (written for this suite, small
sizes): every rank replays one global, randomly timed schedule of sends to a ring neighbour and
the matching receives (FIFO per pair, more sends in flight than the in-flight limit), under
inference mode and a BF16 default dtype; received tensors equal what was sent; ``barrier``."""
import random
import re

import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

SHAPE = (8, 64)


def _schedule(rank, world, num_sends, seed):
    rng = random.Random(seed)
    ops = []
    per_pair = {}
    for _ in range(num_sends):
        src = rng.randrange(world)
        dst = (src + rng.choice((1, -1))) % world
        sent = rng.randrange(10 ** 6)
        per_pair.setdefault((src, dst), []).append((sent, sent + rng.randrange(1, 3 * 10 ** 5)))
    for (src, dst), times in per_pair.items():
        sends = sorted(t for t, _ in times)
        recvs = sorted(t for _, t in times)
        for i in range(len(times)):
            g = torch.Generator().manual_seed(seed * 10007 + src * 101 + dst * 11 + i)
            tensor = torch.randn(SHAPE, generator=g, dtype=torch.float32).bfloat16()
            if src == rank:
                ops.append((sends[i], i, "send", dst, tensor))
            if dst == rank:
                ops.append((recvs[i], i, "recv", src, tensor))
    return sorted(ops, key=lambda o: (o[0], o[1]))


def _pp(rank, world):
    import deep_ep
    torch.set_default_dtype(torch.bfloat16)
    nbytes = SHAPE[0] * SHAPE[1] * 2
    with torch.inference_mode():
        buf = deep_ep.ElasticBuffer(dist.group.WORLD, num_bytes=deep_ep.ElasticBuffer.get_pp_buffer_size_hint(nbytes, 2),
                                    explicitly_destroy=True, allow_hybrid_mode=False)
        with pytest.raises(RuntimeError, match="pp_set_config"):
            buf.pp_send(torch.zeros(SHAPE, dtype=torch.bfloat16), (rank + 1) % world)
        buf.pp_set_config(nbytes, 2)
        for seed in range(3):
            for _, _, op, peer, tensor in _schedule(rank, world, 24, seed):
                if op == "send":
                    staged = tensor.clone()
                    buf.pp_send(staged, peer)
                    staged.zero_()   # the caller may reuse its tensor at once
                else:
                    got = torch.empty_like(tensor)
                    buf.pp_recv(got, peer)
                    assert torch.equal(got, tensor), (rank, peer)
            buf.barrier()
        ring = sorted({(rank + 1) % world, (rank - 1) % world})
        with pytest.raises(ValueError, match=re.escape(f"dst_rank_idx: expected a ring neighbour of rank {rank} ({ring}), "
                                                       f"got {rank}")):
            buf.pp_send(torch.zeros(SHAPE, dtype=torch.bfloat16), rank)
        buf.barrier(use_comm_stream=True, with_cpu_sync=True, sequential=True)
        buf.destroy()
    return True


@pytest.mark.parametrize("world", [2, 3])
def test_elastic_pp_send_recv_schedule(world):
    assert run_ranks(_pp, world, timeout=120) == [True] * world
