"""V1 low-latency mode on the Ascend engine over the symmetric window (``EP_BACKEND=ascend
EP_ASCEND_TRANSPORT=symm``, deep_ep/ascend/ll_window.py), in real processes over gloo and the twin's
shared-memory windows:

- dispatch and combine through the window match the equal-split ``all_to_all`` path
  (``EP_ASCEND_TRANSPORT=hccl``) and the host engine
  bit for bit (BF16, FP8 with FP32 and power-of-two scales, uneven token counts, a rank with no token),
  on 2 ranks, and the oracle of tests/deep_ep/test_low_latency.py on 3 ranks; rows wider than the window's
  UB row buffer take the collectives (same bits);
- they read nothing back on the host (the device-only guard of tests/testkit/host_reads.py over the
  inputs, every staging buffer the kernels write and the mask they read);
- shrink masks (``enable_shrink=True``), on 3 ranks with the last one failed: masked by hand, its tokens
  are neither sent nor awaited, its slots read as empty and its experts add nothing, the same results as
  the host engine with the same mask; query and clean; masked automatically when a wait times out.
Without the window (the collective transport) ``enable_shrink`` is refused. Ranks on two hosts (simulated):
the default (``auto``) takes the collectives, ``symm`` is refused naming EP_ASCEND_TRANSPORT.
"""
import contextlib
import time

import torch
import torch.distributed as dist

from tests.testkit.distributed import environ, run_ranks
from tests.testkit.host_reads import DeviceOnly, mark

from .. import refs
from ..faults import expect_error, late_first_call
from ..test_low_latency import LH, LM, K, _buffer, _expert_output, _gather, _oracle_exact
from .test_low_latency import _two_in_flight

SYMM = {"EP_BACKEND": "ascend", "EP_ASCEND_TRANSPORT": "symm"}
FORMATS = ((False, False), (True, False), (True, True))   # (use_fp8, round_scale)


def _make(world, E, shrink=False, **env):
    import deep_ep
    with environ(**env):
        if not shrink:
            return _buffer(world, E)
        hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(LM, LH, world, E)
        return deep_ep.Buffer(dist.group.WORLD, 0, hint, low_latency_mode=True, explicitly_destroy=True,
                              enable_shrink=True)


def _unmark(*objs):
    for o in objs:
        if isinstance(o, (tuple, list)):
            _unmark(*o)
        elif isinstance(o, torch.Tensor):
            o.__dict__.pop("_device_only", None)
        elif hasattr(o, "__dict__"):
            _unmark(*o.__dict__.values())


@contextlib.contextmanager
def _device_only(*inputs):
    """The guard over ``inputs`` and over what the kernels write: the engine's staging buffers and the mask
    read out of the window (device memory on an NPU)."""
    from deep_ep.ascend import low_latency
    from deep_ep.ascend.ll_window import LowLatencyWindow
    from deep_ep.ascend.transport import CollectiveExchange
    staging, read_mask = CollectiveExchange.staging, LowLatencyWindow.read_mask
    check = low_latency.check_low_latency_combine

    def cpu_only_check(x, topk_idx, topk_weights, dispatched, *rest):
        # compares the routing with the dispatch's for CPU tensors only (never for NPU tensors): unguarded
        _unmark(topk_idx, dispatched)
        try:
            check(x, topk_idx, topk_weights, dispatched, *rest)
        finally:
            mark(topk_idx, dispatched)

    def marked_staging(self, *args):
        return mark(staging(self, *args))[0]

    def marked_mask(self, *args):
        return mark(read_mask(self, *args))[0]

    CollectiveExchange.staging, LowLatencyWindow.read_mask = marked_staging, marked_mask
    low_latency.check_low_latency_combine = cpu_only_check
    mark(*[t for t in inputs if isinstance(t, torch.Tensor)])
    try:
        with DeviceOnly():
            yield
    finally:
        CollectiveExchange.staging, LowLatencyWindow.read_mask = staging, read_mask
        low_latency.check_low_latency_combine = check


