"""tile_kernels' Ascend kernels through the public ops on DEVICE (tests/testkit/npu.py: an Ascend 950, or the
Ascend twin with NPU_TESTS_ON_TWIN=1), against the reference on CPU: every op with an Ascend kernel, bit-exact
where the twin tests are (top2_sum_gate's weights and swiglu backward's weight_grad to their tolerance), each
call checked to be served by the Ascend kernel. The twin runs the twin tests' shapes (their kernels are
cached); an NPU adds larger ones."""
import pytest
import torch

import tile_kernels
from tests.testkit.npu import DEVICE, ON_TWIN
from tile_kernels import _dispatch
from tile_kernels.reference import cast as ref_cast
from tile_kernels.reference import moe as ref_moe
from tile_kernels.reference import swiglu as ref_swiglu
from tile_kernels.reference import topk as ref_topk
from tile_kernels.testing.numeric import assert_equal

from .conftest import ascend_packed_ue8m0, unpack_ascend_ue8m0
from .inputs import (
    PER_TOKEN_CASES,
    cast_input,
    fused_positions,
    gate_weights,
    routed_idx,
    router_options,
    scaled_reduce_inputs,
    swiglu_backward_inputs,
    swiglu_forward_inputs,
    tied_scores,
)

pytestmark = pytest.mark.npu
Q, MOE = tile_kernels.quant, tile_kernels.moe


def _sizes(twin, *npu_only):
    """The twin's sizes; an NPU runs larger ones too."""
    return list(twin) if ON_TWIN else list(twin) + list(npu_only)


def dev(*tensors):
    return tuple(None if t is None else t.to(DEVICE) for t in tensors)


def host(out):
    """Op outputs (nested tuples of tensors) back on the CPU."""
    if isinstance(out, (tuple, list)):
        return type(out)(host(o) for o in out)
    return out.cpu() if isinstance(out, torch.Tensor) else out


@pytest.fixture(autouse=True)
def served_by_ascend(monkeypatch):
    """Every table call in the test must pick the Ascend kernel (no silent reference on DEVICE)."""
    served, select = [], _dispatch.TABLE.select

    def record(name, device, *args, **kwargs):
        backend, fn = select(name, device, *args, **kwargs)
        served.append((name, backend))
        return backend, fn

    monkeypatch.setattr(_dispatch.TABLE, "select", record)
    yield
    assert served and all(b == "ascend" for _, b in served), served


def _sf_expect(sf_ref, packed):
    return ascend_packed_ue8m0(sf_ref) if packed else sf_ref


@pytest.mark.parametrize("rows", _sizes([37], 1000))
@pytest.mark.parametrize("dtype,fmt,npc,col,round_sf,packed", PER_TOKEN_CASES)
def test_per_token_cast_and_cast_back(rows, dtype, fmt, npc, col, round_sf, packed):
    x = cast_input(dtype, rows)
    q, sf = Q.per_token_cast(*dev(x), fmt, npc, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                             use_packed_ue8m0=packed)
    q_ref, sf_ref = ref_cast.cast(x, fmt, (1, npc), round_sf=round_sf, use_tma_aligned_col_major_sf=col and not packed)
    assert_equal(q.cpu(), q_ref)
    assert_equal(sf.cpu(), _sf_expect(sf_ref, packed))
    out = "bf16" if dtype == torch.bfloat16 else "fp32"
    back = Q.per_token_cast_back((q, sf), out, npc)  # int16 packed scales too (the Ascend form)
    assert_equal(back.cpu(), ref_cast.cast_back((q_ref, unpack_ascend_ue8m0(sf.cpu()) if packed else sf_ref), out,
                                                (1, npc)))


def test_requantise_a_quant_tensor():
    x = ref_cast.cast(torch.randn(37, 576), "e4m3", (1, 128), round_sf=True)
    q, sf = host(Q.per_token_cast(dev(*x), "e4m3", 128, x_block_size=(1, 128)))
    q_ref, sf_ref = ref_cast.cast(x, "e4m3", (1, 128), x_block_size=(1, 128))
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)


@pytest.mark.parametrize("rows,hidden", _sizes([(150, 576)], (1000, 2048)))
@pytest.mark.parametrize("block,col,round_sf,packed", [((128, 128), False, False, False),
                                                       ((32, 32), True, True, True)])
def test_per_block_cast(rows, hidden, block, col, round_sf, packed):
    x = torch.randn(rows, hidden) * 3
    q, sf = host(Q.per_block_cast(*dev(x), "e4m3", block, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                  use_packed_ue8m0=packed))
    q_ref, sf_ref = ref_cast.cast(x, "e4m3", block, round_sf=round_sf, use_tma_aligned_col_major_sf=col and not packed)
    assert_equal(q, q_ref)
    assert_equal(sf, _sf_expect(sf_ref, packed))


