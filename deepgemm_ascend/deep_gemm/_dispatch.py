"""deep_gemm's backend table: for each canonical op (the functions of ``deep_gemm.reference`` that
the public ops and their nn/tn/tt aliases reduce to), the reference, the host adapter and, for
some, the Ascend kernel (``deep_gemm/ascend/``).

Every public op calls ``run(name, device, *args)`` once its checks passed, with the canonical
arguments of ``deep_gemm.reference.<name>``. An adapter below translates them into the host entry
point's documented signature (``deep_gemm/host/__init__.py``); its ``accepts`` predicate names the
input forms the host kernel covers, the reference serving the others. ``DG_BACKEND`` forces a
backend; forcing one an op lacks raises ``deepjit.BackendUnavailableError`` naming the op.
"""
from __future__ import annotations

from deepjit import BackendTable, Impl

from . import _lib, host, reference
from .ascend import bf16_einsum as ascend_einsum
from .ascend import bf16_gemm as ascend_bf16
from .ascend import fp8_einsum as ascend_fp8_einsum
from .ascend import fp8_mx_gemm as ascend_fp8
from .ascend import hc_prenorm_gemm as ascend_hc_prenorm
from .ascend import k_grouped_bf16_gemm as ascend_k_grouped
from .ascend import k_grouped_fp8_mx_gemm as ascend_k_grouped_fp8
from .ascend import m_grouped_bf16_gemm as ascend_m_grouped
from .ascend import m_grouped_fp8_mx_gemm as ascend_m_grouped_fp8
from .ascend import mqa_logits as ascend_mqa
from .ascend import paged_mqa_logits as ascend_paged_mqa
from .ascend import paged_mqa_metadata as ascend_paged_mqa_metadata
from .ascend import permute_rows as ascend_permute_rows
from .ascend import sf_layout_ops as ascend_sf


# ---- adapters: canonical arguments -> host entry points -------------------------------------------
def _gemm(a, b, d, c, alpha, num_threads):
    host.gemm(a.data, a.sf, b.data, b.sf, d, c, 1.0 if alpha is None else alpha,
              gran_a=(a.gran_mn, a.gran_k), gran_b=(b.gran_mn, b.gran_k), num_threads=num_threads)


def _bf16_gemm(a, b, d, c, alpha, num_threads):
    host.gemm(a, None, b, None, d, c, 1.0 if alpha is None else alpha, num_threads=num_threads)


def _m_grouped(a, b, d, rows, zero_padding, num_threads):
    host.m_grouped_gemm_contiguous(a.data, a.sf, b.data, b.sf, d, rows.layout, rows.use_psum_layout, rows.alignment,
                                   zero_padding, gran_a=(a.gran_mn, a.gran_k), gran_b=(b.gran_mn, b.gran_k),
                                   num_threads=num_threads)


def _m_grouped_bf16(a, b, d, rows, zero_padding, num_threads):
    host.m_grouped_gemm_contiguous(a, None, b, None, d, rows.layout, rows.use_psum_layout, rows.alignment,
                                   zero_padding, num_threads=num_threads)


def _masked(a, b, d, masked_m, num_threads):
    host.m_grouped_gemm_masked(a.data, a.sf, b.data, b.sf, d, masked_m, gran_a=(a.gran_mn, a.gran_k),
                               gran_b=(b.gran_mn, b.gran_k), num_threads=num_threads)


def _masked_bf16(a, b, d, masked_m, num_threads):
    host.m_grouped_gemm_masked(a, None, b, None, d, masked_m, num_threads=num_threads)


def _k_grouped(a, sfa, b, sfb, d, c, groups, gran_k, num_threads):
    host.k_grouped_gemm(a, sfa, b, sfb, d, c, groups.ks, groups.k_starts, groups.sf_starts, gran_k=gran_k,
                        num_threads=num_threads)


def _k_grouped_bf16(a, b, d, c, groups, num_threads):
    host.k_grouped_gemm(a, None, b, None, d, c, groups.ks, groups.k_starts, num_threads=num_threads)


def _dense(t):
    return None if t is None else t.contiguous()


def _mqa_accepts(q, kv, *_):
    return not ((not q.fp4 and q.has_sf) or (q.fp4 != kv.fp4) or (not kv.fp4 and not kv.per_token_sf))


def _mqa(q, kv, weights, ks, ke, logits, compressed, clean_logits, num_threads):
    host.mqa_logits(q.data, _dense(q.sf), kv.data, _dense(kv.sf), weights.float().contiguous(), ks, ke, logits, compressed,
                    clean_logits, num_threads=num_threads)


def _paged_mqa_accepts(q, kv, weights, context_lens, block_table, logits, clean_logits):
    # the row-major FP4 MX cache at D = 128 is byte for byte NVIDIA's FP4 cache (4 UE8M0 per token, in order)
    fp4_rows_alike = kv.fp4 and not kv.nz and kv.head_dim == 128
    return not (not q.fp4 and q.has_sf) and (not kv.mx or fp4_rows_alike)


