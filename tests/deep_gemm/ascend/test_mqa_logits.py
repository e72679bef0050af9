"""deep_gemm's hand-written Ascend MQA logits (deep_gemm/ascend/mqa_logits.*) on deepjit's Ascend twin,
against deep_gemm.reference.mqa_logits at upstream's FP8 tolerance (calc_diff < 1e-3): few and many
heads, head dims 32..128, ragged query / KV counts, empty and partial ranges, -inf exactly outside
[ks, ke) with clean_logits and every other column untouched without it, compressed rows, BF16 logits,
the MXFP8 forms (per-32 UE8M0 scales on q and / or KV, through asc_mmad_mx), and the public op served
through the table with no host read of the ranges."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import deep_gemm
from deep_gemm import _dispatch, formats, reference
from deep_gemm.ascend.mqa_logits import mqa_logits
from deep_gemm.attention import Quantised
from deep_gemm.testing import calc_diff
from deep_gemm.utils import per_custom_dims_cast_to_fp8
from tests.testkit.host_reads import DeviceOnly, mark

SENTINEL = 2.0 ** 100  # exact in FP32 and BF16, and never a logit at these scales


def _pow2(*shape):
    """Random per-32 UE8M0 scales (as FP32 powers of two, what the public op turns int16 pairs into)."""
    return torch.pow(2.0, torch.randint(-4, 5, shape).float())


def _inputs(s, s_kv, heads, head_dim, q_mx=False, kv_mx=False):
    """q unscaled or with per-32 scales; kv with per-token FP32 scales or per-32 scales."""
    q = torch.randn(s, heads, head_dim).to(torch.float8_e4m3fn)
    q_sf = _pow2(s, heads, -(-head_dim // 32)) if q_mx else None
    if kv_mx:
        kv, sf = torch.randn(s_kv, head_dim).to(torch.float8_e4m3fn), _pow2(s_kv, -(-head_dim // 32))
    else:
        kv, sf = per_custom_dims_cast_to_fp8(torch.randn(s_kv, head_dim), (0,), False)
    return Quantised(q, q_sf, False, False), Quantised(kv, sf, False, not kv_mx), torch.randn(s, heads)


def _ranges(s, s_kv):
    ks = torch.randint(0, s_kv, (s,), dtype=torch.int32)
    ke = torch.minimum(ks + torch.randint(0, s_kv, (s,), dtype=torch.int32), torch.tensor(s_kv, dtype=torch.int32))
    ks[0], ke[0] = 5, 5              # an empty range
    ke[-1], ks[-1] = s_kv, 0         # a full one
    return ks, ke


def _check(s, s_kv, heads, head_dim, clean, compressed=False, dtype=torch.float32, q_mx=False, kv_mx=False):
    q, kv, weights = _inputs(s, s_kv, heads, head_dim, q_mx, kv_mx)
    ks, ke = _ranges(s, s_kv)
    width = int((ke - ks).max()) if compressed else s_kv
    got = torch.full((s, width), SENTINEL, dtype=dtype)
    want = got.clone()
    mqa_logits(q, kv, weights, ks, ke, got, compressed, clean)
    reference.mqa_logits(q, kv, weights, ks, ke, want, compressed, clean)
    written = (want != SENTINEL) & torch.isfinite(want)
    assert torch.equal(got == SENTINEL, want == SENTINEL), "written exactly where the reference writes"
    assert torch.equal(torch.isinf(got), torch.isinf(want)), "-inf exactly where the reference puts it"
    if written.any():
        assert calc_diff(got[written].float(), want[written].float()) < 1e-3


@pytest.mark.parametrize(("s", "s_kv", "heads", "head_dim"), [(7, 300, 4, 32), (5, 520, 32, 128), (3, 90, 128, 64)])
def test_shapes_clean(s, s_kv, heads, head_dim):
    _check(s, s_kv, heads, head_dim, clean=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_head_rows_reuse_their_ub_stage(monkeypatch, dtype):
    """One head: 128 tokens a tile, whose FP32 SIMD rows fit one UB stage only (BF16: two); six tiles over two
    blocks, so each core stores three tiles' rows through it."""
    from deep_gemm import runtime
    monkeypatch.setattr(runtime, "ascend_blocks", lambda cores: 2)
    _check(300, 300, 1, 32, clean=True, dtype=dtype)


def test_untouched_outside_ranges_without_clean():
    _check(19, 260, 8, 64, clean=False)


def test_compressed_rows():
    _check(9, 300, 8, 64, clean=False, compressed=True)


def test_bf16_logits():
    _check(6, 200, 16, 64, clean=True, dtype=torch.bfloat16)


def test_bf16_logits_through_the_simt_epilogue():
    """BF16 logits in the forms the SIMT lanes finish: without clean, and compressed."""
    _check(19, 260, 8, 64, clean=False, dtype=torch.bfloat16)
    _check(9, 300, 8, 64, clean=False, compressed=True, dtype=torch.bfloat16)


