"""Choosing the implementation for validated, canonical arguments.

Every public op calls ``run(name, device, *args)`` once its checks passed, with the canonical
arguments of ``deep_gemm.reference.<name>``. When the backend for ``device`` is "host" and
``deep_gemm.host`` implements the op, an adapter below translates those arguments into the host
entry point's documented signature (``deep_gemm/host/__init__.py``); otherwise the reference
runs. A host entry point that is still a stub (raises ``NotImplementedError`` before doing
anything) is remembered as missing. NPU tensors use the reference until Ascend kernels exist.
``DG_BACKEND=reference|host|ascend`` forces a path.
"""
from __future__ import annotations

import importlib

from . import _lib, reference

_MISSING = object()
_host_module = _MISSING
_stubs: set = set()


def _host():
    global _host_module
    if _host_module is _MISSING:
        try:
            _host_module = importlib.import_module(f"{__package__}.host")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.host":
                raise
            _host_module = None
    return _host_module


# ---- adapters: canonical arguments -> host entry points -------------------------------------------
def _gemm(host, a, b, d, c, alpha, num_threads):
    host.gemm(a.data, a.sf, b.data, b.sf, d, c, 1.0 if alpha is None else alpha,
              gran_a=(a.gran_mn, a.gran_k), gran_b=(b.gran_mn, b.gran_k), num_threads=num_threads)


def _bf16_gemm(host, a, b, d, c, alpha, num_threads):
    host.gemm(a, None, b, None, d, c, 1.0 if alpha is None else alpha, num_threads=num_threads)


def _m_grouped(host, a, b, d, rows, zero_padding, num_threads):
    host.m_grouped_gemm_contiguous(a.data, a.sf, b.data, b.sf, d, rows.layout, rows.use_psum_layout, rows.alignment,
                                   zero_padding, gran_a=(a.gran_mn, a.gran_k), gran_b=(b.gran_mn, b.gran_k),
                                   num_threads=num_threads)


def _m_grouped_bf16(host, a, b, d, rows, zero_padding, num_threads):
    host.m_grouped_gemm_contiguous(a, None, b, None, d, rows.layout, rows.use_psum_layout, rows.alignment,
                                   zero_padding, num_threads=num_threads)


def _masked(host, a, b, d, masked_m, num_threads):
    host.m_grouped_gemm_masked(a.data, a.sf, b.data, b.sf, d, masked_m, gran_a=(a.gran_mn, a.gran_k),
                               gran_b=(b.gran_mn, b.gran_k), num_threads=num_threads)


def _masked_bf16(host, a, b, d, masked_m, num_threads):
    host.m_grouped_gemm_masked(a, None, b, None, d, masked_m, num_threads=num_threads)


def _k_grouped(host, a, sfa, b, sfb, d, c, groups, gran_k, num_threads):
    host.k_grouped_gemm(a, sfa, b, sfb, d, c, groups.ks, groups.k_starts, groups.sf_starts, gran_k=gran_k,
                        num_threads=num_threads)


def _k_grouped_bf16(host, a, b, d, c, groups, num_threads):
    host.k_grouped_gemm(a, None, b, None, d, c, groups.ks, groups.k_starts, num_threads=num_threads)


def _dense(t):
    return None if t is None else t.contiguous()


class _Unsupported(Exception):
    """The host entry point does not take this input form; the reference serves it."""


def _mqa(host, q, kv, weights, ks, ke, logits, compressed, clean_logits, num_threads):
    if (not q.fp4 and q.sf is not None) or (q.fp4 != kv.fp4) or (not kv.fp4 and not kv.per_token_sf):
        raise _Unsupported
    host.mqa_logits(q.data, _dense(q.sf), kv.data, _dense(kv.sf), weights.float().contiguous(), ks, ke, logits, compressed,
                    clean_logits, num_threads=num_threads)


def _paged_mqa(host, q, kv, weights, context_lens, block_table, logits, clean_logits, num_threads):
    if not q.fp4 and q.sf is not None:
        raise _Unsupported
    host.paged_mqa_logits(q.data, _dense(q.sf), kv.cache, weights.float().contiguous(), context_lens, block_table, logits,
                          clean_logits, num_threads=num_threads)


def _bf16_einsum(host, expr, a, b, d, c, num_threads):
    if expr not in host.einsum.BF16_EXPRS:
        raise _Unsupported
    host.bf16_einsum(expr, a, b, d, num_threads=num_threads)


def _fp8_bmm(host, a, b, d, c, num_threads):
    if a.fp4 or b.fp4 or a.sf is None or b.sf is None:
        raise _Unsupported
    host.fp8_bmm(a.data, a.sf, b.data, b.sf, d, c, (a.gran_mn, a.gran_k), (b.gran_mn, b.gran_k),
                 num_threads=num_threads)


def _hc_prenorm(host, a, b, d, sqr_sum, num_splits, num_threads):
    host.hc_prenorm_gemm(a, b, d, sqr_sum, num_splits, num_threads=num_threads)


_ADAPTERS = {
    "fp8_fp4_gemm_nt": ("gemm", _gemm),
    "bf16_gemm_nt": ("gemm", _bf16_gemm),
    "m_grouped_fp8_fp4_gemm_nt": ("m_grouped_gemm_contiguous", _m_grouped),
    "m_grouped_bf16_gemm_nt": ("m_grouped_gemm_contiguous", _m_grouped_bf16),
    "m_grouped_fp8_fp4_gemm_nt_masked": ("m_grouped_gemm_masked", _masked),
    "m_grouped_bf16_gemm_nt_masked": ("m_grouped_gemm_masked", _masked_bf16),
    "k_grouped_fp8_gemm_tn": ("k_grouped_gemm", _k_grouped),
    "k_grouped_bf16_gemm_tn": ("k_grouped_gemm", _k_grouped_bf16),
    "mqa_logits": ("mqa_logits", _mqa),
    "paged_mqa_logits": ("paged_mqa_logits", _paged_mqa),
    "hc_prenorm_gemm": ("hc_prenorm_gemm", _hc_prenorm),
    "bf16_einsum": ("bf16_einsum", _bf16_einsum),
    "fp8_bmm": ("fp8_bmm", _fp8_bmm),
}


def host_serves(name: str, device) -> bool:
    """Whether ``name`` would run on a host kernel for tensors on ``device``."""
    if name not in _ADAPTERS or (name in _stubs) or _lib.LIB.backend_for(device) != "host":
        return False
    host = _host()
    return host is not None and hasattr(host, _ADAPTERS[name][0])


def run(name: str, device, *args):
    if host_serves(name, device):
        entry, adapter = _ADAPTERS[name]
        try:
            return adapter(_host(), *args, num_threads=_lib.LIB.num_threads)
        except NotImplementedError:
            _stubs.add(name)
        except _Unsupported:
            pass
    return getattr(reference, name)(*args)