def _round(buf, x, idx, w, E, fmt, all_x, guard=False):
    """One dispatch and combine; the expert outputs depend only on the received token and its expert.
    Returns what a caller sees: received rows (per expert, the rows it counted), scales, counts, source
    info, layout ranges and the combined tokens, on the CPU."""
    use_fp8, round_scale = fmt
    R = dist.get_world_size()
    e_local = E // R
    with _device_only(x, idx, w) if guard else contextlib.nullcontext():
        recv, count, handle, _, _ = buf.low_latency_dispatch(x, idx, LM, E, use_fp8=use_fp8, round_scale=round_scale)
    state = getattr(handle, "ll_state", None)
    _unmark(x, idx, w, recv, count, handle, state)
    src_info, layout = handle[0], handle[1]
    y = torch.zeros(e_local, R * LM, LH, dtype=torch.bfloat16)
    rows, scales = [], []
    for e in range(e_local):
        n = int(count[e])
        rows.append((recv[0] if use_fp8 else recv)[e, :n].contiguous().view(torch.uint8).clone())
        if use_fp8:
            scales.append(recv[1][e, :n].clone())
        for src in range(R):
            begin, m = int(layout[e, src]) >> 32, int(layout[e, src]) & 0xFFFFFFFF
            tokens = src_info[e, begin:begin + m].long()
            y[e, begin:begin + m] = _expert_output(all_x[src][tokens], dist.get_rank() * e_local + e)
    # the combine's state (what the dispatch left in the handle) is device memory too
    with _device_only(x, idx, w, y, *(state.__dict__.values() if guard else ())) if guard \
            else contextlib.nullcontext():
        combined, _, _ = buf.low_latency_combine(y, idx, w, handle)
    _unmark(x, idx, w, y, combined, handle, state)
    valid_info = torch.cat([src_info[e, :int(count[e])] for e in range(e_local)])
    return {"rows": rows, "scales": scales, "count": count.clone(), "src_info": valid_info.clone(),
            "layout": layout.clone(), "combined": combined.clone()}


def _same(a: dict, b: dict) -> bool:
    def eq(u, v):
        if isinstance(u, list):
            return len(u) == len(v) and all(eq(p, q) for p, q in zip(u, v, strict=True))
        return u.dtype == v.dtype and u.shape == v.shape and bool(torch.equal(u, v))
    return a.keys() == b.keys() and all(eq(a[k], b[k]) for k in a)


def _inputs(rank, E, seed, tokens):
    idx, w = refs.make_routing(tokens, K, E, seed=seed + rank, masked_ratio=0.2)
    return refs.make_x(tokens, LH, seed=seed + rank), idx, w


