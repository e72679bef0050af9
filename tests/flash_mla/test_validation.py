"""Bad input: a clear ValueError / TypeError naming the argument, raised before any work."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import flash_mla
from flash_mla.kv_cache import KVCacheFormat

from .compare import make_cache

FUZZ = settings(max_examples=30, deadline=None)
CACHE = make_cache(KVCacheFormat.V41_FP8, 4, 16)
B, S_Q, H_Q, TOPK = 2, 1, 64, 32


def _decode_args(**over):
    args = dict(q=torch.zeros(B, S_Q, H_Q, 512, dtype=torch.bfloat16), k_cache=CACHE, block_table=None,
                cache_seqlens=None, head_dim_v=512, tile_scheduler_metadata=flash_mla.get_mla_metadata()[0],
                num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=True,
                indices=torch.zeros(B, S_Q, TOPK, dtype=torch.int32))
    args.update(over)
    return args


def _raises(exc, match, **over):
    with pytest.raises(exc, match=match):
        flash_mla.flash_mla_with_kvcache(**_decode_args(**over))


def test_valid_baseline_runs():
    out, lse = flash_mla.flash_mla_with_kvcache(**_decode_args())
    assert out.shape == (B, S_Q, H_Q, 512)


@FUZZ
@given(st.integers(1, 1024).filter(lambda n: n not in (656, 584, 528, 288)))
def test_bad_bytes_per_token(bpt):
    _raises(ValueError, f"k_cache: expected bytes_per_token .* got {bpt}", k_cache=torch.zeros(2, 4, 1, bpt, dtype=torch.uint8))


@FUZZ
@given(st.sampled_from([656, 584]))
def test_format_dims_must_match_q(bpt):
    d_qk = 512 if bpt == 656 else 576
    _raises(ValueError, rf"k_cache: expected a cache holding q's d_qk {d_qk}, got a \w+ cache \({bpt} B/token\) that holds d_qk", q=torch.zeros(B, S_Q, H_Q, d_qk, dtype=torch.bfloat16),
            k_cache=torch.zeros(2, 4, 1, bpt, dtype=torch.uint8))


def test_fp4_main_cache_and_bad_strides():
    _raises(ValueError, r"k_cache: expected a format other than V4.1 FP4 \(288 B/token is only allowed as extra_k_cache\), got a V4.1 FP4 cache", k_cache=make_cache(KVCacheFormat.V41_FP4, 2, 4))
    padded = torch.zeros(2, 4, 1, 600, dtype=torch.uint8)[..., :528]
    _raises(ValueError, "stride\\(1\\) == bytes_per_token", k_cache=padded)
    overlapping = torch.zeros(8 * 528, dtype=torch.uint8).as_strided((2, 4, 1, 528), (100, 528, 528, 1))
    _raises(ValueError, "expected stride\\(0\\) >= ", k_cache=overlapping)
    _raises(ValueError, "q: expected unit stride in the last dim",
            q=torch.zeros(B, S_Q, H_Q, 1024, dtype=torch.bfloat16)[..., ::2])


@FUZZ
@given(st.integers(1, 256).filter(lambda h: h not in (64, 128)))
def test_unsupported_h_q(h_q):
    _raises(ValueError, "h_q", q=torch.zeros(B, S_Q, h_q, 512, dtype=torch.bfloat16))


@FUZZ
@given(st.integers(1, 1024).filter(lambda d: d not in (512, 576)))
def test_unsupported_d_qk(d):
    _raises(ValueError, "d_qk", q=torch.zeros(B, S_Q, H_Q, d, dtype=torch.bfloat16))


@FUZZ
@given(st.integers(-4, 2048).filter(lambda d: d != 512))
def test_unsupported_head_dim_v(d_v):
    _raises(ValueError, "head_dim_v", head_dim_v=d_v)


@FUZZ
@given(st.sampled_from([1, 2, 4, 5]))
def test_indices_rank(rank):
    shape = [B, S_Q, 1, TOPK, 1][:rank]
    _raises(ValueError, "indices: expected a 3-D tensor", indices=torch.zeros(*shape, dtype=torch.int32))


def test_indices_dtype_shape_range():
    _raises(TypeError, "indices: expected dtype torch.int32", indices=torch.zeros(B, S_Q, TOPK, dtype=torch.int64))
    _raises(ValueError, "indices: expected shape", indices=torch.zeros(B + 1, S_Q, TOPK, dtype=torch.int32))
    _raises(ValueError, "expected slot ids < num_blocks \\* page_block_size = 64",
            indices=torch.full((B, S_Q, TOPK), 64, dtype=torch.int32))


@FUZZ
@given(st.integers(TOPK + 1, 10 ** 6) | st.integers(-10 ** 6, -1))
def test_topk_length_out_of_range(bad):
    lengths = torch.tensor([0, bad], dtype=torch.int32)
    _raises(ValueError, "topk_length: expected values in \\[0, 32\\]", topk_length=lengths)


def test_mode_flags_and_sparse_only_arguments():
    _raises(ValueError, "causal: expected False in sparse mode", causal=True)
    _raises(ValueError, "is_fp8_kvcache: expected True", is_fp8_kvcache=False)
    _raises(TypeError, "tile_scheduler_metadata", tile_scheduler_metadata=torch.zeros(4, 8, dtype=torch.int32))
    _raises(ValueError, r"extra_indices_in_kvcache: expected a tensor with extra_k_cache \(give both or neither\), got None", extra_k_cache=CACHE)
    _raises(ValueError, r"extra_topk_length: expected None without extra_k_cache \(it is only valid with one\), got a tensor",
            extra_topk_length=torch.zeros(B, dtype=torch.int32))
    _raises(ValueError, "attn_sink: expected shape", attn_sink=torch.zeros(H_Q + 1))
    _raises(TypeError, "attn_sink: expected dtype", attn_sink=torch.zeros(H_Q, dtype=torch.bfloat16))
    _raises(ValueError, r"attn_sink: expected None without indices \(only valid in sparse mode\), got a value", indices=None, attn_sink=torch.zeros(H_Q))


def test_metadata_mismatch_leaves_nothing_half_done():
    meta = flash_mla.get_mla_metadata()[0]
    flash_mla.flash_mla_with_kvcache(**_decode_args(tile_scheduler_metadata=meta))
    _raises(ValueError, "tile_scheduler_metadata: expected config.b 2 as on the first call", tile_scheduler_metadata=meta,
            q=torch.zeros(B + 1, S_Q, H_Q, 512, dtype=torch.bfloat16),
            indices=torch.zeros(B + 1, S_Q, TOPK, dtype=torch.int32))
    assert meta.config.b == B


def _prefill(**over):
    args = dict(q=torch.zeros(4, 64, 512, dtype=torch.bfloat16), kv=torch.zeros(10, 1, 512, dtype=torch.bfloat16),
                indices=torch.zeros(4, 1, 16, dtype=torch.int32), sm_scale=0.5)
    args.update(over)
    return flash_mla.flash_mla_sparse_fwd(**args)


@FUZZ
@given(st.sampled_from(["rank", "h_kv", "scale", "d_v", "len", "kv_dtype", "h_q"]))
def test_prefill_bad_input(kind):
    cases = {
        "rank": (ValueError, "indices: expected a 3-D", dict(indices=torch.zeros(4, 16, dtype=torch.int32))),
        "h_kv": (ValueError, "kv: expected shape", dict(kv=torch.zeros(10, 2, 512, dtype=torch.bfloat16))),
        "scale": (TypeError, "sm_scale", dict(sm_scale=None)),
        "d_v": (ValueError, "d_v", dict(d_v=256)),
        "len": (ValueError, "topk_length", dict(topk_length=torch.full((4,), 17, dtype=torch.int32))),
        "kv_dtype": (TypeError, "kv: expected dtype", dict(kv=torch.zeros(10, 1, 512))),
        "h_q": (ValueError, "h_q", dict(q=torch.zeros(4, 32, 512, dtype=torch.bfloat16))),
    }
    exc, match, over = cases[kind]
    with pytest.raises(exc, match=match):
        _prefill(**over)


def test_dense_decode_bad_block_table():
    q = torch.zeros(1, 1, 16, 576, dtype=torch.bfloat16)
    k_cache = torch.zeros(2, 64, 1, 576, dtype=torch.bfloat16)
    meta = flash_mla.get_mla_metadata()[0]
    with pytest.raises(ValueError, match=r"block_table: expected blocks covering cache_seqlens in \[0, 2\), got range \[0, 5\]"):
        flash_mla.flash_mla_with_kvcache(q, k_cache, torch.tensor([[0, 5]], dtype=torch.int32),
                                         torch.tensor([100], dtype=torch.int32), 512, meta, is_fp8_kvcache=False)
    with pytest.raises(ValueError, match="cache_seqlens: expected values in"):
        flash_mla.flash_mla_with_kvcache(q, k_cache, torch.tensor([[0, 1]], dtype=torch.int32),
                                         torch.tensor([129], dtype=torch.int32), 512, meta, is_fp8_kvcache=False)
    with pytest.raises(ValueError, match=r"k_cache: expected a BF16/FP16 cache in dense mode \(indices None has no FP8 path\), got a torch\.\w+ cache without indices"):
        flash_mla.flash_mla_with_kvcache(q, CACHE, None, None, 512, meta)
    with pytest.raises(ValueError, match="dropout_p"):
        flash_mla.flash_attn_varlen_func(q[0], q[0], q[0], torch.tensor([0, 1], dtype=torch.int32),
                                         torch.tensor([0, 1], dtype=torch.int32), 1, 1, dropout_p=0.1)


def _varlen_inputs(total=14, h=4, d=64):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(total, h, d, generator=g).bfloat16() for _ in range(3))
    return q, k, v, torch.tensor([0, 5, total], dtype=torch.int32)


def test_varlen_forward_refuses_out_and_lse_sharing_memory():
    from flash_mla.flash_mla_interface import _flash_attn_varlen_forward
    q, k, v, cu = _varlen_inputs()
    out = torch.empty_like(q)
    lse_in_out = out.view(-1).view(torch.float32)[:q.shape[0] * q.shape[1]].view(q.shape[0], q.shape[1])
    with pytest.raises(ValueError, match="out: expected memory disjoint from lse"):
        _flash_attn_varlen_forward(q, k, v, cu, cu, 9, 9, out=out, lse=lse_in_out)
    with pytest.raises(ValueError, match="out: expected memory disjoint from q"):
        _flash_attn_varlen_forward(q, k, v, cu, cu, 9, 9, out=q)
    with pytest.raises(ValueError, match="lse: expected memory disjoint from k"):
        _flash_attn_varlen_forward(q, k, v, cu, cu, 9, 9, lse=k.view(-1).view(torch.float32)[:56].view(14, 4))
    # disjoint buffers are written and returned
    lse = torch.empty(q.shape[1], q.shape[0]).t()
    got_out, got_lse = _flash_attn_varlen_forward(q, k, v, cu, cu, 9, 9, out=out, lse=lse)
    assert got_out is out and got_lse is lse and torch.isfinite(lse).all()


def test_varlen_backward_refuses_gradient_buffers_sharing_memory():
    from flash_mla.flash_mla_interface import _flash_attn_varlen_backward
    q, k, v, cu = _varlen_inputs()
    do = torch.ones_like(q)
    dq = torch.empty_like(q)
    with pytest.raises(ValueError, match="dq: expected memory disjoint from dk"):
        _flash_attn_varlen_backward(do, q, k, v, None, None, cu, cu, 9, 9, dq=dq, dk=dq)
    with pytest.raises(ValueError, match="dv: expected memory disjoint from do"):
        _flash_attn_varlen_backward(do, q, k, v, None, None, cu, cu, 9, 9, dv=do)
