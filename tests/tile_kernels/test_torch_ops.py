"""``torch.ops.tile_kernels.*``: meta shapes and mutation annotations, so ``torch.compile`` (fullgraph,
aot_eager) traces a module calling them on CPU."""
import torch

import tile_kernels
from tile_kernels.modeling.mhc.ops import mhc_pre_big_fuse


class _Block(torch.nn.Module):
    def forward(self, x, w, groups, residual, fn, scale, base):
        t = torch.ops.tile_kernels.transpose(x)
        den, normed = torch.ops.tile_kernels.normalize_weight(w)
        g = groups.clone()
        torch.ops.tile_kernels.inplace_unique_group_indices(g, 4)
        post, comb, layer_input = torch.ops.tile_kernels.mhc_pre_big_fuse(residual, fn, scale, base, 1e-6, 1e-6, 1e-6,
                                                                          2.0, 10)
        return t * 2, den, normed, g, post, comb, layer_input


def test_mutation_is_annotated():
    schema = torch.ops.tile_kernels.inplace_unique_group_indices.default._schema
    assert [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write] == ["group_indices"]


def test_compiles_fullgraph_and_matches_the_ops():
    x, w = torch.randn(8, 24).bfloat16(), torch.rand(6, 4)
    groups = torch.tensor([[1, 1, 2], [0, 3, 3]])
    residual, fn = torch.randn(1, 5, 4, 64).bfloat16(), torch.randn(24, 256) * 1e-2
    scale, base = torch.tensor([0.8, 1.2, 0.5]), torch.randn(24) * 0.1
    got = torch.compile(_Block(), fullgraph=True, backend="aot_eager")(x, w, groups, residual, fn, scale, base)
    g = groups.clone()
    tile_kernels.moe.inplace_unique_group_indices(g, 4)
    want = (tile_kernels.transpose.transpose(x) * 2, *tile_kernels.moe.normalize_weight(w), g,
            *mhc_pre_big_fuse(residual, fn, scale, base, 1e-6, 1e-6, 1e-6, 2.0, 10))
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and torch.equal(a, b)
    assert torch.equal(groups, torch.tensor([[1, 1, 2], [0, 3, 3]]))   # the caller's input was not written


class _Moe(torch.nn.Module):
    def forward(self, scores, x, weights, num_experts: int, num_expanded: int):
        idx = torch.ops.tile_kernels.topk_gate(scores, 2)
        pos_to_expert, _, _, token_topk_to_pos, _, _, _ = torch.ops.tile_kernels.get_fused_mapping(
            idx, num_experts, num_expanded, 4)
        expanded = torch.ops.tile_kernels.expand_to_fused(x, token_topk_to_pos, pos_to_expert)
        q, sf = torch.ops.tile_kernels.per_token_cast(expanded, "e4m3", 128)
        back = torch.ops.tile_kernels.per_token_cast_back(q, sf, "bf16", 128)
        cq, csf = torch.ops.tile_kernels.per_channel_cast(x.repeat(64, 1), "e4m3", 128)
        reduced = torch.ops.tile_kernels.reduce_fused(back, weights, token_topk_to_pos)
        return idx, pos_to_expert, q.view(torch.uint8), sf, reduced, cq.view(torch.uint8), csf


class _Mhc(torch.nn.Module):
    def forward(self, hidden, mixes, scale, base, layer_out, comb):
        residual = torch.ops.tile_kernels.expand_to_mhc(hidden, 4)
        pre, post, comb_mix = torch.ops.tile_kernels.mhc_pre_split_mixes(mixes, scale, base, 4, 2.0, 1e-6)
        layer_in = torch.ops.tile_kernels.mhc_pre_apply_mix(residual, pre)
        out = torch.ops.tile_kernels.mhc_post(layer_out, residual, post, comb)
        return layer_in, out, torch.ops.tile_kernels.sinkhorn_normalize(comb_mix.abs() + 0.1, 5)


def _meta_matches(op, inputs, outputs):
    """The op's Meta kernel gives the eager outputs' shapes and dtypes."""
    metas = op(*(t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs))
    metas = metas if isinstance(metas, tuple) else (metas,)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    assert [(m.shape, m.dtype) for m in metas] == [(o.shape, o.dtype) for o in outputs], op


def test_moe_and_cast_ops_compile_and_match_the_functions():
    g = torch.Generator().manual_seed(0)
    T, E, H = 6, 8, 256
    scores, x = torch.randn(T, E, generator=g), torch.randn(T, H, generator=g).bfloat16()
    weights = torch.rand(T, 2, generator=g)
    num_expanded = T * 2 + E * 4
    got = torch.compile(_Moe(), fullgraph=True, backend="aot_eager", dynamic=False)(scores, x, weights, E,
                                                                                   num_expanded)
    want = _Moe()(scores, x, weights, E, num_expanded)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    idx = tile_kernels.moe.topk_gate(scores, 2)
    mapping = tile_kernels.moe.get_fused_mapping(idx, E, num_expanded, 4)
    expanded = tile_kernels.moe.expand_to_fused(x, mapping[3], mapping[0])
    q, sf = tile_kernels.quant.per_token_cast(expanded, "e4m3", 128)
    assert torch.equal(got[0], idx) and torch.equal(got[2], q.view(torch.uint8)) and torch.equal(got[3], sf)
    back = tile_kernels.quant.per_token_cast_back((q, sf), "bf16", 128)
    assert torch.equal(got[4], tile_kernels.moe.reduce_fused(back, weights, mapping[3]))
    ops = torch.ops.tile_kernels
    _meta_matches(ops.get_fused_mapping, (idx, E, num_expanded, 4), tuple(mapping[:7]))
    _meta_matches(ops.expand_to_fused, (x, mapping[3], mapping[0]), expanded)
    _meta_matches(ops.per_token_cast, (expanded, "e4m3", 128), (q, sf))


def test_mhc_ops_compile_and_match_the_functions():
    from tile_kernels.modeling.mhc import ops as mhc
    g = torch.Generator().manual_seed(1)
    hidden, layer_out = torch.randn(1, 3, 64, generator=g).bfloat16(), torch.randn(1, 3, 64, generator=g).bfloat16()
    mixes, scale, base = torch.randn(1, 3, 24, generator=g), torch.tensor([0.8, 1.2, 0.5]), torch.randn(24) * 0.1
    comb = torch.rand(1, 3, 4, 4, generator=g)
    got = torch.compile(_Mhc(), fullgraph=True, backend="aot_eager")(hidden, mixes, scale, base, layer_out, comb)
    residual = mhc.expand_to_mhc(hidden, 4)
    pre, post, comb_mix = mhc.mhc_pre_split_mixes(mixes, scale, base, 4, 2.0, 1e-6)
    want = (mhc.mhc_pre_apply_mix(residual, pre), mhc.mhc_post(layer_out, residual, post, comb),
            mhc.sinkhorn_normalize(comb_mix.abs() + 0.1, 5))
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    ops = torch.ops.tile_kernels
    _meta_matches(ops.mhc_pre_split_mixes, (mixes, scale, base, 4, 2.0, 1e-6), (pre, post, comb_mix))
    _meta_matches(ops.mhc_pre_apply_mix, (residual, pre), want[0])
    _meta_matches(ops.mhc_post, (layer_out, residual, post, comb), want[1])
    _meta_matches(ops.expand_to_mhc, (hidden, 4), residual)