# DeepGEMM-Ascend's own form (MXFP8 q and KV) at two shape classes (one / several tokens per tile, KV
# tails), then a per-32-scaled q over per-token KV scales and an unscaled q
# over per-32 KV scales (scales also applied by the cube: 2^0 on the unscaled side; the first case's
# lowering)
@pytest.mark.parametrize(("s", "s_kv", "heads", "head_dim", "q_mx", "kv_mx", "dtype"), [
    (5, 300, 8, 128, True, True, torch.float32), (3, 90, 64, 64, True, True, torch.bfloat16),
    (7, 260, 4, 64, True, False, torch.float32), (4, 200, 8, 128, False, True, torch.float32)])
def test_mxfp8_forms(s, s_kv, heads, head_dim, q_mx, kv_mx, dtype):
    _check(s, s_kv, heads, head_dim, clean=True, dtype=dtype, q_mx=q_mx, kv_mx=kv_mx)


@pytest.mark.parametrize(("mx", "grid"), [(False, 2), (True, 3)])
def test_a_cores_tiles_reuse_their_kv_block(monkeypatch, mx, grid):
    """Six tiles (two query blocks x three KV blocks) over `grid` blocks: with 3 each core's second tile
    has its first one's KV block, kept in L1 (values and MX scales) and not loaded again; with 2 every
    tile of a core needs another block (both KV stages alternate). The lowerings of
    test_shapes_clean[5-520-32-128] and test_mxfp8_forms[5-300-8-128-..]."""
    from deep_gemm import runtime
    monkeypatch.setattr(runtime, "ascend_blocks", lambda cores: grid)
    if mx:
        _check(20, 600, 8, 128, clean=True, q_mx=True, kv_mx=True)
    else:
        _check(7, 600, 32, 128, clean=True)


def _fp4(*shape):
    """Random packed E2M1 values [..., D/2] (int8, the NVIDIA container)."""
    return formats.pack_fp4_codes(torch.randint(0, 16, shape, dtype=torch.uint8))


