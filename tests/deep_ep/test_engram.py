"""EngramBuffer: a table sharded over the ranks, fetched by global entry id; checked against the
all-gathered table indexed directly (BF16 and FP8 with replicated scales), over shared memory and
over the collective transport, and on the Ascend path (the device table and the gather kernel on the twin,
no host read of the ids, zero rows for out-of-range ids); bad arguments and a fetch before any write are
refused."""
import torch
import torch.distributed as dist

from tests.testkit.distributed import in_sequence, run_ranks, with_env

ENTRIES, HIDDEN, TOKENS, PER_TOKEN = [40, 24], 256, 16, 3


def _buffer(dtype, packs):
    """An EngramBuffer sized by its own hints for ENTRIES / HIDDEN / TOKENS / PER_TOKEN."""
    import deep_ep
    gpu_bytes, storage_bytes = deep_ep.EngramBuffer.get_storage_size_hint(
        dist.group.WORLD, ENTRIES, HIDDEN, TOKENS, PER_TOKEN, dtype, packs)
    qps, depth, restrict = deep_ep.EngramBuffer.get_theoretical_config(dist.group.WORLD, len(ENTRIES), TOKENS,
                                                                       PER_TOKEN)
    return deep_ep.EngramBuffer(dist.group.WORLD, gpu_bytes, storage_bytes, True, qps, depth, restrict,
                                explicitly_destroy=True), qps


def _shards(g, world, dtype, use_fp8):
    """This rank's random shards (and replicated scales for FP8) and every layer's all-gathered table, built
    by hand: ``(storages, sfs, tables)``."""
    from deep_ep.utils.math import per_token_cast_to_fp8
    storages, sfs, tables = [], [] if use_fp8 else None, []
    for n in ENTRIES:
        local = torch.randn(n, HIDDEN, generator=g).bfloat16()
        if use_fp8:
            local, local_sf = per_token_cast_to_fp8(local)
            every = [None] * world
            dist.all_gather_object(every, local_sf)
            sfs.append(torch.cat(every))
        storages.append(local)
        every = [None] * world
        dist.all_gather_object(every, local.view(torch.uint8))
        tables.append(torch.cat(every).view(dtype))
    return storages, sfs, tables


def _engram(rank, world):
    out = {}
    for use_fp8 in (False, True):
        dtype = torch.float8_e4m3fn if use_fp8 else torch.bfloat16
        packs = HIDDEN // 128 if use_fp8 else 0
        buf, qps = _buffer(dtype, packs)
        no_ids = torch.zeros(len(ENTRIES), TOKENS, PER_TOKEN, dtype=torch.int32)
        _refused("dtype: expected one of", buf.set_config, ENTRIES, HIDDEN, TOKENS, PER_TOKEN, torch.float16, packs)
        _refused(f"num_sf_packs: expected {'> 0 (scale packs per entry)' if use_fp8 else 0} for a {dtype} table, "
                 f"got {1 - bool(packs)}", buf.set_config, ENTRIES, HIDDEN, TOKENS, PER_TOKEN, dtype, 1 - bool(packs))
        buf.set_config(ENTRIES, HIDDEN, TOKENS, PER_TOKEN, dtype, packs)
        _refused("before fetch", buf.fetch, no_ids)  # configured, nothing written yet
        _refused("storages: expected a list of 2 layers, got a list of 1", buf.write, [torch.zeros(ENTRIES[0], HIDDEN, dtype=dtype)])
        g = torch.Generator().manual_seed(rank)
        storages, sfs, tables = _shards(g, world, dtype, use_fp8)
        buf.write(storages, sfs)
        for _ in range(2):
            indices = torch.stack([torch.randint(0, world * n, (TOKENS, PER_TOKEN), generator=g, dtype=torch.int32)
                                   for n in ENTRIES])
            hooks = buf.fetch(indices)
            for layer in reversed(range(len(ENTRIES))):  # hooks may be waited in any order
                got = hooks[layer]()
                data, sf = got if use_fp8 else (got, None)
                flat = indices[layer].reshape(-1).long()
                assert torch.equal(data.view(torch.uint8), tables[layer][flat].reshape(TOKENS, -1).view(torch.uint8))
                if use_fp8:
                    assert torch.equal(sf, sfs[layer][flat].reshape(TOKENS, -1))
        _refused("num_qps: expected a value in", buf.fetch, no_ids, num_qps=qps + 1)
        _refused("indices: expected shape (2, *, 3)", buf.fetch, no_ids[:, :, :1])
        bad = torch.zeros(len(ENTRIES), TOKENS, PER_TOKEN, dtype=torch.int32)
        bad[1, 2, 0] = world * ENTRIES[1]
        _refused(f"indices: expected entries in [0, {world * ENTRIES[1]}) for layer 1, got indices[1, 2, 0] = "
                 f"{world * ENTRIES[1]}", buf.fetch, bad)
        out[use_fp8] = buf._window is not None
        buf.destroy()
    return out


