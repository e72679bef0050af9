"""The DSA layer against the FP32 reference written from the math (references.dsa_sequence: plain,
not absorbed, MLA; no FP8), in prefill and decode, with and without a sparse selection."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from deepseek_layers.dsa import DSA, DSACache, DSAConfig, DSAWeights
from tests.deepseek_layers import references as ref
from tests.testkit.numerics import calc_diff, randn

# Given the same attended positions, the layer differs from the FP32 reference by the FP8 latent cache
# (one E4M3 operand in QK^T and in PV; upstream bounds one FP8 GEMM by calc_diff 1e-3) and BF16
# rounding of the projections: measured 5e-4 to 7e-4. One wrongly attended position out of 16 already
# gives > 5e-3.
DSA_TOLERANCE = 1.5e-3
# The indexer runs on E4M3 queries and keys, so its ranking may swap positions whose FP32 logits differ
# by about the noise E4M3 rounding adds (references.indexer estimates its RMS per logit). A selected
# position may trail a left-out one by at most SELECTION_SIGMAS times their combined noise.
SELECTION_SIGMAS = 6.0

PREFILL_LENGTHS = (40, 70)
DECODE_STEPS = 3


def _config(index_topk: int) -> DSAConfig:
    return DSAConfig(dim=256, q_lora_rank=128, n_heads=64, index_n_heads=16, index_head_dim=128, index_topk=index_topk)


def _attended(row: torch.Tensor) -> torch.Tensor:
    return row[row >= 0].long()


def _check_selection(attended: torch.Tensor, logits_row: torch.Tensor, noise_row: torch.Tensor, topk: int) -> float:
    """``attended`` is a top-``topk`` of the causal positions by the reference logits, up to E4M3 noise.
    Returns the worst swap in noise units (selected logit below a left-out one)."""
    valid = torch.isfinite(logits_row)
    assert attended.numel() == min(topk, int(valid.sum()))
    assert attended.unique().numel() == attended.numel() and bool(valid[attended].all())
    left_out = valid.clone()
    left_out[attended] = False
    if not left_out.any():
        return 0.0
    gap = logits_row[left_out].view(1, -1) - logits_row[attended].view(-1, 1)
    sigma = (noise_row[left_out].view(1, -1).pow(2) + noise_row[attended].view(-1, 1).pow(2)).sqrt()
    worst = float((gap / sigma).max())
    assert worst <= SELECTION_SIGMAS, worst
    return worst


def _run(index_topk: int):
    """Prefill two sequences of different lengths, then decode a few tokens into both; keep every output."""
    cfg = _config(index_topk)
    w = DSAWeights.random(cfg, seed=11)
    layer = DSA(cfg, w)
    cache = DSACache(cfg, batch=len(PREFILL_LENGTHS), max_seq_len=128, page_block_size=64, seed=3)
    xs = [randn(n, cfg.dim, seed=20 + s).bfloat16() for s, n in enumerate(PREFILL_LENGTHS)]
    prefill = [layer.prefill(x, cache, s, return_topk=True) for s, x in enumerate(xs)]
    decode = []
    for step in range(DECODE_STEPS):
        x = randn(len(xs), cfg.dim, seed=40 + step).bfloat16()
        decode.append(layer.decode(x, cache, return_topk=True))
        xs = [torch.cat([seq, x[s:s + 1]]) for s, seq in enumerate(xs)]
    return cfg, w, xs, prefill, decode, cache


@pytest.fixture(scope="module", params=[256, 16], ids=["dense-topk", "sparse-topk"])
def run(request):
    return _run(request.param)


def test_prefill(run):
    cfg, w, xs, prefill, _, _ = run
    for s, (out, topk) in enumerate(prefill):
        x = xs[s][:PREFILL_LENGTHS[s]]
        attended = [_attended(row) for row in topk]
        logits, noise = ref.indexer(cfg, w, x)
        for i, row in enumerate(attended):
            _check_selection(row, logits[i], noise[i], cfg.index_topk)
            if cfg.index_topk > i:  # no sparsity yet: every past token
                assert sorted(row.tolist()) == list(range(i + 1))
        expected, _ = ref.dsa_sequence(cfg, w, x, attended)
        assert out.dtype == torch.bfloat16 and out.shape == x.shape
        assert calc_diff(out, expected) < DSA_TOLERANCE


def test_decode(run):
    cfg, w, xs, _, decode, cache = run
    assert cache.seq_lens.tolist() == [n + DECODE_STEPS for n in PREFILL_LENGTHS]
    for step, (out, topk) in enumerate(decode):
        assert out.shape == (len(xs), cfg.dim)
        for s, seq in enumerate(xs):
            length = PREFILL_LENGTHS[s] + step + 1
            prefix = seq[:length]
            logits, noise = ref.indexer(cfg, w, prefix)
            last = _attended(topk[s])
            _check_selection(last, logits[-1], noise[-1], cfg.index_topk)
            if cfg.index_topk >= length:
                assert sorted(last.tolist()) == list(range(length))
            expected, _ = ref.dsa_sequence(cfg, w, prefix, [None] * (length - 1) + [last], rows=[length - 1])
            assert calc_diff(out[s], expected[0]) < DSA_TOLERANCE


# ---- bad input ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small():
    cfg = _config(16)
    return DSA(cfg, DSAWeights.random(cfg)), cfg


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from([torch.float32, torch.bfloat16]), rows=st.integers(0, 200),
       width=st.sampled_from([128, 256, 257]))
def test_bad_prefill_input_is_refused(small, dtype, rows, width):
    layer, cfg = small
    cache = DSACache(cfg, batch=1, max_seq_len=128)
    x = torch.zeros(rows, width, dtype=dtype)
    if dtype == torch.bfloat16 and width == cfg.dim and 0 < rows <= 128:
        return
    with pytest.raises((TypeError, ValueError), match="x: expected"):
        layer.prefill(x, cache, 0)
    assert int(cache.seq_lens[0]) == 0 and not cache.kv.any()


def test_bad_sequence_state_is_refused(small):
    layer, cfg = small
    cache = DSACache(cfg, batch=2, max_seq_len=64)
    x = randn(8, cfg.dim).bfloat16()
    with pytest.raises(ValueError, match="seq: expected"):
        layer.prefill(x, cache, 2)
    layer.prefill(x, cache, 0)
    with pytest.raises(ValueError, match=r"^seq: expected an empty sequence .*, got seq 0, which already holds 8 tokens$"):
        layer.prefill(x, cache, 0)
    with pytest.raises(ValueError, match=r"x: expected shape \(2, 256\)"):
        layer.decode(randn(3, cfg.dim).bfloat16(), cache)
    cache.seq_lens[1] = 64
    with pytest.raises(ValueError, match=r"^cache: expected room for one more token in every sequence "
                                         r"\(max_seq_len 64\), got sequence 1 full$"):
        layer.decode(randn(2, cfg.dim).bfloat16(), cache)
    with pytest.raises(ValueError, match=r"^index_n_heads: expected a divisor of 128 .*, got 3$"):
        DSAConfig(**{**cfg.__dict__, "index_n_heads": 3}).validate()
    with pytest.raises(ValueError, match="n_heads"):
        DSA(DSAConfig(**{**cfg.__dict__, "n_heads": 32}), DSAWeights.random(cfg))
    w = DSAWeights.random(cfg)
    w.wo = w.wo[:, :64]
    with pytest.raises(ValueError, match="weights.wo"):
        DSA(cfg, w)
    with pytest.raises(ValueError, match="page_block_size"):
        DSACache(cfg, batch=1, max_seq_len=64, page_block_size=16)


def test_foreign_device_and_cache_are_refused_before_any_write(small):
    layer, cfg = small
    cache = DSACache(cfg, batch=1, max_seq_len=64)
    with pytest.raises(ValueError, match=r"x: expected device cpu .*got meta"):
        layer.prefill(torch.empty(8, cfg.dim, dtype=torch.bfloat16, device="meta"), cache, 0)
    with pytest.raises(ValueError, match=r"x: expected device cpu .*got meta"):
        layer.decode(torch.empty(1, cfg.dim, dtype=torch.bfloat16, device="meta"), cache)
    other = DSACache(DSAConfig(**{**cfg.__dict__, "index_head_dim": 64}), batch=1, max_seq_len=64)
    x = randn(8, cfg.dim).bfloat16()
    with pytest.raises(ValueError, match="^cache: expected .*index_head_dim 128, got one built for index_head_dim 64$"):
        layer.prefill(x, other, 0)
    with pytest.raises(ValueError, match="^cache: expected .*index_head_dim 128, got one built for index_head_dim 64$"):
        layer.decode(x[:1], other)
    with pytest.raises(TypeError, match="cache: expected a DSACache"):
        layer.decode(x[:1], None)
    assert not cache.kv.any() and not other.kv.any() and not other.index.any()
    assert int(cache.seq_lens.sum()) == 0 and int(other.seq_lens.sum()) == 0
