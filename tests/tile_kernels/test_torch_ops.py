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