def _engram_ascend(rank, world):
    """EP_BACKEND=ascend: the table all-gathered on the device and fetched by the gather kernel on the twin,
    with no host read of the ids; an out-of-range id gives a zero row (the host path refuses it)."""
    from deep_ep import _dispatch
    from tests.testkit.host_reads import DeviceOnly, mark
    served = []
    for use_fp8 in (False, True):
        dtype = torch.float8_e4m3fn if use_fp8 else torch.bfloat16
        packs = HIDDEN // 128 if use_fp8 else 0
        buf, _ = _buffer(dtype, packs)
        buf.set_config(ENTRIES, HIDDEN, TOKENS, PER_TOKEN, dtype, packs)
        g = torch.Generator().manual_seed(rank)
        storages, sfs, tables = _shards(g, world, dtype, use_fp8)
        buf.write(storages, sfs)
        indices = torch.stack([torch.randint(0, world * n, (TOKENS, PER_TOKEN), generator=g, dtype=torch.int32)
                               for n in ENTRIES])
        indices[1, 2, 0] = world * ENTRIES[1]   # out of range
        indices[0, 5, 2] = -1
        served.append(_dispatch.TABLE.serves("engram_gather", indices.device, [buf._tables[0]],
                                             buf._tables[0].shape[0], indices[0].reshape(-1), 1))
        with DeviceOnly():
            hooks = buf.fetch(mark(indices.clone())[0])
        for layer in range(len(ENTRIES)):
            got = hooks[layer]()
            data, sf = got if use_fp8 else (got, None)
            flat = indices[layer].reshape(-1).long()
            inside = (flat >= 0) & (flat < world * ENTRIES[layer])
            row_bytes = HIDDEN * dtype.itemsize
            want = torch.zeros(flat.numel(), row_bytes, dtype=torch.uint8)
            want[inside] = tables[layer].view(torch.uint8)[flat[inside]]
            assert torch.equal(data.view(torch.uint8).reshape(flat.numel(), row_bytes), want)
            if use_fp8:
                want_sf = torch.zeros(flat.numel(), packs)
                want_sf[inside] = sfs[layer][flat[inside]]
                assert torch.equal(sf.reshape(flat.numel(), packs), want_sf)
        buf.destroy()
    return served


def _refused(fragment, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except ValueError as exc:
        assert fragment in str(exc), str(exc)
        return
    raise AssertionError(f"expected a ValueError saying {fragment!r}")


def test_engram_over_shared_memory_over_collectives_and_on_ascend():
    """Shared memory, then the collective transport forced (the path between hosts), then the Ascend
    path on the twin: one spawn."""
    steps = (_engram,), (with_env, {"EP_TRANSPORT": "dist"}, _engram), (with_env, {"EP_BACKEND": "ascend"},
                                                                        _engram_ascend)
    assert run_ranks(in_sequence, 2, *steps, timeout=240) == [[{False: True, True: True},
                                                               {False: False, True: False},
                                                               ["ascend", "ascend"]]] * 2