# FP4 q and KV (per-32 scales on both: the MX product on E2M1), two shape classes with KV tails
@pytest.mark.parametrize(("s", "s_kv", "heads", "head_dim"), [(5, 300, 8, 128), (3, 90, 64, 64)])
def test_fp4_q_and_kv(s, s_kv, heads, head_dim):
    q = Quantised(_fp4(s, heads, head_dim), _pow2(s, heads, head_dim // 32), True, False)
    kv = Quantised(_fp4(s_kv, head_dim), _pow2(s_kv, head_dim // 32), True, False)
    weights, (ks, ke) = torch.randn(s, heads), _ranges(s, s_kv)
    got, want = torch.full((s, s_kv), SENTINEL), torch.full((s, s_kv), SENTINEL)
    mqa_logits(q, kv, weights, ks, ke, got, False, True)
    reference.mqa_logits(q, kv, weights, ks, ke, want, False, True)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


@settings(max_examples=3, deadline=None)
@given(s=st.integers(1, 20), s_kv=st.integers(6, 400))
def test_random_sizes(s, s_kv):
    _check(s, s_kv, 4, 32, clean=True)


def test_public_op_on_ascend_reads_no_device_values(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    s, s_kv, heads, head_dim = 6, 300, 4, 32
    q, kv, weights = _inputs(s, s_kv, heads, head_dim)
    ks, ke = _ranges(s, s_kv)
    logits_args = (q, kv, weights, ks, ke, torch.empty(s, s_kv), False, True)
    assert _dispatch.TABLE.serves("mqa_logits", ks.device, *logits_args) == "ascend"
    with DeviceOnly():
        q_data, kv_data, kv_sf, w, starts, ends = mark(q.data.clone(), kv.data.clone(), kv.sf.clone(),
                                                      weights.clone(), ks.clone(), ke.clone())
        got = deep_gemm.fp8_mqa_logits(q_data, (kv_data, kv_sf), w, starts, ends)
    want = torch.empty(s, s_kv)
    reference.mqa_logits(q, kv, weights, ks, ke, want, False, True)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert calc_diff(got[finite], want[finite]) < 1e-3


def test_unserved_forms_raise_before_writing():
    q, kv, weights = _inputs(4, 64, 4, 32)
    too_many_heads = Quantised(torch.zeros(4, 129, 32, dtype=torch.float8_e4m3fn), None, False, False)
    logits = torch.full((4, 64), SENTINEL)
    ks, ke = torch.zeros(4, dtype=torch.int32), torch.full((4,), 64, dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="fp8_mqa_logits on Ascend"):
        mqa_logits(too_many_heads, kv, torch.randn(4, 129), ks, ke, logits, False, True)
    mx_q, _, _ = _inputs(4, 64, 4, 32, q_mx=True)  # per-32 scales at D = 32: below the MX product's K step
    with pytest.raises(NotImplementedError, match="head dim >= 64, got 32"):
        mqa_logits(mx_q, kv, weights, ks, ke, logits, False, True)
    assert torch.all(logits == SENTINEL)


def _ranged_launch(clean):
    """32 heads: tiles of 4 tokens; tokens 0..3 attend to all 300 positions (two KV tiles), 4..5 to none
    (their tiles have no cube work)."""
    from deepjit.tilelang_route import ascend_check
    s, s_kv, heads = 6, 300, 32
    q, kv, weights = _inputs(s, s_kv, heads, 32)
    ks = torch.zeros(s, dtype=torch.int32)
    ke = torch.tensor([s_kv] * 4 + [0] * 2, dtype=torch.int32)
    logits = torch.full((s, s_kv), SENTINEL)
    with ascend_check.recorded_launches() as launches:
        mqa_logits(q, kv, weights, ks, ke, logits, False, clean)
    return ascend_check._summed_counters(launches)[0]["routes"], logits, s, s_kv, heads


def test_lanes_read_gm_only_through_counted_loads():
    """Without clean the SIMT lanes finish the logits: their GM reads (scales, ranges) are asc_ldcg /
    asc_ldca, which the twin counts, so a plain __gm__ dereference would lower this count. Per position (one
    lane each): its scale once per tile with work; per token ks and ke; tiles without work are skipped. Per
    tile with work each vector core loads the 4 x 32 FP32 weights by MTE2 (the SIMD head sums read them in
    UB). Only the in-range logits are stored."""
    routes, logits, s, s_kv, heads = _ranged_launch(False)
    assert routes["simt_gm_load"] == s_kv * 4 + 4 * s_kv * 2 * 4
    assert routes["gm_to_ub"] == 2 * 2 * 4 * heads * 4
    assert routes["simt_gm_store"] == 4 * s_kv * 4
    assert torch.all(logits[4:] == SENTINEL)


def test_clean_rows_are_finished_by_simd_and_stored_by_mte3():
    """With clean (uncompressed) no SIMT lane runs: per tile with work each vector core loads the 4 x 32 FP32
    weights and its span's KV scales (300 positions in all) by MTE2, and every row span, -inf rows of the
    tiles without work included, leaves UB once by MTE3."""
    routes, logits, s, s_kv, heads = _ranged_launch(True)
    assert "simt_gm_load" not in routes and "simt_gm_store" not in routes
    assert routes["gm_to_ub"] == 2 * 2 * 4 * heads * 4 + s_kv * 4
    assert routes["ub_to_gm"] == s * s_kv * 4
    assert torch.all(torch.isinf(logits[4:]) & (logits[4:] < 0))


@pytest.mark.parametrize(("logits_dtype", "score_bytes"), [(torch.bfloat16, 2), (torch.float32, 4)])
def test_scores_leave_l0c_in_the_logits_precision(logits_dtype, score_bytes):
    """FixPipe rounds the ReLU'd scores to BF16 on the way to UB where the logits are BF16 (DeepGEMM-Ascend's
    indexer) and keeps them FP32 for FP32 logits (NVIDIA's form): one tile (4 tokens x 32 heads = 128 rows,
    256 KV positions) moves 128 x 256 x 2 or 4 bytes L0C -> UB."""
    from deepjit.tilelang_route import ascend_check
    s, s_kv, heads, head_dim = 4, 256, 32, 128
    q, kv, weights = _inputs(s, s_kv, heads, head_dim)
    ks, ke = torch.zeros(s, dtype=torch.int32), torch.full((s,), s_kv, dtype=torch.int32)
    logits = torch.empty(s, s_kv, dtype=logits_dtype)
    with ascend_check.recorded_launches() as launches:
        mqa_logits(q, kv, weights, ks, ke, logits, False, True)
    assert ascend_check._summed_counters(launches)[0]["routes"]["l0c_to_ub"] == 128 * 256 * score_bytes
    want = torch.empty(s, s_kv, dtype=logits_dtype)
    reference.mqa_logits(q, kv, weights, ks, ke, want, False, True)
    assert calc_diff(logits, want) < 1e-3


def test_fp32_logits_of_cancelling_heads_hold_upstreams_bound():
    """Short rows (one to three logits) whose weighted heads nearly cancel: with FP32 logits each row holds
    the paged tests' calc_diff < 1e-5 against the reference (BF16-rounded scores miss it)."""
    s, s_kv, heads, head_dim = 3, 64, 32, 128
    q, kv, _ = _inputs(s, s_kv, heads, head_dim)
    weights = torch.randn(s, heads)
    weights[:, heads // 2:] = -weights[:, :heads // 2]    # pairs of heads with opposite weights
    q.data[:, heads // 2:] = q.data[:, :heads // 2]        # ... and equal scores, up to the last head's nudge
    q.data[:, -1] = (q.data[:, -1].float() * 1.125).to(torch.float8_e4m3fn)
    ks = torch.zeros(s, dtype=torch.int32)
    ke = torch.arange(1, s + 1, dtype=torch.int32)
    got, want = torch.empty(s, s_kv), torch.empty(s, s_kv)
    mqa_logits(q, kv, weights, ks, ke, got, False, True)
    reference.mqa_logits(q, kv, weights, ks, ke, want, False, True)
    for t in range(s):
        assert calc_diff(got[t, :t + 1], want[t, :t + 1]) < 1e-5, t
