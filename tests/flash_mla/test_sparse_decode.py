"""flash_mla_with_kvcache in sparse mode: the host kernels and the Ascend kernels (on deepjit's twin) against the
FP32 reference, every format; the Ascend kernel's own cases (head blocks, cube cores, bytes read) are in
ascend/test_sparse_decode.py."""
import math

import pytest
import torch

import flash_mla
from flash_mla import reference
from flash_mla._operands import KVCacheFormat, _flat_bytes
from flash_mla.reference.sparse import KVScope

from .compare import DECODE_LSE, DECODE_OUT, assert_close, make_cache, poison_slots

F = KVCacheFormat


def _indices(b, s_q, topk, capacity, seed, invalid_share=0.2):
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randperm(capacity, generator=g)[:topk] for _ in range(b * s_q)]).view(b, s_q, topk)
    idx[torch.rand(b, s_q, topk, generator=g) < invalid_share] = -1
    return idx.to(torch.int32)


def _referenced(idx, lengths):
    topk = idx.shape[-1]
    keep = idx >= 0
    if lengths is not None:
        keep &= torch.arange(topk).view(1, 1, topk) < lengths.view(-1, 1, 1)
    return set(idx[keep].tolist())


def _case(fmt, placement, b, s_q, h_q, topk, page, num_blocks, seed, ragged, extra=None):
    """Builds (q, caches, indices, lengths) with every unreferenced slot NaN-poisoned."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s_q, h_q, fmt.d_qk, generator=g).clamp(-1, 1).bfloat16()
    scopes = []
    for i, (f, pl, tk, pg, nb) in enumerate([(fmt, placement, topk, page, num_blocks)] + ([extra] if extra else [])):
        cap = pg * nb
        idx = _indices(b, s_q, tk, cap, seed + 10 * i)
        lengths = None
        if ragged:
            lengths = torch.randint(0, tk + 1, (b,), generator=g, dtype=torch.int32)
            lengths[0] = 0           # a request with nothing from this cache
            lengths[-1] = tk
        unused = torch.tensor(sorted(set(range(cap)) - _referenced(idx, lengths)))
        cache = make_cache(f, nb, pg, pl, seed=seed + i, nan_fill=unused)
        scopes.append(KVScope(cache, f, f.placement(pl), idx, lengths))
    return q, scopes


def _run(q, scopes, sink=None, scale=None, batch_invariant=False, layout=None):
    meta, _ = flash_mla.get_mla_metadata()
    extra = scopes[1] if len(scopes) > 1 else None
    return flash_mla.flash_mla_with_kvcache(
        q, scopes[0].cache, None, None, 512, meta, None, scale, False, True, scopes[0].indices, sink,
        extra.cache if extra else None, extra.indices if extra else None, scopes[0].topk_length,
        extra.topk_length if extra else None, batch_invariant, kv_layout=layout)


CASES = [  # fmt, placement, h_q, page, s_q, sink, ragged
    (F.V32_FP8, None, 128, 64, 1, False, False),
    (F.V32_FP8, None, 64, 7, 2, True, True),
    (F.MODEL1_FP8, None, 64, 61, 2, True, True),
    (F.MODEL1_FP8, None, 128, 2, 1, False, False),
    (F.V41_FP8, "interleaved", 64, 5, 2, True, True),
    (F.V41_FP8, "block_split", 128, 53, 1, False, True),
]


@pytest.mark.backends("host", "ascend", why="compares with the reference itself")
@pytest.mark.parametrize("fmt,placement,h_q,page,s_q,with_sink,ragged", CASES)
def test_matches_reference(backend, fmt, placement, h_q, page, s_q, with_sink, ragged):
    b, topk = 3, 150
    num_blocks = max(2, 600 // page)
    q, scopes = _case(fmt, placement, b, s_q, h_q, topk, page, num_blocks, seed=h_q + page, ragged=ragged)
    sink = torch.randn(h_q) if with_sink else None
    if with_sink:
        sink[:2] = torch.tensor([float("inf"), float("-inf")])
    scale = fmt.d_qk ** -0.55
    out, lse = _run(q, scopes, sink, scale, layout=placement)
    ref_out, ref_lse = reference.sparse_decode(q, scopes, scale, 512, sink)
    assert out.shape == (b, s_q, h_q, 512) and out.dtype == torch.bfloat16
    assert lse.shape == (b, h_q, s_q) and lse.dtype == torch.float32
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")
    assert not torch.isnan(out).any()
    if ragged:  # request 0 read nothing: zero output, lse +inf
        assert out[0].abs().max() == 0 and bool((lse[0] == math.inf).all())
    assert backend != "ascend" or backend.served == ["sparse_decode"]


@pytest.mark.backends("host", "ascend", why="compares with the reference itself")
@pytest.mark.parametrize("extra_fmt,extra_placement", [(F.V41_FP4, "interleaved"), (F.V41_FP8, "interleaved")])
def test_extra_cache_one_softmax(backend, extra_fmt, extra_placement):
    q, scopes = _case(F.V41_FP8, "interleaved", 2, 2, 64, 70, 5, 40, seed=3, ragged=True,
                      extra=(extra_fmt, extra_placement, 90, 3, 50))
    sink = torch.randn(64)
    out, lse = _run(q, scopes, sink)
    ref_out, ref_lse = reference.sparse_decode(q, scopes, 512 ** -0.5, 512, sink)
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")
    # the extra tokens matter: without them the answer changes
    main_only, _ = reference.sparse_decode(q, scopes[:1], 512 ** -0.5, 512, sink)
    assert (main_only.float() - ref_out.float()).abs().max() > 1e-2


def test_split_kv_single_request_and_batch_invariance():
    # one row and two threads: the host splits the row's blocks and merges them by log-sum-exp
    q, scopes = _case(F.V32_FP8, None, 1, 1, 128, 600, 64, 20, seed=5, ragged=False)
    out, lse = _run(q, scopes)
    ref_out, ref_lse = reference.sparse_decode(q, scopes, 576 ** -0.5, 512, None)
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")
    # batch invariant: the row computed alone equals the same row computed inside a batch, bit for bit
    alone, _ = _run(q, scopes, batch_invariant=True)
    q2 = torch.cat([q, q.flip(2)])
    scope2 = KVScope(scopes[0].cache, scopes[0].fmt, scopes[0].placement, scopes[0].indices.repeat(2, 1, 1))
    batched, _ = _run(q2, [scope2], batch_invariant=True)
    assert torch.equal(alone[0], batched[0])


@pytest.mark.backends("host", "ascend", why="compares with the reference itself")
def test_all_invalid_rows(backend):
    q, scopes = _case(F.MODEL1_FP8, None, 2, 1, 64, 64, 16, 8, seed=9, ragged=False)
    scopes[0].indices[1] = -1
    out, lse = _run(q, scopes)
    assert out[1].abs().max() == 0 and bool((lse[1] == math.inf).all())
    assert backend != "ascend" or backend.served == ["sparse_decode"]
    ref_out, ref_lse = reference.sparse_decode(q, scopes, F.MODEL1_FP8.d_qk ** -0.5, 512, None)
    assert_close(out, ref_out, DECODE_OUT, "out")
    assert_close(lse, ref_lse, DECODE_LSE, "lse")


def test_metadata_config_is_recorded_and_checked():
    q, scopes = _case(F.V41_FP8, None, 2, 1, 64, 64, 16, 8, seed=1, ragged=False)
    meta, none = flash_mla.get_mla_metadata(torch.zeros(2, dtype=torch.int32), 64, 1, 64, True, 64)  # old form
    assert none is None and not meta.have_initialized
    args = (q, scopes[0].cache, None, None, 512, meta, None, None, False, True, scopes[0].indices)
    flash_mla.flash_mla_with_kvcache(*args)
    assert meta.have_initialized and meta.config.topk == 64 and meta.config.h_q == 64 and meta.config.b == 2
    flash_mla.flash_mla_with_kvcache(*args)  # same shapes: fine
    with pytest.raises(ValueError, match="expected config.topk 64 as on the first call .* got 32"):
        flash_mla.flash_mla_with_kvcache(q, scopes[0].cache, None, None, 512, meta, None, None, False, True,
                                         scopes[0].indices[:, :, :32].contiguous())
    with pytest.raises(ValueError, match="config.enable_batch_invariant"):
        flash_mla.flash_mla_with_kvcache(*args, enable_batch_invariant=True)


@pytest.mark.parametrize("fmt,placement", [(F.V32_FP8, None), (F.MODEL1_FP8, None), (F.V41_FP8, "interleaved"),
                                           (F.V41_FP8, "block_split")])
def test_host_dequantisation_is_bit_exact(fmt, placement):
    # one valid token per row: softmax weight 1, so out must equal the token's dequantised V bit for bit
    page, num_blocks, b = 5, 6, 4
    cache = make_cache(fmt, num_blocks, page, placement, seed=11)
    if fmt is F.V32_FP8:  # V3.2-release style arbitrary FP32 scales: the bf16 rounding of q * s matters
        flat = _flat_bytes(cache)
        for t in range(num_blocks * page):
            off = (t // page) * cache.stride(0) + (t % page) * 656 + 512
            flat[off:off + 16] = (flat[off:off + 16].clone().view(torch.float32) * 1.37).view(torch.uint8)
    tokens = torch.tensor([0, 7, 23, 29], dtype=torch.int32)
    idx = torch.full((b, 1, 9), -1, dtype=torch.int32)
    idx[:, 0, 4] = tokens
    poison = torch.tensor(sorted(set(range(num_blocks * page)) - set(tokens.tolist())))
    poison_slots(cache, fmt, placement, poison)
    q = torch.randn(b, 1, 64, fmt.d_qk).bfloat16()
    out, lse = _run(q, [KVScope(cache, fmt, fmt.placement(placement), idx)], layout=placement)
    v = flash_mla.dequantize_k_cache(cache, fmt, placement).view(-1, fmt.d_qk)[tokens.long(), :512]
    assert torch.equal(out[:, 0], v.unsqueeze(1).expand(b, 64, 512))
    k = flash_mla.dequantize_k_cache(cache, fmt, placement).view(-1, fmt.d_qk)[tokens.long()].float()
    logits = (q[:, 0].float() @ k.unsqueeze(-1)).squeeze(-1) * fmt.d_qk ** -0.5
    assert_close(lse[:, :, 0], logits, DECODE_LSE, "lse")


def test_host_fp4_dequantisation_is_bit_exact():
    cache = make_cache(F.V41_FP4, 3, 4, "interleaved", seed=12)
    # token 6's E4M3 scales: zero, subnormal, tiny, huge and the largest (no NaN: the fast path converts them);
    # token 7's the same and NaN (its 16 values then 0, as NaN is sanitised; the token takes the exact path)
    flat = _flat_bytes(cache)
    edges = [0x00, 0x01, 0x07, 0x08, 0x7E, 0x77]
    for slot, last in ((2, 0x77), (3, 0x7F)):
        scales = cache.stride(0) + slot * 288 + 256
        flat[scales:scales + 6] = torch.tensor(edges[:5] + [last], dtype=torch.uint8)
    tokens = [5, 11, 6, 7]
    idx = torch.tensor(tokens, dtype=torch.int32).view(4, 1, 1)
    main = make_cache(F.V41_FP8, 1, 2)
    q = torch.randn(4, 1, 64, 512).bfloat16()
    meta, _ = flash_mla.get_mla_metadata()
    out, _ = flash_mla.flash_mla_with_kvcache(q, main, None, None, 512, meta, None, None, False, True,
                                              torch.full((4, 1, 1), -1, dtype=torch.int32), None, cache, idx)
    v = flash_mla.dequantize_k_cache(cache).view(-1, 512)[tokens].nan_to_num(nan=0.0)
    assert v[3, 80:96].eq(0).all() and v[3, :80].ne(0).any()
    assert v[2, :16].eq(0).all() and v[2, 16:96].ne(0).any() and not v[2].isnan().any()
    assert torch.equal(out[:, 0], v.unsqueeze(1).expand(4, 64, 512))