@pytest.mark.parametrize("rows,hidden", _sizes([(256, 192)], (1024, 2048)))
@pytest.mark.parametrize("round_sf", [False, True])
def test_per_channel_cast(rows, hidden, round_sf):
    x = torch.randn(rows, hidden) * 3
    q, sf = host(Q.per_channel_cast(*dev(x), "e4m3", 128, round_sf=round_sf))
    q_ref, sf_ref = ref_cast.cast(x, "e4m3", (128, 1), round_sf=round_sf)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)


@pytest.mark.parametrize("fmt,block,out", [("e4m3", (128, 128), "bf16"), ("e2m1", (1, 32), "fp32")])
def test_cast_back(fmt, block, out):
    x = torch.randn(150, 576) * 3
    q, sf = ref_cast.cast(x, fmt, block, use_tma_aligned_col_major_sf=True)
    y = Q.cast_back(dev(q, sf), out, block)
    assert_equal(y.cpu(), ref_cast.cast_back((q, sf), out, block))


@pytest.mark.parametrize("dtype,h,npc,weighted,clamp,layout", [
    (torch.bfloat16, 256, 128, False, None, (False, False, False)),
    (torch.float32, 384, 128, True, 0.5, (True, True, True)),
])
def test_swiglu_forward_and_per_token_cast(dtype, h, npc, weighted, clamp, layout):
    x, p2tt, w = swiglu_forward_inputs(dtype, h, weighted, seed=h + npc)
    col, round_sf, packed = layout
    q, sf = host(Q.swiglu_forward_and_per_token_cast(*dev(x), "e4m3", npc, *dev(p2tt, w),
                                                     use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                                     use_packed_ue8m0=packed, swiglu_clamp_value=clamp))
    y = ref_swiglu.swiglu_forward(x, p2tt, w, clamp)
    q_ref, sf_ref = ref_cast.cast(y, "e4m3", (1, npc), round_sf=round_sf, use_tma_aligned_col_major_sf=col and not packed)
    assert_equal(q, q_ref)
    assert_equal(sf, _sf_expect(sf_ref, packed))


@pytest.mark.parametrize("g_dtype,h,npc,round_sf,clamp", [(torch.bfloat16, 256, 128, True, None),
                                                          (torch.float32, 320, 32, False, 0.5)])
def test_swiglu_backward_and_per_token_cast(g_dtype, h, npc, round_sf, clamp):
    (q, sf), grad, w, p2tt, t2p = swiglu_backward_inputs(g_dtype, h, npc, seed=h + npc)
    out, (xq, xsf), xg, wg = host(Q.swiglu_backward_and_per_token_cast(
        dev(q, sf), *dev(grad, w, p2tt, t2p), npc, round_sf=round_sf, swiglu_clamp_value=clamp))
    out_r, xg_r, wg_r = ref_swiglu.swiglu_backward((q, sf), grad, w, p2tt, t2p, npc, clamp)
    xq_r, xsf_r = ref_cast.cast(xg_r, "e4m3", (1, npc), round_sf=round_sf)
    assert_equal(out, out_r.to(g_dtype))
    assert_equal(xg, xg_r.to(g_dtype))
    assert_equal(xq, xq_r)
    assert_equal(xsf, xsf_r)
    torch.testing.assert_close(wg, wg_r, atol=1e-4, rtol=1e-4)  # the row sum's order is the device's


@pytest.mark.parametrize("tokens,experts,k", _sizes([(37, 72, 6), (70, 256, 8)], (4099, 256, 8)))
def test_topk_gate(tokens, experts, k):
    s = tied_scores(tokens, experts)
    assert torch.equal(MOE.topk_gate(*dev(s), k).cpu(), ref_topk.stable_topk(s, k))


@pytest.mark.parametrize("use_mask,use_fix,use_unmapped,map_cols", [(False, False, False, 0), (True, True, True, 2)])
def test_top2_sum_gate(use_mask, use_fix, use_unmapped, map_cols):
    logits, bias, mask, fix, phys, count, unmapped = router_options(use_mask, use_fix, use_unmapped, map_cols)
    args = (logits, bias, 4, 2, 4, True, 1, 1.5, 1, 2, 1, 2, "sigmoid")
    un_dev = None if unmapped is None else unmapped.clone().to(DEVICE)  # written in place, as the reference's
    idx, w = host(MOE.top2_sum_gate(*dev(logits, bias), *args[2:], *dev(mask, fix, phys, count), un_dev))
    idx_ref, w_ref = ref_topk.top2_sum_gate(*args, mask, fix, phys, count, unmapped)
    assert torch.equal(idx, idx_ref)
    assert torch.allclose(w, w_ref)  # the cores' exp differs from torch's by rounding
    if unmapped is not None:
        assert torch.equal(un_dev.cpu(), unmapped)


@pytest.mark.parametrize("tokens", _sizes([601], 40000))
def test_normalize_weight(tokens):
    w = gate_weights(tokens)
    den, out = host(MOE.normalize_weight(*dev(w)))
    den_ref, out_ref = ref_moe.normalize_weight(w)
    assert_equal(den, den_ref)
    assert_equal(out, out_ref)


@pytest.mark.parametrize("tokens,k,experts,alignment,expanded,force", _sizes(
    [(37, 6, 20, 4, 0, False), (130, 5, 9, 16, 0, True)], (4096, 8, 256, 128, 0, False)))
