"""V2.1 ``ElasticBuffer`` Engram and AGRS calls, upstream-style (written for this suite, small
sizes, under inference mode and a BF16 default dtype):

- Engram: every rank writes its shard (BF16, and FP8 with replicated scales), fetches random
  global ids and gets exactly the rows of the all-gathered table (both scale layouts); a rewrite
  replaces the table; misuse is refused by name.
- AGRS: one global random schedule of sessions, batched and single, in-place and copied gathers
  of odd sizes and mixed dtypes, handles waited out of order; every gathered tensor equals the
  ranks' tensors stacked; a full session, a misplaced in-place tensor and a handle waited after
  its session are refused.
Over shared memory and over the collective (cross-host) transport.
"""
import random
import re

import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

HIDDEN = 128


def _gathered_table(local: torch.Tensor, world: int) -> torch.Tensor:
    raw = local.contiguous().view(torch.uint8)
    parts = [torch.empty_like(raw) for _ in range(world)]
    dist.all_gather(parts, raw)
    return torch.cat(parts).view(local.dtype)


def _engram(rank, world):
    import deep_ep
    from deep_ep.utils.math import per_token_cast_to_fp8
    torch.set_default_dtype(torch.bfloat16)
    num_entries, num_tokens, per_token = 40, 6, 5
    with torch.inference_mode():
        gpu, cpu = deep_ep.ElasticBuffer.get_engram_storage_size_hint(num_entries, HIDDEN, num_tokens * per_token,
                                                                      torch.bfloat16)
        assert (gpu, cpu) == (2 << 20, 2 << 20)
        buf = deep_ep.ElasticBuffer(dist.group.WORLD, num_bytes=gpu + cpu, num_cpu_bytes=cpu,
                                    explicitly_destroy=True, num_allocated_qps=2, allow_multiple_reduction=False)
        assert buf.num_bytes == gpu + cpu
        with pytest.raises(ValueError, match="engram_write"):
            buf.engram_fetch(torch.zeros((1, 1), dtype=torch.int32))
        g = torch.Generator().manual_seed(1000 + rank)
        for round_idx, use_fp8 in enumerate((False, True, False)):
            local = torch.randn((num_entries, HIDDEN), generator=g, dtype=torch.float32).bfloat16() * (round_idx + 1)
            sf = None
            if use_fp8:
                local, local_sf = per_token_cast_to_fp8(local)
                sf = _gathered_table(local_sf, world)
            buf.engram_write(local, sf=sf)
            table = _gathered_table(local, world)
            ids = torch.randint(0, world * num_entries, (num_tokens, per_token), generator=g, dtype=torch.int32)
            ids[0, :world] = torch.arange(world, dtype=torch.int32) * num_entries + num_entries - 1  # every shard's last row
            for col_major in (False, True) if use_fp8 else (False,):
                data, fetched_sf = buf.engram_fetch(ids, use_tma_aligned_col_major_sf=col_major)()
                assert data.dtype == local.dtype and data.shape == (num_tokens, per_token * HIDDEN)
                assert torch.equal(data.view(torch.uint8), table[ids.view(-1)].view(num_tokens, -1).view(torch.uint8))
                if use_fp8:
                    assert torch.equal(fetched_sf, sf[ids.view(-1)].view(num_tokens, -1))
                    assert fetched_sf.stride() == ((1, num_tokens) if col_major else (fetched_sf.shape[1], 1))
                else:
                    assert fetched_sf is None
        with pytest.raises(ValueError, match=re.escape(f"indices: expected entries in [0, {world * num_entries}) for "
                                                       f"layer 0, got indices[0, 0, 0] = {world * num_entries}")):
            buf.engram_fetch(torch.full((1, 1), world * num_entries, dtype=torch.int32))
        with pytest.raises(ValueError, match=re.escape(f"indices: expected at most the {gpu // (HIDDEN * 2)} entries the "
                                                       f"buffer's GPU part holds (num_bytes - num_cpu_bytes = {gpu}), got "
                                                       f"{gpu // (HIDDEN * 2) + 1} entries")):
            buf.engram_fetch(torch.zeros((gpu // (HIDDEN * 2) + 1, 1), dtype=torch.int32))
        with pytest.raises(ValueError, match=re.escape("sf: expected the replicated scaling factors exactly when storage "
                                                       "is FP8 (storage: torch.bfloat16), got a tensor")):
            buf.engram_write(torch.zeros((num_entries, HIDDEN), dtype=torch.bfloat16), sf=torch.zeros(1, 1))
        buf.destroy()
        plain = deep_ep.ElasticBuffer(dist.group.WORLD, num_bytes=2 << 20, explicitly_destroy=True)
        with pytest.raises(ValueError, match=re.escape("num_cpu_bytes: expected a value > 0 at construction for "
                                                       "engram_write (see get_engram_storage_size_hint), got 0")):
            plain.engram_write(torch.zeros((num_entries, HIDDEN), dtype=torch.bfloat16))
        plain.destroy()
    return True


SHAPES = [((3, 5), torch.bfloat16), ((7,), torch.float32), ((2, 4, 6), torch.bfloat16), ((1,), torch.uint8)]


def _tensor(op, rank):
    shape, dtype = SHAPES[op % len(SHAPES)]
    g = torch.Generator().manual_seed(op * 131 + rank)
    return (torch.randn(shape, generator=g, dtype=torch.float32) * 50).to(dtype)


def _agrs(rank, world):
    import deep_ep
    torch.set_default_dtype(torch.bfloat16)
    max_inflight = 4
    with torch.inference_mode():
        need = deep_ep.ElasticBuffer.get_agrs_num_max_session_bytes(
            dist.group.WORLD, [s for s, _ in SHAPES], torch.float32)
        size = deep_ep.ElasticBuffer.get_agrs_buffer_size_hint(dist.group.WORLD, need)
        buf = deep_ep.ElasticBuffer(dist.group.WORLD, num_bytes=size, explicitly_destroy=True)
        with pytest.raises(RuntimeError, match="agrs_set_config"):
            buf.create_agrs_session()
        buf.agrs_set_config(need, max_inflight)
        rng = random.Random(7)   # the same schedule on every rank
        pending, checked, op = [], 0, 0
        buf.create_agrs_session()
        used_slots = used_bytes = 0
        for _ in range(40):
            choice = rng.random()
            batch = [op + i for i in range(rng.randint(1, 3))]
            room = used_slots + (1 if choice < 0.5 else len(batch)) <= max_inflight and used_bytes + sum(
                world * 4 * torch.Size(SHAPES[o % len(SHAPES)][0]).numel() + 32 for o in batch) <= need
            if choice < 0.8 and room:
                tensors = [_tensor(o, rank) for o in batch]
                if rng.random() < 0.5:   # in place: fill this rank's shards of the next slots
                    slots = buf.agrs_get_inplace_tensor(tuple(t.shape for t in tensors), tensors[0].dtype) \
                        if len({t.dtype for t in tensors}) == 1 else None
                    if slots is not None:
                        slots = slots if isinstance(slots, tuple) else (slots,)
                        for s, t in zip(slots, tensors, strict=True):
                            s.copy_(t)
                        tensors = list(slots)
                if choice < 0.5:
                    *outs, handle = buf.all_gather(tensors)
                    handles = [handle]
                    used_slots += 1
                else:
                    outs, handles = [], []
                    for t in tensors:
                        out, h = buf.all_gather(t)
                        outs.append(out)
                        handles.append(h)
                    used_slots += len(tensors)
                used_bytes += sum(o.numel() * o.element_size() + 32 for o in outs)
                pending.append((batch, outs, handles))
                op += len(batch)
            elif pending and choice < 0.95:
                batch, outs, handles = pending.pop(rng.randrange(len(pending)))
                for h in handles:
                    h()
                for o, out in zip(batch, outs, strict=True):
                    expected = torch.stack([_tensor(o, r) for r in range(world)])
                    assert torch.equal(out, expected), (rank, o)
                    checked += 1
            elif not pending:
                buf.destroy_agrs_session()
                buf.create_agrs_session()
                used_slots = used_bytes = 0
        buf.destroy_agrs_session()
        assert checked >= 10, checked
        with buf.agrs_new_session():
            with pytest.raises(ValueError, match=re.escape("t[0]: expected a tensor outside the AGRS buffer or this "
                                                           "rank's shard of the next slot")):
                slot = buf.agrs_get_inplace_tensor((7,), torch.float32)
                buf.all_gather(slot[1:])
            out, handle = buf.all_gather(_tensor(0, rank))
            with pytest.raises(RuntimeError, match="session is full"):
                for _ in range(max_inflight):
                    buf.all_gather(_tensor(1, rank))
        with pytest.raises(RuntimeError, match="destroyed"):
            handle()
        buf.destroy()
    return True


def _engram_and_agrs(rank, world):
    return _engram(rank, world) and _agrs(rank, world)


@pytest.mark.parametrize("world,transport", [(2, "shm"), (3, "shm"), (2, "dist")])
def test_elastic_engram_and_agrs(world, transport, monkeypatch):
    """``dist``: the collective path ranks on different hosts take."""
    monkeypatch.setenv("EP_TRANSPORT", transport)
    assert run_ranks(_engram_and_agrs, world, timeout=240) == [True] * world
