"""``torch.ops.flash_mla.*`` under upstream's extension op names: meta shapes and mutation annotations, so
``torch.compile`` (fullgraph, aot_eager) traces a module calling them on CPU."""
import torch

import flash_mla


def _varlen(h=4, d=64, lens=(5, 9)):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(sum(lens), h, d, generator=g).bfloat16() for _ in range(3))
    return q, k, v, torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32), max(lens)


class _Prefill(torch.nn.Module):
    def forward(self, q, k, v, cu, max_len, sq, skv, indices):
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[1], q.shape[0]).t()
        torch.ops.flash_mla.dense_prefill_fwd(torch.empty(0, dtype=torch.uint8), q, k, v, cu, cu, out, lse, 1,
                                              q.shape[-1] ** -0.5, max_len, max_len, True)
        sparse_out, max_logits, sparse_lse = torch.ops.flash_mla.sparse_prefill_fwd(sq, skv, indices, 0.1, 512)
        return out, lse, sparse_out, sparse_lse


def test_mutated_outputs_are_annotated():
    schema = torch.ops.flash_mla.dense_prefill_fwd.default._schema
    assert [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write] == ["out", "lse"]
    bwd = torch.ops.flash_mla.dense_prefill_bwd.default._schema
    assert [a.name for a in bwd.arguments if a.alias_info and a.alias_info.is_write] == ["dq", "dk", "dv"]


def test_compiles_fullgraph_and_matches_the_public_functions():
    q, k, v, cu, max_len = _varlen()
    sq, skv = torch.randn(3, 64, 576).bfloat16(), torch.randn(40, 1, 576).bfloat16()
    indices = torch.randint(0, 40, (3, 1, 64), dtype=torch.int32)
    out, lse, sparse_out, sparse_lse = torch.compile(_Prefill(), fullgraph=True, backend="aot_eager")(
        q, k, v, cu, max_len, sq, skv, indices)
    want_out, want_lse = flash_mla.flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    want_sparse = flash_mla.flash_mla_sparse_fwd(sq, skv, indices, 0.1, 512)
    assert torch.equal(sparse_out, want_sparse[0]) and torch.equal(sparse_lse, want_sparse[2])


class _Decode(torch.nn.Module):
    def forward(self, q, cache, indices, topk_length, sink, dq, dcache, seqlens, table):
        out, lse, tile_meta, splits = torch.ops.flash_mla.sparse_decode_fwd(q, cache, indices, topk_length, sink, None,
                                                                            None, None, None, None, 512, 0.05)
        dense_tile, dense_splits = torch.ops.flash_mla.get_mla_decoding_metadata(seqlens, dq.shape[1] * dq.shape[2], 1)
        dout, dlse, _, _ = torch.ops.flash_mla.dense_decode_fwd(dq, dcache, 512, seqlens, table, 0.04, True,
                                                                dense_tile, dense_splits)
        return out, lse, tile_meta, splits, dout, dlse, dense_splits


def test_decode_ops_compile_fullgraph_and_match_flash_mla_with_kvcache():
    from .test_dense import _dense_case
    from .test_sparse_decode import F, _case
    q, scopes = _case(F.V32_FP8, None, 1, 1, 64, 32, 7, 6, seed=3, ragged=True)
    sink = torch.randn(64)
    dq, dcache, table, seqlens = _dense_case(2, 2, 8, 1, 40, 64, torch.bfloat16, seed=5)
    inputs = (q, scopes[0].cache, scopes[0].indices, scopes[0].topk_length, sink, dq, dcache, seqlens, table)
    got = torch.compile(_Decode(), fullgraph=True, backend="aot_eager")(*inputs)
    want = _Decode()(*inputs)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and torch.equal(a, b)
    out, lse = flash_mla.flash_mla_with_kvcache(q, scopes[0].cache, None, None, 512, flash_mla.get_mla_metadata()[0],
                                                softmax_scale=0.05, indices=scopes[0].indices, attn_sink=sink,
                                                topk_length=scopes[0].topk_length)
    assert torch.equal(got[0], out) and torch.equal(got[1], lse)
    assert got[2].shape == (0, 8) and got[3].tolist() == [0, 1] and got[6].tolist() == [0, 1, 2]
    dout, dlse = flash_mla.flash_mla_with_kvcache(dq, dcache, table, seqlens, 512, flash_mla.get_mla_metadata()[0],
                                                  softmax_scale=0.04, causal=True, is_fp8_kvcache=False)
    assert torch.equal(got[4], dout) and torch.equal(got[5], dlse)
