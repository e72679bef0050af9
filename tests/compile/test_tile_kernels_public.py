"""tile_kernels' public functions that have ``torch.ops.tile_kernels`` forms, called by their public names under
``torch.compile(fullgraph=True)``: traced without a graph break, equal to the eager calls bit for bit. A call form
the op does not cover (``out=`` buffers, mHC calls needing gradients, a mapping sized by a host read) runs the
function itself, as ``tile_kernels.torch_ops`` says. Not traced yet (no op form; they break the graph):
``top2_sum_gate``, ``topk_sum_and_topk_group_idx``, ``moe_topk_gate_forward``, ``aux_fi``, ``group_count``,
``mask_indices_by_tp``, ``expand_to_fused_with_sf``, the block/fused casts (``per_block_cast*``, ``cast_back``,
``per_token_cast_with_*``, ``swiglu_*``, ``per_channel_cast_fused``, ``per_channel_cast_and_transpose``,
``unpack_from_e2m1fn_x2``) and Engram (``engram_hash``, ``engram_gate_fwd/bwd``, ``fused_weight``,
``grad_w_reduce``)."""
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
