"""get_fused_mapping consistency, expand_to_fused(_with_sf) and reduce_fused against the references (and
the references against loops), on every backend (the Ascend kernels on the twin included): -1 slots, rows
no slot maps, no tokens, every data dtype, weights, x_sf, E4M3 output and ``out=``. The kernels' sync
modes, UB chunks and E4M3-input reduce forms are in tests/tile_kernels/ascend/."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.reference.moe import get_fused_mapping as ref_mapping
from tile_kernels.testing.generator import generate_topk_idx
from tile_kernels.testing.numeric import assert_equal

from .._twin import product, twin_subset

M = tile_kernels.moe


def _mapping(tokens=300, k=6, experts=9, alignment=64):
    idx = generate_topk_idx({"num_send_tokens": tokens, "num_topk": k, "num_experts": experts, "num_ep_ranks": 8})
    return idx, M.get_fused_mapping(idx, experts, 0, alignment)


@pytest.mark.parametrize("alignment", [64, 128])
def test_get_fused_mapping_consistency(backend, alignment):
    idx, (p2e, p2t, p2tt, t2p, start, end, per_expert, per_list) = _mapping(alignment=alignment)
    k = idx.shape[1]
    assert per_list == per_expert.tolist() and p2e.shape[0] == sum(per_list)
    assert start[0] == 0 and torch.equal(start[1:], end[:-1]) and torch.equal(end - start, per_expert)
    for e in range(9):
        seg = p2e[start[e]:end[e]]
        c = int((idx == e).sum())
        assert seg[:c].eq(e).all() and seg[c:].eq(-1).all() and per_expert[e] % alignment == 0
    for t in range(idx.shape[0]):
        for j in range(k):
            p = int(t2p[t, j])
            assert (p < 0) == (idx[t, j] < 0)
            if p >= 0:
                assert p2e[p] == idx[t, j] and p2t[p] == t and p2tt[p] == t * k + j
    pad = p2e < 0
    assert p2t[pad].eq(-1).all() and p2tt[pad].eq(-1).all()
    assert backend != "ascend" or backend.served == ["get_fused_mapping"]


def test_get_fused_mapping_no_tokens(backend):
    idx = torch.empty(0, 4, dtype=torch.int64)
    out, expect = M.get_fused_mapping(idx, 6, 0, 8), ref_mapping(idx, 6, 0, 8)
    for a, b in zip(out[:7], expect[:7], strict=True):
        assert_equal(a, b)
    assert out[7] == expect[7]


@pytest.mark.parametrize("tokens,experts", [(300, 9), (6000, 40)])  # 6000 x 6: split over threads by token
def test_host_mapping_equals_reference(host, tokens, experts):
    idx = generate_topk_idx({"num_send_tokens": tokens, "num_topk": 6, "num_experts": experts, "num_ep_ranks": 8})
    out = M.get_fused_mapping(idx, experts, 0, 32)
    expect = ref_mapping(idx, experts, 0, 32)
    for a, b in zip(out[:7], expect[:7], strict=True):
        assert_equal(a, b)
    assert out[7] == expect[7]


def test_get_fused_mapping_without_sync(backend):
    idx, full = _mapping()
    out = M.get_fused_mapping(idx, 9, 4096, 64)
    assert out[7] == [] and out[0].shape == (4096,)
    assert_equal(out[3], full[3])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn])
def test_expand_to_fused(backend, dtype):
    idx, (p2e, _, _, t2p, *_) = _mapping()
    x = torch.randn(idx.shape[0], 512).to(dtype)
    out = M.expand_to_fused(x, t2p, p2e)
    assert_equal(out, ref.expand_to_fused(x, t2p, p2e))
    rows = out.view(torch.uint8) if dtype == torch.float8_e4m3fn else out
    for t, j in ((0, 0), (5, 1), (idx.shape[0] - 1, 0)):
        p = int(t2p[t, j])
        if p >= 0:
            assert torch.equal(rows[p], (x.view(torch.uint8) if dtype == torch.float8_e4m3fn else x)[t])
    assert (rows[p2e < 0] == 0).all()


@pytest.mark.parametrize("npc,col,round_sf,packed", [(128, False, True, False), (32, True, True, True),
                                                     (128, True, False, False)])
def test_expand_to_fused_with_sf(backend, npc, col, round_sf, packed):
    idx, (p2e, _, _, t2p, *_) = _mapping()
    x = ref.cast(torch.randn(idx.shape[0], 512), "e4m3", (1, npc), round_sf=round_sf)
    data, sf = x
    if packed:
        sf = ((sf.view(torch.int32) >> 23) & 0xFF).to(torch.uint8).view(torch.int32).contiguous()
    out, out_sf = M.expand_to_fused_with_sf((data, sf), npc, t2p, p2e, col)
    assert backend != "ascend" or backend.served[-1:] == ["expand_to_fused_with_sf"]
    out_ref, sf_ref = ref.expand_to_fused_with_sf((data, sf), npc, t2p, p2e, col)
    assert_equal(out, out_ref)
    assert_equal(out_sf, sf_ref)


@pytest.mark.parametrize("dtype,fp8_out,weights,with_x_sf", twin_subset(
    product([torch.float32, torch.bfloat16], [False, True], [False, True], [False, True]),
    [(torch.float32, False, False, False), (torch.bfloat16, True, True, True), (torch.bfloat16, False, True, False)],
    why="the twin runs the cases that take each form once, and BF16 in and out (the MoE combine)"))
def test_reduce_fused(backend, dtype, fp8_out, weights, with_x_sf):
    idx, (p2e, _, _, t2p, *_) = _mapping(tokens=100, alignment=16)
    x = torch.randn(p2e.shape[0], 256).to(dtype)
    w = torch.rand(idx.shape) if weights else None
    x_in = (x, torch.rand(p2e.shape[0])) if with_x_sf else x
    sf = torch.tensor([0.75]) if fp8_out else None
    fmt = "e4m3" if fp8_out else ""
    out = M.reduce_fused(x_in, w, t2p, fmt, sf)
    assert_equal(out, ref.reduce_fused(x_in, w, t2p, fmt, sf))
    buf = torch.empty_like(out)
    assert M.reduce_fused(x_in, w, t2p, fmt, sf, out=buf) is buf
    assert_equal(buf, out)


def test_reduce_fused_reference_by_hand():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    t2p = torch.tensor([[0, 2], [-1, 1]], dtype=torch.int32)
    w = torch.tensor([[0.5, 2.0], [9.0, 1.0]])
    assert ref.reduce_fused(x, w, t2p).tolist() == [[10.5, 13.0], [3.0, 4.0]]