def _paged_mqa(q, kv, weights, context_lens, block_table, logits, clean_logits, num_threads):
    host.paged_mqa_logits(q.data, _dense(q.sf), kv.cache, weights.float().contiguous(), context_lens, block_table, logits,
                          clean_logits, num_threads=num_threads)


def _bf16_einsum(expr, a, b, d, c, num_threads):
    host.bf16_einsum(expr, a, b, d, num_threads=num_threads)


def _fp8_bmm_accepts(a, b, *_):
    return not (a.fp4 or b.fp4 or not a.has_sf or not b.has_sf)


def _fp8_bmm(a, b, d, c, num_threads):
    host.fp8_bmm(a.data, a.sf, b.data, b.sf, d, c, (a.gran_mn, a.gran_k), (b.gran_mn, b.gran_k),
                 num_threads=num_threads)


def _hc_prenorm(a, b, d, sqr_sum, num_splits, num_threads):
    host.hc_prenorm_gemm(a, b, d, sqr_sum, num_splits, num_threads=num_threads)


def _host(adapter, supports: str, accepts=None) -> Impl:
    """A host entry: the adapter with the library's worker-thread count appended."""
    return Impl(lambda *args: adapter(*args, num_threads=_lib.LIB.num_threads), supports, accepts)


def _einsum_accepts(expr, *_):
    return expr in host.einsum.BF16_EXPRS


TABLE = BackendTable(_lib.LIB)
_SCALED = "FP8/FP4 operands with FP32 scales at any granularity, BF16/FP32 d, optional c"
for _name, _adapter, _supports, _accepts in (
    ("fp8_fp4_gemm_nt", _gemm, _SCALED, None),
    ("bf16_gemm_nt", _bf16_gemm, "BF16 operands, BF16/FP32 d, optional c", None),
    ("m_grouped_fp8_fp4_gemm_nt", _m_grouped, _SCALED + "; contiguous or psum row layout", None),
    ("m_grouped_bf16_gemm_nt", _m_grouped_bf16, "BF16; contiguous or psum row layout", None),
    ("m_grouped_fp8_fp4_gemm_nt_masked", _masked, _SCALED + "; masked groups", None),
    ("m_grouped_bf16_gemm_nt_masked", _masked_bf16, "BF16; masked groups", None),
    ("k_grouped_fp8_gemm_tn", _k_grouped, "FP8 with per-128 K scales, in-place FP32 accumulation", None),
    ("k_grouped_bf16_gemm_tn", _k_grouped_bf16, "BF16, in-place FP32 accumulation", None),
    ("mqa_logits", _mqa, "FP8 q without scales over a per-token-scaled FP8 KV, or FP4 q over FP4 KV",
     _mqa_accepts),
    ("paged_mqa_logits", _paged_mqa, "FP8 q without scales or FP4 q (fixed-length or varlen rows)", _paged_mqa_accepts),
    ("hc_prenorm_gemm", _hc_prenorm, "every input the op accepts", None),
    ("bf16_einsum", _bf16_einsum, "the expressions of host.einsum.BF16_EXPRS", _einsum_accepts),
    ("fp8_bmm", _fp8_bmm, "FP8 operands with scales on both sides", _fp8_bmm_accepts),
):
    TABLE.register(_name, reference=getattr(reference, _name), host=_host(_adapter, _supports, _accepts))


# Scale-factor layout transforms (layout.py): FP32 copies into MN-major storage and UE8M0 (un)packing,
# each writing the output it is given; the host kernels take any strides (host/sf_layout.cpp).
for _name, _adapter, _supports in (
    ("sf_copy", host.transpose_sf, "FP32 scales, any strides, row broadcast by gran_mn"),
    ("sf_pack_ue8m0", host.pack_sf_ue8m0, "FP32 scales -> int32 (4 per word) or int16 (2 per word), any strides"),
    ("sf_unpack_ue8m0", host.unpack_sf_ue8m0, "int32 or int16 words -> FP32, any strides"),
):
    TABLE.register(_name, reference=getattr(reference, _name), host=_host(_adapter, _supports))

# The paged MQA logits schedule (attention.get_paged_mqa_logits_metadata), from validated int32 inputs.
TABLE.register("paged_mqa_logits_metadata", reference=reference.paged_mqa_logits_metadata,
               host=Impl(host.paged_mqa_metadata, "contiguous int32 context_lens (and indices)"))

# Row permutations within groups (Mega MoE's weight transforms), any dtype.
TABLE.register("permute_rows", reference=lambda t, perm: t.index_select(1, perm.to(t.device)),
               host=_host(host.permute_rows, "every dtype; rows of [G, N, ...]"))

