"""Upstream's module path ``flash_mla.flash_mla_interface``: the six ops, the scheduling metadata (with
``num_splits`` filled on first use) and the private varlen forward/backward with their output buffers."""
import torch

import flash_mla
from flash_mla import flash_mla_interface as fmi
from flash_mla.flash_mla_interface import (
    FlashAttnVarlenFunc,
    FlashMLASchedMeta,
    _flash_attn_varlen_backward,
    _flash_attn_varlen_forward,
)


def _varlen(h=4, d=64, lens=(5, 9)):
    g = torch.Generator().manual_seed(0)
    total = sum(lens)
    q, k, v = (torch.randn(total, h, d, generator=g).bfloat16() for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    return q, k, v, cu, max(lens)


def test_the_six_ops_and_the_metadata_are_the_package_ones():
    for name in ("get_mla_metadata", "flash_mla_with_kvcache", "flash_attn_varlen_func",
                 "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_mla_sparse_fwd"):
        assert getattr(fmi, name) is getattr(flash_mla, name)
    meta, none = fmi.get_mla_metadata()
    assert isinstance(meta, FlashMLASchedMeta) and none is None and meta.num_splits is None


def test_sched_meta_num_splits_filled_on_first_decode():
    b, page = 3, 64
    q = torch.randn(b, 1, 16, 576).bfloat16()
    k_cache = torch.randn(b * 2, page, 1, 576).bfloat16()
    table = torch.arange(b * 2, dtype=torch.int32).view(b, 2)
    meta, _ = fmi.get_mla_metadata()
    fmi.flash_mla_with_kvcache(q, k_cache, table, torch.tensor([70, 3, 128], dtype=torch.int32), 512, meta,
                               is_fp8_kvcache=False)
    assert meta.have_initialized and meta.config.b == b
    assert meta.num_splits.dtype == torch.int32 and meta.num_splits.tolist() == [0, 1, 2, 3]


def test_private_forward_writes_out_and_lse_buffers():
    q, k, v, cu, max_len = _varlen()
    want_out, want_lse = flash_mla.flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=True)
    out, lse = torch.empty_like(q), torch.empty(q.shape[1], q.shape[0]).t()
    got_out, got_lse = _flash_attn_varlen_forward(q, k, v, cu, cu, max_len, max_len, out=out, lse=lse, causal=True)
    assert got_out is out and got_lse is lse
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


def test_private_backward_and_the_autograd_function():
    q, k, v, cu, max_len = _varlen()
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse = FlashAttnVarlenFunc.apply(qq, kk, vv, cu, cu, max_len, max_len, True, None, True)
    do = torch.randn(out.shape).bfloat16()
    out.backward(do)
    dq = torch.empty_like(q)
    got = _flash_attn_varlen_backward(do, q, k, v, out.detach(), lse, cu, cu, max_len, max_len, dq=dq, causal=True)
    assert got[0] is dq
    for g, t in zip(got, (qq, kk, vv), strict=True):
        assert torch.equal(g, t.grad)
    # against plain autograd through a causal softmax, per sequence
    ref = []
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        qs, ks, vs = (t[s:e].float().transpose(0, 1).detach().requires_grad_() for t in (q, k, v))
        p = (qs @ ks.transpose(1, 2) / 8.0).masked_fill(torch.ones(e - s, e - s).triu(1).bool(), float("-inf"))
        (p.softmax(-1) @ vs).transpose(0, 1).backward(do[s:e].float())
        ref.append(qs.grad.transpose(0, 1))
    assert (torch.cat(ref) - qq.grad.float()).abs().max() < 3e-2