def test_get_fused_mapping(tokens, k, experts, alignment, expanded, force):
    idx = routed_idx(tokens, k, experts)
    got = host(MOE.get_fused_mapping(*dev(idx), experts, expanded, alignment, force))
    want = ref_moe.get_fused_mapping(idx, experts, expanded, alignment, force)
    for g, w in zip(got[:7], want[:7], strict=True):
        assert_equal(g, w)
    assert got[7] == want[7]


@pytest.mark.parametrize("tokens,k,hidden,num_rows", _sizes([(37, 3, 96, 128)], (1000, 8, 2048, 8192)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_expand_to_fused(tokens, k, hidden, num_rows, dtype):
    pos = fused_positions(tokens, k, num_rows)
    x = torch.randn(tokens, hidden).to(dtype)
    p2e = torch.zeros(num_rows, dtype=torch.int32)
    got = MOE.expand_to_fused(*dev(x, pos, p2e)).cpu()
    assert_equal(got, ref_moe.expand_to_fused(x.view(torch.uint8), pos, p2e).view(dtype))


@pytest.mark.parametrize("tokens,k,hidden,num_rows", _sizes([(37, 3, 256, 128)], (1000, 8, 2048, 8192)))
def test_reduce_fused_weighted(tokens, k, hidden, num_rows):
    pos = fused_positions(tokens, k, num_rows)
    x, w = torch.randn(num_rows, hidden).bfloat16(), torch.rand(tokens, k)
    assert_equal(MOE.reduce_fused(*dev(x, w, pos)).cpu(), ref_moe.reduce_fused(x, w, pos))


def test_reduce_fused_scaled_to_e4m3():
    x, x_sf, w, pos, sf = scaled_reduce_inputs(torch.float8_e4m3fn, True, True, True, "e4m3")
    got = MOE.reduce_fused(dev(x, x_sf), *dev(w, pos), "e4m3", *dev(sf)).cpu()
    assert_equal(got.view(torch.uint8), ref_moe.reduce_fused((x, x_sf), w, pos, "e4m3", sf).view(torch.uint8))


@pytest.mark.parametrize("tokens,k,bins", _sizes([(41, 6, 37)], (4096, 8, 256)))
def test_routing_helpers(tokens, k, bins):
    from tile_kernels.reference import moe as ref

    idx = torch.randint(-1, bins, (tokens, k))
    assert torch.equal(MOE.group_count(*dev(idx), bins).cpu(), ref.group_count(idx, bins))
    assert_equal(MOE.aux_fi(*dev(idx), bins, k).cpu(), ref.aux_fi(idx, bins, k))
    for dtype in (torch.int64, torch.int32):
        x = idx.to(dtype)
        assert torch.equal(MOE.mask_indices_by_tp(*dev(x), bins, 4, 1, 2).cpu(), ref.mask_indices_by_tp(x, bins, 4, 1, 2))
    groups = torch.where(idx >= 0, idx % 8, idx)
    want = groups.clone()
    ref.inplace_unique_group_indices(want, 8)
    on_dev = groups.to(DEVICE)
    MOE.inplace_unique_group_indices(on_dev, 8)
    assert torch.equal(on_dev.cpu(), want)
    scores = torch.randn(tokens, 8, 5)
    scores[0] = 1.0
    scores[1, 2, 0] = float("nan")
    assert torch.equal(MOE.topk_sum_and_topk_group_idx(*dev(scores), 2, 3).cpu(),
                       ref_topk.topk_sum_and_topk_group_idx(scores, 2, 3))


@pytest.mark.parametrize("tokens", _sizes([37], 4099))
def test_moe_topk_gate_forward(tokens):
    from tile_kernels.reference import moe_topk_gate as ref

    from .test_moe_topk_gate import ALL_OPTIONS, ARGS, _inputs

    experts, k, shared = ALL_OPTIONS
    logits, kw = _inputs(tokens, experts, k, shared, 11)
    kw_dev = {n: v.clone().to(DEVICE) for n, v in kw.items()}
    scores = torch.empty(tokens, experts, device=DEVICE)
    ids, w = host(MOE.moe_topk_gate_forward(logits.to(DEVICE), k, True, shared, 0.5, 2, scores=scores, **kw_dev))
    idx_r, w_r, sc_r = torch.empty(tokens, k + shared, dtype=torch.int64), torch.empty(tokens, k + shared), \
        torch.empty(tokens, experts)
    ref.moe_topk_gate_forward(logits, k, shared, 0.5, 2, *[kw.get(n) for n in ARGS[:7]], kw["unmapped_topk_idx"],
                              kw["force_random"], idx_r, w_r, sc_r)
    assert torch.equal(ids, idx_r) and torch.equal(kw_dev["unmapped_topk_idx"].cpu(), kw["unmapped_topk_idx"])
    assert torch.allclose(w, w_r) and torch.allclose(scores.cpu(), sc_r)  # FP32 scores vs FP64-rounded ones