def _window_vs_collective_and_host(rank, world):
    from deep_ep.ascend.low_latency import AscendLowLatencyEngine
    E = 4 * world
    window = _make(world, E, **SYMM)
    collective = _make(world, E, EP_BACKEND="ascend", EP_ASCEND_TRANSPORT="hccl")
    host = _make(world, E, EP_BACKEND=None, EP_ASCEND_TRANSPORT=None)
    assert isinstance(window._ll, AscendLowLatencyEngine) and window._ll.window is not None
    assert isinstance(collective._ll, AscendLowLatencyEngine) and collective._ll.window is None
    assert not isinstance(host._ll, AscendLowLatencyEngine)
    same, first = [], None
    # Uneven token counts, then a step where rank 1 has no token.
    for case, tokens in enumerate((LM - rank, 0 if rank == 1 else LM - 2)):
        x, idx, w = _inputs(rank, E, 40 + 10 * case, tokens)
        all_x = _gather(x)
        for fmt in FORMATS:
            got = [_round(b, x, idx, w, E, fmt, all_x, guard=b is window) for b in (window, collective, host)]
            first = first or (x, idx, w, all_x, got[1])
            same.append(_same(got[0], got[1]) and _same(got[0], got[2]))
            if rank == 1 and case == 1:
                same.append(tuple(got[0]["combined"].shape) == (0, LH))
    # Rows wider than the window's UB row buffer take the collectives, per call (the bound lowered below H's rows)
    from deep_ep.ascend import low_latency
    bound, low_latency.MAX_ROW_BYTES = low_latency.MAX_ROW_BYTES, 2 * LH - 1
    try:
        before = window._ll.window.seq
        x, idx, w, all_x, want = first
        same.append(_same(_round(window, x, idx, w, E, FORMATS[0], all_x), want) and window._ll.window.seq == before)
    finally:
        low_latency.MAX_ROW_BYTES = bound
    # The window's exchanges ran (not the collectives)
    seq = window._ll.window.seq
    for b in (window, collective, host):
        b.destroy()
    # and the oracle of the low-latency tests (its own buffer, through the window), and two dispatches in
    # flight in hook mode (each unpacks its own tokens)
    with environ(**SYMM):
        same.append(_oracle_exact(rank, world))
        same.append(_two_in_flight(rank, world))
    # Ranks on two hosts (simulated): no window can span them, so the default takes the collectives (and shrink
    # is refused), and the window forced is refused on every rank
    with environ(DJ_SYMM_HOST_ID=f"sim-host-{rank}", EP_BACKEND="ascend", EP_ASCEND_TRANSPORT=None):
        apart = _make(world, E)
        same.append(apart._ll.window is None)
        x, idx, w, all_x, want = first
        same.append(_same(_round(apart, x, idx, w, E, FORMATS[0], all_x), want))
        apart.destroy()
        expect_error(lambda: _make(world, E, shrink=True), ValueError,
                     "enable_shrink: expected False on the Ascend engine without the symmetric window",
                     "enable_shrink needs ranks that share symmetric memory")
        expect_error(lambda: _make(world, E, EP_ASCEND_TRANSPORT="symm"), ValueError,
                     "EP_ASCEND_TRANSPORT: expected 'auto' or 'hccl' for ranks on several hosts", "got 'symm'")
    same.append(_late(rank, world, E, first))
    return same, seq


def _late(rank, world, E, first):
    """Without shrink a wait that times out fails the step on every rank (naming the rank and flag) and the
    buffer is broken, as on the collective path."""
    import deep_ep
    from deep_ep.ascend.ll_window import LowLatencyWindow
    from deepjit.backends.ascend_twin.kernel import TwinLaunchError
    x, idx, w, all_x, _ = first
    buf = _make(world, E, **SYMM)
    _round(buf, x, idx, w, E, FORMATS[0], all_x)  # the window has its size
    buf._ll.window.window.timeout_s = 1.0
    on_time = LowLatencyWindow.exchange
    if rank == 1:  # late past the handshake, inside the exchange
        LowLatencyWindow.exchange = late_first_call(on_time, 3)
    start = time.monotonic()
    try:
        msg = expect_error(lambda: buf.low_latency_dispatch(x, idx, LM, E, use_fp8=False), TwinLaunchError,
                           "dj_symm::signal_wait_until", "a peer never signalled it")
    finally:
        LowLatencyWindow.exchange = on_time
    elapsed = time.monotonic() - start
    expect_error(lambda: buf.low_latency_dispatch(x, idx, LM, E), deep_ep.BufferBrokenError, "destroy it")
    buf.destroy()
    return f"rank {rank} waited" in msg and elapsed < 2 + 4 * rank


def test_window_matches_collective_and_host_engine_bit_for_bit_without_host_reads():
    for same, seq in run_ranks(_window_vs_collective_and_host, 2, timeout=600, env=SYMM):
        assert same and all(same), same
        assert seq == 2 * (2 + 3 + 3 + 3), seq  # per case: BF16 (2 + combine) and two FP8 rounds (3 + combine)