# The Ascend kernels (deep_gemm/ascend/), with the canonical arguments; other forms take the reference.
_ASCEND = {
    "bf16_gemm_nt": Impl(ascend_bf16.bf16_gemm_nt, "BF16, every major, FP32/BF16 d, optional c and alpha"),
    "fp8_fp4_gemm_nt": Impl(ascend_fp8.fp8_gemm_nt, "FP8xFP8 (any major), FP4xFP4, FP8xFP4, FP4xFP8 (FP4 widened "
                            "in the GEMM); UE8M0 scales per 32 or 128 K; optional c and alpha", lambda a, b, d, c, alpha: ascend_fp8.unsupported(a, b) is None),
    "m_grouped_bf16_gemm_nt": Impl(ascend_m_grouped.m_grouped_bf16_gemm_nt_contiguous,
                                   "BF16, psum or m_indices row layout"),
    "m_grouped_fp8_fp4_gemm_nt": Impl(ascend_m_grouped_fp8.m_grouped_fp8_fp4_gemm_nt_contiguous,
                                      "FP8xFP8, FP4xFP4, FP8xFP4 with UE8M0 scales per 32 or 128 K; psum or m_indices "
                                      "row layout",
                                      lambda a, b, d, rows, zero_padding: ascend_fp8.unsupported(a, b) is None),
    "m_grouped_bf16_gemm_nt_masked": Impl(ascend_m_grouped.m_grouped_bf16_gemm_nt_masked,
                                          "BF16; masked_m read by the kernel"),
    "m_grouped_fp8_fp4_gemm_nt_masked": Impl(ascend_m_grouped_fp8.m_grouped_fp8_fp4_gemm_nt_masked,
                                             "FP8xFP8, FP4xFP4, FP8xFP4; masked_m read by the kernel",
                                             lambda a, b, d, masked_m: ascend_fp8.unsupported(a, b) is None),
    "k_grouped_bf16_gemm_tn": Impl(ascend_k_grouped.k_grouped_bf16_gemm_tn_contiguous, "BF16, in-place FP32 c"),
    "mqa_logits": Impl(ascend_mqa.mqa_logits, "E4M3 q (unscaled or per-32 UE8M0) over E4M3 KV (per-token or "
                       "per-32 UE8M0 scales: DeepGEMM-Ascend's MXFP8 form), FP4 q over FP4 KV, <= 128 heads",
                       lambda q, kv, weights, ks, ke, logits, *_: ascend_mqa.unsupported(q, kv, weights, logits) is None),
    "paged_mqa_logits": Impl(ascend_paged_mqa.paged_mqa_logits, "E4M3 q (unscaled, or per-32 power-of-two scales at "
                             "D >= 64) over the fused FP8 cache, or "
                             "DeepGEMM-Ascend's MXFP8 q over its MXFP8 cache (both page layouts), or FP4 q over the FP4 "
                             "cache, <= 128 heads",
                             lambda *args: ascend_paged_mqa.unsupported(*args[:6]) is None),
    "k_grouped_fp8_gemm_tn": Impl(ascend_k_grouped_fp8.k_grouped_fp8_gemm_tn_contiguous,
                                  "FP8 with UE8M0 per-channel scales per 32 or 128 K, groups starting at any K row, "
                                  "in-place FP32 c"),
    "hc_prenorm_gemm": Impl(ascend_hc_prenorm.hc_prenorm_gemm, "every input the op accepts: HF32 cube products, "
                            "squared sums on the vector cores, split-K partials"),
    "bf16_einsum": Impl(ascend_einsum.bf16_einsum, "every expression of einsum.BF16_EXPRS as a batched cube GEMM at "
                        "the tensors' strides; c is d accumulates in the FixPipe store"),
    "fp8_bmm": Impl(ascend_fp8_einsum.fp8_bmm, "fp8_einsum's expressions: FP8 with power-of-two scales, K granularity "
                    "32 or 128, any M/N granularity; c (d itself or a separate tensor) added in FP32, then rounded "
                    "once into a BF16 d", ascend_fp8_einsum.accepts),
    "permute_rows": Impl(ascend_permute_rows.permute_rows, "every dtype and row size; rows of [G, N, ...], one "
                         "integer entry per row, clamped into range in the kernel", ascend_permute_rows.accepts),
    "paged_mqa_logits_metadata": Impl(ascend_paged_mqa_metadata.paged_mqa_metadata, "contiguous int32 context_lens "
                                      "[B, next_n] or [B], varlen indices; negative lengths count as 0"),
    "sf_copy": Impl(ascend_sf.sf_copy, "FP32 scales, any strides, row broadcast by gran_mn", ascend_sf.copy_accepts),
    "sf_pack_ue8m0": Impl(ascend_sf.sf_pack_ue8m0, "FP32 scales -> int32 or int16 words, any strides, row broadcast "
                          "by gran_mn", ascend_sf.pack_accepts),
    "sf_unpack_ue8m0": Impl(ascend_sf.sf_unpack_ue8m0, "int32 or int16 words -> FP32, any strides",
                            ascend_sf.unpack_accepts),
}
for _name, _impl in _ASCEND.items():
    TABLE.add_ascend(_name, _impl)


def run(name: str, device, *args):
    return TABLE.run(name, device, *args)
