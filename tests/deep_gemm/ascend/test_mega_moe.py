"""Mega MoE on the Ascend path (``DG_BACKEND=ascend``, CPU tensors: the twin) across 2 and 3 real processes:
the SymmBuffer's window is a DeviceWindow that every rank's kernels read and write (deep_gemm/ascend/
mega_moe.py). Each rank checks its output against the unfused pipeline of tests/deep_gemm/test_mega_moe.py
(gloo collectives, the public grouped GEMMs and the torch SwiGLU step) run on the host path."""
import os

import pytest
import torch

import deep_gemm
from deep_gemm.ascend import mega_moe as ascend_mega
from deep_gemm.testing import calc_diff
from tests.testkit import launches, run_ranks

from ..test_mega_moe import EXPERTS, HIDDEN, INTER, _baseline, _inputs, fill


def _rank(rank, num_ranks, bf16, masked, clamp, layout, alignment, ring=None, split=None, dup=False, tokens=None):
    import torch.distributed as dist
    if alignment is not None:           # else the Ascend path's default (256)
        deep_gemm.set_mk_alignment_for_contiguous_layout(alignment)
    os.environ["DG_BACKEND"] = "ascend" if layout == "ascend" else "host"   # the transform's layout follows the path
    num_tokens = 0 if (num_ranks == 3 and rank == 1) else 24 + 5 * rank   # a rank without tokens takes part too
    num_tokens = num_tokens if tokens is None else tokens - rank
    (x, x_sf), l1, l2, topk_idx, topk_weights = _inputs(rank, num_ranks, max(num_tokens, 1), bf16, masked)
    x, topk_idx, topk_weights = x[:num_tokens], topk_idx[:num_tokens], topk_weights[:num_tokens]
    if dup:   # a token's second slot names its first slot's expert again: two rows of one expert
        topk_idx[:, 1] = topk_idx[:, 0]
    x_sf = None if x_sf is None else x_sf[:num_tokens]
    l1t, l2t = deep_gemm.transform_weights_for_mega_moe(l1, l2)
    assert bf16 or l1t[0].dim() == (4 if layout == "ascend" else 3)
    os.environ["DG_BACKEND"] = "ascend"
    mma_type = "bf16xbf16" if bf16 else "fp8xfp4"
    if ring is None:
        buf = deep_gemm.get_symm_buffer_for_mega_moe(dist.group.WORLD, EXPERTS - EXPERTS % num_ranks, 100, 3, HIDDEN,
                                                     INTER, mma_type=mma_type)
    else:
        buf = deep_gemm.SymmBuffer(dist.group.WORLD, EXPERTS - EXPERTS % num_ranks, 100, 3, HIDDEN, INTER,
                                   num_ring_tokens=ring, mma_type=mma_type)
    assert buf.on_ascend
    # A first call on other tokens, every slot routed, no stats: its rows, slots, weights and layout are what the
    # checked call finds in the buffer and workspaces (its masked slots keep the first call's rows: never summed).
    (xa, xa_sf), _, _, idxa, wa = _inputs(rank, num_ranks, 60, bf16, False)
    first = (xa[30:], None if xa_sf is None else xa_sf[30:], idxa[30:] % buf.num_experts, wa[30:])
    stats = torch.full((buf.num_experts // num_ranks,), 5, dtype=torch.int32)
    for tokens, inputs, call_stats in ((30, first, None),
                                       (num_tokens, (x, x_sf, topk_idx, topk_weights), stats)):
        y = torch.empty(tokens, HIDDEN, dtype=torch.bfloat16)
        fill(buf, tokens, *inputs, bf16)
        _poison(buf)
        if bf16:
            deep_gemm.bf16_mega_moe(y, l1t, l2t, buf, call_stats, activation_clamp=clamp)
        else:
            deep_gemm.fp8_fp4_mega_moe(y, l1t, l2t, buf, call_stats, activation_clamp=clamp)
    _padding_untouched(rank, buf, ring_filled=ring is not None)
    if os.environ.get("DG_COMM_KERNEL_DEBUG") != "1":   # the kernel copied the inputs into the window
        window = buf.view(rank, "x")
        assert window.data_ptr() != buf.x.data_ptr()   # the caller's tensors are the rank's own
        for name, t in (("x", x), ("x_sf", x_sf), ("topk_idx", topk_idx), ("topk_weights", topk_weights)):
            if t is not None:
                published = buf.view(rank, name)[:num_tokens]
                assert torch.equal(published.view(torch.uint8), t.contiguous().view(torch.uint8)), name
    assert buf.window.flags(rank)[ascend_mega.meet_flag(num_ranks)] == 0   # the meeting counter, reset for the next
    if ring is not None:   # the checked call's rows outgrew the ring: several waves, experts split where `split`
        ws = next(iter(buf.workspaces.values()))
        ends = ws.ends.tolist()
        starts = [0] + [-(-end // ws.alignment) * ws.alignment for end in ends[:-1]]
        assert ws.m == -(-ring // ws.alignment) * ws.alignment and ends[-1] > ws.m, (ws.m, ends)
        crossing = any(s // ws.m != (e - 1) // ws.m for s, e in zip(starts, ends, strict=True) if e > s)
        assert split is None or crossing == split, (ws.m, ends)
    if os.environ.get("DG_COMM_KERNEL_DEBUG") == "1":   # upstream's debug switch: the buffer zeroed after a call
        assert not bool(buf.buffer.any()), f"rank {rank}: buffer not zeroed"
    buf.destroy()
    os.environ["DG_BACKEND"] = "host"
    ref, ref_stats = _baseline(rank, num_ranks, x, x_sf, l1, l2, topk_idx, topk_weights, clamp, bf16)
    assert torch.equal(stats, 5 + ref_stats), f"rank {rank}: stats {stats.tolist()} vs {ref_stats.tolist()}"
    if num_tokens:
        diff = calc_diff(y, ref)
        assert diff < 1e-4, f"rank {rank}: calc_diff {diff}"
        assert y.abs().sum() > 0
    return True


def _poison(buf):
    """NaN in the workspaces' activations (the dispatch's and the SwiGLU step's), top-k weights and GEMM outputs
    before a call (none yet on the first), source slot 0 (a valid one) in every row: a kernel that read a row
    outside the experts' rows -- left unwritten -- would carry NaN or a stray row into y."""
    for ws in buf.workspaces.values():
        for t in (ws.l1_out, ws.l2_out, ws.weights):
            t.fill_(float("nan"))
        for t in (ws.a, ws.act):
            t.view(torch.uint8).fill_(0xFF)  # NaN in E4M3 and in BF16
        ws.src.fill_(0)


def _padding_untouched(rank, buf, ring_filled=False):
    """The GEMMs and the SwiGLU step leave the rows outside the experts' rows of every wave unwritten: still NaN
    (``ring_filled``: waves may leave no such row)."""
    ws = next(iter(buf.workspaces.values()))
    act = ws.act
    inside = torch.zeros(ws.m, dtype=torch.bool)
    for wave in range(max(1, -(-ws.ends[-1].item() // ws.m))):
        start = 0
        for end in ws.wave_ends[wave].tolist():
            inside[start:max(end, start)] = True
            start = min(-(-max(end, start) // ws.alignment) * ws.alignment, ws.m)
    act_nan = act.view(torch.uint8) == 0xFF if act.dtype == torch.float8_e4m3fn else act.isnan()
    for name, nan in (("l1_out", ws.l1_out.isnan()), ("l2_out", ws.l2_out.isnan()), ("act", act_nan)):
        outside = nan[~inside]
        assert outside.numel() or ring_filled, f"rank {rank}: no row outside the experts' rows to check"
        assert bool(outside.all()), f"rank {rank}: {name} rows outside the experts written"


@pytest.mark.parametrize("num_ranks,bf16,masked,clamp,layout,alignment", [(2, False, False, None, "ascend", 32),
                                                                           (3, False, True, 10.0, "ascend", None),
                                                                           (2, False, True, None, "upstream", 32),
                                                                           (2, True, True, None, "upstream", 32)])
def test_mega_moe_on_the_twin(num_ranks, bf16, masked, clamp, layout, alignment):
    """FP8 x FP4 weights in DeepGEMM-Ascend's layout (the Ascend path's transform) and in upstream's; the Ascend
    default psum alignment (256) and a small one; with 3 ranks, one without tokens and expert ids past the
    buffer's experts (masked on the device)."""
    debug = {"DG_COMM_KERNEL_DEBUG": "1"} if layout == "upstream" and not bf16 else {}
    assert all(run_ranks(_rank, num_ranks, bf16, masked, clamp, layout, alignment, timeout=300, env=debug))


@pytest.mark.parametrize("num_ranks,masked,alignment,ring,split,dup,tokens", [(2, False, 16, 16, True, False, None),
                                                                                (3, True, None, 256, False, False, None),
                                                                                (2, False, 16, 40, None, True, 90),
                                                                                (3, True, 8, 24, None, False, None)])
def test_rows_past_the_ring_run_in_waves(num_ranks, masked, alignment, ring, split, dup, tokens):
    """A ring (``num_ring_tokens``, rounded up to the alignment) smaller than the routed rows: the call runs them
    ring rows at a time -- one expert a wave, or several, an expert's rows split where a wave ends -- and matches
    the reference as in one wave; also with a token routed twice to one expert, and with 89-90 tokens a rank
    (their inputs copied into the window in shares of 8-row multiples by several dispatch cores)."""
    assert all(run_ranks(_rank, num_ranks, False, masked, None, "ascend", alignment, ring, split, dup, tokens,
                         timeout=300))


def _silent_peer(rank, num_ranks, stage):
    """A warm call on every rank, then rank 2 goes silent: it never arrives (``stage`` "arrive") or dispatches
    but never combines (``stage`` "send"). Ranks 0 and 1 fail within the window's timeout, naming
    themselves and the flag they waited on, and refuse further calls on the buffer; the window's shared-memory
    names are gone on every rank."""
    import time

    import torch.distributed as dist

    from deepjit.backends.ascend_twin.kernel import TwinLaunchError
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    (x, x_sf), l1, l2, topk_idx, topk_weights = _inputs(rank, num_ranks, 16, False, False)
    os.environ["DG_BACKEND"] = "ascend"
    buf = deep_gemm.get_symm_buffer_for_mega_moe(dist.group.WORLD, 6, 16, 3, HIDDEN, INTER)
    l1t, l2t = deep_gemm.transform_weights_for_mega_moe(l1, l2)
    y = torch.empty(16, HIDDEN, dtype=torch.bfloat16)
    fill(buf, 16, x, x_sf, topk_idx % 6, topk_weights, False)
    deep_gemm.fp8_fp4_mega_moe(y, l1t, l2t, buf)          # compiles every kernel under the long timeout
    if rank == 2 and stage == "send":   # and the dispatch step's own kernel, which no call launches
        ascend_mega.kernel("dg_mega_moe_comm", "ascend/mega_moe_comm.asc", {}).kernel(True)
    dist.barrier()
    buf.window.timeout_s = 1.0
    names = list(buf.window._window._paths)
    out = {"names": [n for n in names if os.path.exists(n)]}
    if rank == 2:
        if stage == "send":                                # the dispatch step, then nothing
            buf.seq += 1
            ws = next(iter(buf.workspaces.values()))
            ascend_mega._comm(buf, ws, 0, ascend_mega.dispatch_grid(buf, y.device), y, None)
    else:
        start = time.monotonic()
        try:
            deep_gemm.fp8_fp4_mega_moe(y, l1t, l2t, buf)
            out["error"] = "no error"
        except TwinLaunchError as exc:
            out["error"] = str(exc)
        out["seconds"] = time.monotonic() - start
        try:
            deep_gemm.fp8_fp4_mega_moe(y, l1t, l2t, buf)
        except RuntimeError as exc:
            out["broken"] = str(exc)
    dist.barrier()
    buf.destroy()
    return out


@pytest.mark.parametrize("stage,flag", [("arrive", 2), ("send", 3 + 2)])
def test_a_silent_peer_fails_the_others_within_the_timeout(stage, flag):
    # the on-chip waits' deadline below the window's: the peer's flag must be named by the window waits, which the
    # cores meet on first, not by a hardware barrier's wait
    outs = run_ranks(_silent_peer, 3, stage, timeout=300, env={"DJ_TWIN_WAIT_TIMEOUT": "0.5"})
    for rank, out in enumerate(outs):
        assert out["names"] == [], out["names"]
        if rank < 2:
            assert f"rank {rank} waited" in out["error"] and f"flag {flag} of its window" in out["error"], out["error"]
            assert out["seconds"] < 10, out["seconds"]
            assert "SymmBuffer is broken" in out["broken"] and "destroy it" in out["broken"], out


def _without_host_reads(rank, num_ranks):
    """The second call runs with its routing inputs, the stats, y and every workspace the kernels write marked
    device-only (tests/testkit/host_reads.py): any host read of them, or of anything computed from them, raises
    (graph capture on an NPU forbids it). Its output equals the first, unguarded call's."""
    import torch.distributed as dist

    from tests.testkit.host_reads import DeviceOnly, mark
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    (x, x_sf), l1, l2, topk_idx, topk_weights = _inputs(rank, num_ranks, 20, False, True)
    os.environ["DG_BACKEND"] = "ascend"
    buf = deep_gemm.get_symm_buffer_for_mega_moe(dist.group.WORLD, EXPERTS, 20, 3, HIDDEN, INTER)
    l1t, l2t = deep_gemm.transform_weights_for_mega_moe(l1, l2)
    stats = torch.zeros(EXPERTS // num_ranks, dtype=torch.int32)
    first, y = torch.empty(20, HIDDEN, dtype=torch.bfloat16), torch.empty(20, HIDDEN, dtype=torch.bfloat16)
    fill(buf, 20, x, x_sf, topk_idx, topk_weights, False)
    deep_gemm.fp8_fp4_mega_moe(first, l1t, l2t, buf, stats, activation_clamp=10.0)
    ws, = buf.workspaces.values()
    guarded = (buf.x, buf.x_sf, buf.topk_idx, buf.topk_weights, stats, y, *vars(ws).values())
    mark(*[t for t in guarded if isinstance(t, torch.Tensor)])
    with DeviceOnly():
        deep_gemm.fp8_fp4_mega_moe(y, l1t, l2t, buf, stats, activation_clamp=10.0)
    for t in guarded:
        if isinstance(t, torch.Tensor):
            t.__dict__.pop("_device_only", None)
    buf.destroy()
    return torch.equal(y, first) and bool(y.abs().sum() > 0)


def test_no_host_reads():
    assert run_ranks(_without_host_reads, 2, timeout=300) == [True, True]


def _ops_of_a_call(rank, num_ranks, bf16, layout):
    """The kernels a warm call launches and the aten ops it runs outside those launches."""
    import torch.distributed as dist

    from tests.testkit.launches import OpsAroundLaunches

    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    os.environ["DG_BACKEND"] = "ascend" if layout == "ascend" else "host"   # the transform's layout follows the path
    (x, x_sf), l1, l2, topk_idx, topk_weights = _inputs(rank, num_ranks, 20, bf16, True)
    l1t, l2t = deep_gemm.transform_weights_for_mega_moe(l1, l2)
    os.environ["DG_BACKEND"] = "ascend"
    buf = deep_gemm.get_symm_buffer_for_mega_moe(dist.group.WORLD, EXPERTS, 20, 3, HIDDEN, INTER,
                                                 mma_type="bf16xbf16" if bf16 else "fp8xfp4")
    y = torch.empty(20, HIDDEN, dtype=torch.bfloat16)
    fill(buf, 20, x, x_sf, topk_idx, topk_weights, bf16)
    call = deep_gemm.bf16_mega_moe if bf16 else deep_gemm.fp8_fp4_mega_moe
    call(y, l1t, l2t, buf)                                 # builds the workspace and compiles the kernels
    with OpsAroundLaunches() as ops:
        call(y, l1t, l2t, buf)
    buf.destroy()
    return dict(ops.outside), ops.kernels


@pytest.mark.parametrize("bf16,layout", [(False, "ascend"), (False, "upstream"), (True, "upstream")])
def test_a_call_is_its_kernels(bf16, layout):
    """A call is one launch of the persistent kernel (dispatch, L1 GEMM, SwiGLU, L2 GEMM and combine inside it):
    nothing around it converts a scale or weight layout (FP8 x FP4 weights in DeepGEMM-Ascend's layout or
    upstream's), and no other op runs (a graph captures the one launch)."""
    for outside, kernels in run_ranks(_ops_of_a_call, 2, bf16, layout, timeout=300):
        assert kernels == ["dg_mega_moe"], kernels
        assert set(outside) <= launches.VIEW_OPS, outside

def _refusals(rank, num_ranks):
    import torch.distributed as dist
    os.environ["DG_BACKEND"] = "ascend"
    group, out = dist.group.WORLD, []
    for kwargs, fragment in (({"num_topk": 33, "num_experts": 64}, "num_topk: expected at most 32 on Ascend, got 33"),
                             ({"num_experts": 8192}, "num_experts: expected at most 4096 on Ascend, got 8192")):
        args = {"num_experts": 8, "num_max_tokens_per_rank": 16, "num_topk": 3, "hidden": HIDDEN,
                "intermediate_hidden": INTER, **kwargs}
        try:
            deep_gemm.get_symm_buffer_for_mega_moe(group, **args)
            out.append(f"no error for {kwargs}")
        except ValueError as exc:
            out.append(fragment in str(exc) or str(exc))
    buf = deep_gemm.get_symm_buffer_for_mega_moe(group, 8, 16, 3, HIDDEN, INTER, mma_type="bf16xbf16")
    try:  # stats without data (meta): refused before any kernel runs
        deep_gemm.bf16_mega_moe(torch.empty(4, HIDDEN, dtype=torch.bfloat16), torch.empty(8, 2 * INTER, HIDDEN).bfloat16(),
                                torch.empty(8, HIDDEN, INTER).bfloat16(), buf,
                                torch.zeros(8, dtype=torch.int32, device="meta"))
        out.append("no error for meta stats")
    except TypeError as exc:
        out.append("cumulative_local_expert_recv_stats: expected a tensor with data" in str(exc) or str(exc))
    y = torch.empty(4, HIDDEN, dtype=torch.bfloat16)
    l1, l2 = torch.zeros(8, 2 * INTER, HIDDEN).bfloat16(), torch.zeros(8, HIDDEN, INTER).bfloat16()
    for case, call, fragment in (
            ("strided stats", lambda: deep_gemm.bf16_mega_moe(y, l1, l2, buf, torch.zeros(16, dtype=torch.int32)[::2]),
             "cumulative_local_expert_recv_stats: expected a contiguous"),
            ("strided weights", lambda: deep_gemm.bf16_mega_moe(y, l1.transpose(1, 2).contiguous().transpose(1, 2),
                                                                 l2, buf),
             "l1_weights: expected a contiguous"),
            ("replaced input", lambda: _with_input(buf, "x", buf.x[:4], lambda: deep_gemm.bf16_mega_moe(y, l1, l2, buf)),
             "sym_buffer.x: expected shape")):
        try:
            call()
            out.append(f"no error for {case}")
        except ValueError as exc:
            out.append(fragment in str(exc) or str(exc))
    out.append(buf.seq == 0)   # no call reached a kernel
    buf.destroy()
    return out


def _with_input(buf, name, tensor, call):
    """``call()`` with the buffer's input ``name`` replaced by ``tensor`` (a caller's mistake: the kernel copies
    these tensors' first rows by pointer), restored after."""
    kept = getattr(buf, name)
    setattr(buf, name, tensor)
    try:
        return call()
    finally:
        setattr(buf, name, kept)


def test_ascend_limits_are_refused_before_any_kernel():
    assert run_ranks(_refusals, 1, timeout=120) == [[True] * 7]


def _packed_scales(lead: tuple, rows: int, k: int, gen) -> torch.Tensor:
    """Packed UE8M0 rows (int32 [.., rows, k / 128], a byte per 32 K-elements), exponents 2^-5 .. 2^5."""
    return torch.randint(122, 133, lead + (rows, k // 32), generator=gen, dtype=torch.uint8).view(torch.int32)


def _fp32_scales(packed: torch.Tensor) -> torch.Tensor:
    return torch.exp2(packed.view(torch.uint8).float() - 127)


@pytest.mark.parametrize("layout", ["ascend", "upstream"])
def test_chain_gemm_reads_the_layouts_as_they_lie(layout):
    """The call's grouped GEMM (``mega_moe._gemm_fields``, launched as the M-grouped kernel) on packed activation
    scale rows and weights in DeepGEMM-Ascend's layout (biased scales, three 256-row blocks) or upstream's (scale
    rows in UTCCP order, six 128-row groups) gives the bits of the package's Ascend grouped GEMM on the same values
    with FP32 scales (converted on the host), and leaves rows outside the groups alone."""
    from types import SimpleNamespace

    from deep_gemm import formats
    from deep_gemm._operands import QuantOperand
    from deep_gemm.ascend import mega_moe
    from deep_gemm.ascend._launch import args, kernel
    from deep_gemm.ascend.m_grouped_fp8_mx_gemm import FUSED_ENTRY, m_grouped_fp8_fp4_gemm_nt_contiguous
    from deep_gemm.mega import _to_ascend_layout, _utccp
    from tests.deep_gemm.ascend._grouped import SENTINEL, psum_rows

    gen = torch.Generator().manual_seed(7)
    g, m, n, k, alignment = 3, 256, 768, 384, 32   # three row blocks, K blocks of 256 and 128, an empty group
    rows = psum_rows([40, 0, 70], alignment, m)
    a = (torch.randn(m, k, generator=gen) * 4).to(torch.float8_e4m3fn)
    a_sf = _packed_scales((), m, k, gen)
    w = formats.pack_fp4_codes(torch.randint(0, 16, (g, n, k), generator=gen, dtype=torch.uint8))
    w_sf = _packed_scales((g,), n, k, gen)
    expected = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    m_grouped_fp8_fp4_gemm_nt_contiguous(QuantOperand(a, _fp32_scales(a_sf), False, True, m, k, None, 1, 32),
                                         QuantOperand(w, _fp32_scales(w_sf), True, True, n, k, g, 1, 32),
                                         expected, rows, False)
    weights = _to_ascend_layout(w, w_sf, False) if layout == "ascend" else (w, _utccp(w_sf))
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    fields, defines = mega_moe._gemm_fields(SimpleNamespace(ends=rows.layout, alignment=alignment), a, a_sf, weights, d)
    del defines["DG_MX"]   # the fused kernel's own
    kernel(*FUSED_ENTRY, {**defines, "DG_BLOCK_M": 128})(4, args("DgMGroupedGemmArgs", **fields))
    assert torch.equal(d, expected)
    assert float((d[rows.row_group >= 0] != SENTINEL).float().mean()) > 0.99   # the groups' rows were written