def _masks(rank, world):
    E = 4 * world
    e_local = E // world
    dead = world - 1
    window = _make(world, E, shrink=True, **SYMM)
    host = _make(world, E, shrink=True, EP_BACKEND=None, EP_ASCEND_TRANSPORT=None)
    x, idx, w = _inputs(rank, E, 60, LM - rank)
    all_x = _gather(x)
    out = {}
    for fmt in FORMATS:  # everyone alive (the window reaches its size): the same as the host engine on 3 ranks
        out[f"3 ranks {fmt}"] = _same(_round(window, x, idx, w, E, fmt, all_x), _round(host, x, idx, w, E, fmt, all_x))
    if rank == dead:
        out = {"alive": all(out.values())}
    if rank != dead:  # the last rank has failed: it takes part in nothing below
        mask = torch.empty(world, dtype=torch.int32)
        expect_error(lambda: window.low_latency_update_mask_buffer(rank, True), ValueError,
                     f"rank: expected another rank than this one ({rank}) with mask=True")
        expect_error(lambda: window.low_latency_query_mask_buffer(torch.empty(world)), ValueError,
                     f"mask_status: expected an int32 tensor of shape ({world},)")
        # a bounded wait, so a kernel that waited for the masked rank would show (and not hang the test)
        window._ll.window.window.timeout_s = 4.0  # the V1 Buffer has no timeout argument
        for b in (window, host):
            b.low_latency_update_mask_buffer(dead, True)
            b.low_latency_query_mask_buffer(mask)
            assert mask.tolist() == [int(r == dead) for r in range(world)]
        manual = {}
        for fmt in FORMATS:
            start = time.monotonic()
            manual[fmt] = _round(window, x, idx, w, E, fmt, all_x, guard=True)
            out[f"not waited {fmt}"] = time.monotonic() - start < 0.9 * window._ll.window.kernel_timeout_s
            out[f"as host {fmt}"] = _same(manual[fmt], _round(host, x, idx, w, E, fmt, all_x))
        got = manual[FORMATS[0]]
        out["slots empty"] = bool((got["layout"][:, dead] & 0xFFFFFFFF == 0).all())
        expected = torch.zeros(x.shape[0], LH)
        for t in range(x.shape[0]):
            for k in range(K):
                e = int(idx[t, k])
                if e >= 0 and e // e_local != dead:  # the masked rank's experts add nothing
                    expected[t] += w[t, k] * _expert_output(x[t], e).float()
        out["combined"] = bool(torch.equal(got["combined"], expected.bfloat16()))
        # clean, query; then a wait for the silent rank times out and masks it
        window.low_latency_clean_mask_buffer()
        window.low_latency_query_mask_buffer(mask)
        out["clean"] = mask.tolist() == [0] * world
        window._ll.window.window.timeout_s = 1.0
        start = time.monotonic()
        timed_out = _round(window, x, idx, w, E, FORMATS[0], all_x)
        out["timeout bounded"] = time.monotonic() - start < 5
        window.low_latency_query_mask_buffer(mask)
        out["masked on timeout"] = mask.tolist() == [int(r == dead) for r in range(world)]
        out["timeout as manual"] = _same(timed_out, manual[FORMATS[0]])
        again = _round(window, x, idx, w, E, FORMATS[1], all_x)  # masked now: not waited for again
        out["after timeout"] = _same(again, manual[FORMATS[1]])
        # A live rank masked by a peer: rank 0 masks rank 1, whose waits for rank 0 time out and mask it in turn;
        # cleaned (the failed rank masked again), both take part again at once
        if rank == 0:
            window.low_latency_update_mask_buffer(1, True)
        one_sided = _round(window, x, idx, w, E, FORMATS[0], all_x)
        window.low_latency_query_mask_buffer(mask)
        out["masked in turn"] = mask.tolist() == [0, 1, 1] if rank == 0 else mask.tolist() == [1, 0, 1]
        out["alone"] = not _same(one_sided, manual[FORMATS[0]])
        window._ll.window.window.timeout_s = 4.0  # rank 1 is a timeout behind rank 0 here
        window.low_latency_clean_mask_buffer()
        window.low_latency_update_mask_buffer(dead, True)
        out["rejoined"] = _same(_round(window, x, idx, w, E, FORMATS[0], all_x), manual[FORMATS[0]])
    dist.barrier()
    window.destroy()
    host.destroy()
    return out


def test_shrink_masks_on_three_ranks_match_the_host_engine():
    outs = run_ranks(_masks, 3, timeout=600, env=SYMM)
    assert outs[2] == {"alive": True}, outs[2]
    for out in outs[:2]:
        assert len(out) == 19 and all(out.values()), {k: v for k, v in out.items() if not v}

