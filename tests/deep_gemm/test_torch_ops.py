"""``torch.ops.deep_gemm.*``: registered with meta shapes and mutation annotations, so ``torch.compile``
(fullgraph, aot_eager: fake tensors and functionalisation) traces a module calling them on CPU."""
import torch

import deep_gemm


def test_ops_are_registered_with_mutation_annotations():
    schema = torch.ops.deep_gemm.bf16_gemm_nt.default._schema
    assert [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write] == ["d"]
    assert not any(a.alias_info for a in torch.ops.deep_gemm.get_paged_mqa_logits_metadata.default._schema.arguments)


class _Block(torch.nn.Module):
    def forward(self, a, b, layout, lens):
        d = torch.empty(a.shape[0], b.shape[0], dtype=torch.bfloat16)
        torch.ops.deep_gemm.bf16_gemm_nt(a, b, d)
        g = torch.empty(a.shape[0], b.shape[0], dtype=torch.bfloat16)
        torch.ops.deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b.view(1, *b.shape).expand(2, -1, -1).contiguous(),
                                                              g, layout)
        return d.float() + 1, g, torch.ops.deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 4)


def test_compiles_fullgraph_and_matches_eager():
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    a, b = torch.randn(64, 128).bfloat16(), torch.randn(48, 128).bfloat16()
    layout = torch.tensor([0] * 32 + [1] * 20 + [-1] * 12, dtype=torch.int32)
    lens = torch.tensor([[300], [10], [700]], dtype=torch.int32)
    got = torch.compile(_Block(), fullgraph=True, backend="aot_eager")(a, b, layout, lens)
    want = _Block()(a, b, layout, lens)
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y)
    ref = (a.float() @ b.float().T).bfloat16().float() + 1
    assert torch.equal(got[0], ref) and torch.equal(got[1][52:], torch.zeros(12, 48).bfloat16())
    assert got[2].tolist() == deep_gemm.get_paged_mqa_logits_metadata(lens, 64, 4).tolist()
