"""tile_kernels' public functions called by their public names under ``torch.compile(fullgraph=True)``: each has a
``torch.ops.tile_kernels`` form (``torch_ops``, ``_torch_ops_more``) that Dynamo calls in its place, so the calls
trace without a graph break and equal the eager calls bit for bit -- the routers (``top2_sum_gate``,
``topk_sum_and_topk_group_idx``, ``moe_topk_gate_forward`` with its written ``unmapped_topk_idx``/``scores``), the
MoE helpers, the token/block/channel/fused/SwiGLU casts, mHC and Engram. A call form an op does not cover
(``out=`` buffers, mHC calls needing gradients, a mapping sized by a host read) runs the function itself, as
``tile_kernels.torch_ops`` says. ``unpack_from_e2m1fn_x2`` and ``round_to_tf32`` are plain torch and trace as
they are."""
import torch

import tile_kernels as tk
from tile_kernels.modeling.mhc import ops as mhc


def _bytes(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t


def _same_as_eager(fn, *args):
    torch._dynamo.reset()
    got, want = torch.compile(fn, fullgraph=True, backend="aot_eager")(*args), fn(*args)
    for x, y in zip(got, want, strict=True):
        if isinstance(x, list):
            assert x == y
            continue
        assert x.shape == y.shape and x.dtype == y.dtype and torch.equal(_bytes(x), _bytes(y))


def test_moe_routing_and_layout():
    g = torch.Generator().manual_seed(0)
    t, e, h = 6, 8, 256
    scores, x, w = torch.randn(t, e, generator=g), torch.randn(t, h, generator=g).bfloat16(), torch.rand(t, 2, generator=g)

    def f(scores, x, w, groups):
        idx = tk.moe.topk_gate(scores, 2)
        mapping = tk.moe.get_fused_mapping(idx, e, t * 2 + e * 4, 4)
        expanded = tk.moe.expand_to_fused(x, mapping[3], mapping[0])
        den, normed = tk.moe.normalize_weight(w)
        groups = groups.clone()
        tk.moe.inplace_unique_group_indices(groups, 4)
        return (idx, *mapping[:7], mapping[7], expanded, tk.moe.reduce_fused(expanded, normed, mapping[3]), den,
                groups)
    _same_as_eager(f, scores, x, w, torch.tensor([[1, 1, 2], [0, 3, 3]]))


def test_casts_and_transposes():
    x = torch.randn(128, 256, generator=torch.Generator().manual_seed(1)).bfloat16()

    def f(x):
        q = tk.quant.per_token_cast(x, "e4m3", 128)
        back = tk.quant.per_token_cast_back(q, "bf16", 128)
        return (*q, back, *tk.quant.per_channel_cast(x, "e4m3", 128), tk.transpose.transpose(x),
                tk.transpose.batched_transpose(x.view(2, 64, 256)))
    _same_as_eager(f, x)


def test_mhc_ops():
    g = torch.Generator().manual_seed(2)
    hidden, layer_out = torch.randn(1, 3, 64, generator=g).bfloat16(), torch.randn(1, 3, 64, generator=g).bfloat16()
    mixes, scale, base = torch.randn(1, 3, 24, generator=g), torch.tensor([0.8, 1.2, 0.5]), torch.randn(24) * 0.1
    comb = torch.rand(1, 3, 4, 4, generator=g)
    residual, fn = torch.randn(1, 5, 4, 64, generator=g).bfloat16(), torch.randn(24, 256, generator=g) * 1e-2

    def f(hidden, mixes, scale, base, layer_out, comb, residual, fn):
        res = mhc.expand_to_mhc(hidden, 4)
        pre, post, comb_mix = mhc.mhc_pre_split_mixes(mixes, scale, base, 4, 2.0, 1e-6)
        return (res, mhc.mhc_pre_apply_mix(res, pre), mhc.mhc_post(layer_out, res, post, comb),
                mhc.sinkhorn_normalize(comb_mix.abs() + 0.1, 5),
                *mhc.mhc_pre_big_fuse(residual, fn, scale, base, 1e-6, 1e-6, 1e-6, 2.0, 10))
    _same_as_eager(f, hidden, mixes, scale, base, layer_out, comb, residual, fn)


def test_routing_helpers():
    g = torch.Generator().manual_seed(3)
    t, e, k = 10, 32, 4
    logits, bias = torch.randn(t, e, generator=g), torch.randn(e, generator=g) * 0.1
    mask = torch.arange(t) % 4 != 3
    count = torch.tensor([1, 2] * 16 + [2], dtype=torch.int32)
    phys = torch.arange((e + 1) * 2, dtype=torch.int32).view(e + 1, 2)
    force = torch.arange(t) % 5 == 0

    def f(logits, bias, mask, phys, count, force):
        unmapped, scores = torch.empty(t, k, dtype=torch.int64), torch.empty(t, e)
        ids, w = tk.moe.moe_topk_gate_forward(logits, k, True, 1, 1.5, 2, mask=mask, bias=bias, to_physical_map=phys,
                                              logical_count=count, unmapped_topk_idx=unmapped, force_random=force,
                                              scores=scores)
        unmapped2 = torch.empty(t, k, dtype=torch.int64)
        ids2, w2 = tk.moe.top2_sum_gate(logits, bias, k, 2, 4, False, 0, 1.0, 0, 2, 0, 1, "sigmoid", mask=mask,
                                        unmapped_topk_idx=unmapped2)
        groups = tk.moe.topk_sum_and_topk_group_idx(logits.view(t, 4, 8), 2, 2)
        return (ids, w, unmapped, scores, tk.moe.moe_topk_gate(logits, k, False, 0, 1.0, 0)[0], ids2, w2, unmapped2,
                groups, tk.moe.aux_fi(ids2, e, k), tk.moe.group_count(groups, 4),
                tk.moe.mask_indices_by_tp(ids2, e, 2, 1, 2))
    _same_as_eager(f, logits, bias, mask, phys, count, force)


def test_block_fused_and_swiglu_casts():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(128, 256, generator=g).bfloat16()
    pair = tk.quant.per_token_cast(x, "e4m3", 128)
    fp4 = tk.quant.per_token_cast(x, "e2m1", 32, round_sf=True)
    sf = tk.quant.per_block_cast(x, "e4m3", (128, 128))[1]
    rows, k = 8, 2
    pos = torch.arange(rows, dtype=torch.int32)
    t2p, weights = pos.view(rows // k, k).contiguous(), torch.rand(rows // k, k, generator=g)
    grad = torch.randn(rows, 128, generator=g).bfloat16()

    def f(x, pair, fp4, sf, t2p, pos, weights, grad):
        small = (pair[0][:rows], pair[1][:rows])
        clamped = torch.zeros(3, dtype=torch.int64)
        out, (q, q_sf), x_grad, w_grad = tk.quant.swiglu_backward_and_per_token_cast(small, grad, weights, pos, t2p, 128)
        return (*tk.quant.per_block_cast(x, "e4m3", (128, 128)),
                tk.quant.per_block_cast_with_precomputed_sf(x, "e4m3", (128, 128), sf),
                tk.quant.per_block_cast_with_sf_only(x, "e4m3", (128, 128)),
                *tk.quant.per_block_cast_lossless(fp4, "e4m3", (1, 32), (128, 128), round_sf=True),
                tk.quant.cast_back(pair, "bf16", (1, 128)),
                tk.quant.per_token_cast_with_precomputed_sf(x, "e4m3", 128, pair[1]),
                tk.quant.per_token_cast_with_sf_only(x, "e4m3", 128),
                *tk.quant.per_channel_cast_fused(pair, "e4m3", 128, num_per_channels=128),
                *tk.quant.per_channel_cast_and_transpose(x, "e4m3", 128),
                *tk.quant.swiglu_forward_and_per_token_cast(x, "e4m3", 128, swiglu_clamp_value=1.0,
                                                            clamped_count=clamped), clamped,
                *tk.quant.swiglu_forward_and_per_channel_cast_and_transpose(x, "e4m3", 128),
                out, q, q_sf, x_grad, w_grad,
                *tk.moe.expand_to_fused_with_sf((small[0][:rows // k], small[1][:rows // k]), 128, t2p,
                                                torch.zeros(rows, dtype=torch.int32)),
                *tk.moe.expand_to_fused_with_sf((small[0][:rows // k], small[1][:rows // k]), 128, t2p,
                                                torch.zeros(rows, dtype=torch.int32), True))
    _same_as_eager(f, x, pair, fp4, sf, t2p, pos, weights, grad)


def test_engram():
    from tile_kernels.reference.engram import make_offsets
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 1000, (6, 3), dtype=torch.int32, generator=g)
    mult = torch.randint(0, 1000, (2, 3), dtype=torch.int64, generator=g)
    vocab = torch.randint(1000, 5000, (2, 2, 8), dtype=torch.int32, generator=g)
    h, k = torch.randn(6, 4, 64, generator=g).bfloat16(), torch.randn(6, 4, 64, generator=g).bfloat16()
    v, wh, we = torch.randn(6, 64, generator=g).bfloat16(), torch.randn(4, 64, generator=g).bfloat16(), \
        torch.randn(4, 64, generator=g).bfloat16()
    grad = torch.randn(6, 4, 64, generator=g).bfloat16()
    E = tk.engram

    def f(ids, mult, vocab, h, k, v, wh, we, grad):
        wf = E.fused_weight(wh, we)
        out, dot, gate, rx, rk = E.engram_gate_fwd(h, k, v, wf, 1e-20, 1e-6)
        plain = E.engram_gate_fwd(h, k, v, wf, 1e-20, 1e-6, save_for_backward=False)
        gx, gk, gv, partial = E.engram_gate_bwd(grad, h, k, v, wf, dot, gate, rx, rk, 1e-6)
        gwh, gwe = torch.zeros(4, 64), torch.zeros(4, 64)
        E.grad_w_reduce(partial, wh, we, gwh, gwe)
        assert plain[1] is None and plain[4] is None
        return (E.engram_hash(ids, mult, vocab, make_offsets(vocab)), wf, out, dot, gate, rx, rk, plain[0], gx, gk,
                gv, partial, gwh, gwe)
    _same_as_eager(f, ids, mult, vocab, h, k, v, wh, we, grad)
