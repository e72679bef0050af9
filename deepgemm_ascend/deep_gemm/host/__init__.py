"""Host (CPU) kernels of deep_gemm: C++ compiled by deepjit's host toolchain on the process's matrix engine
(``DG_HOST_MATRIX`` / ``DJ_HOST_MATRIX``; dense GEMMs with E4M3 B of 12-512 rows take brgemm where vdpbf16ps is
the automatic one: ``gemm.BRGEMM_ROWS``, ``gemm_engine``).

Every entry point takes tensors the public API has ALREADY validated and normalised; nothing
here re-checks user input beyond what keeps the kernels in bounds. Conventions:

- Operands are LOGICAL views: A is ``[M, K]``, B is ``[N, K]`` (grouped: ``[G, N, K]``), whatever
  their strides (K-major for ``nt``, MN-major for the transposed aliases); the kernels pack them.
- Element types: BF16, FP8 E4M3 (``torch.float8_e4m3fn``), or FP4 E2M1 packed two per byte
  (``uint8``/``int8``/``torch.float4_e2m1fn_x2``, low nibble first). An FP4 operand is packed
  along K (tensor ``[MN, K/2]``, ``stride(-1) == 1``) or along MN (tensor ``[MN/2, K]``,
  ``stride(-2) == 1``); which one is read off the leading size against ``d``.
- Scale factors are FP32 in logical form: ``sfa [ceil(M/gran_a[0]), ceil(K/gran_a[1])]`` and
  ``sfb [ceil(N/gran_b[0]), ceil(K/gran_b[1])]`` (grouped B: ``[G, ...]``), any strides; ``None``
  for BF16 operands. The API layer unpacks UE8M0 into FP32 before calling (``unpack_sf_ue8m0``).
- Math: FP32 accumulation per ``gran_k`` block of K, scaled by ``sfa * sfb`` and summed, then
  ``d = alpha * acc + c`` cast to ``d.dtype`` (BF16 or FP32). Power-of-two scales are folded into
  the exact FP8/FP4 -> BF16 conversion instead (same value, fewer instructions).
- ``d`` is written in place; ``c`` (FP32 or ``d``'s dtype, same shape as ``d``) may be ``d``.
- ``num_threads`` defaults to ``LIB.num_threads`` (which ``set_num_sms`` controls).
"""
from __future__ import annotations

from .einsum import bf16_einsum, fp8_bmm
from .gemm import engine_for as gemm_engine
from .gemm import gemm, k_grouped_gemm, m_grouped_gemm_contiguous, m_grouped_gemm_masked
from .hc_prenorm import hc_prenorm_gemm
from .mqa_logits import mqa_logits, paged_mqa_logits, paged_mqa_metadata
from .permute_rows import permute_rows
from .sf_layout import pack_sf_ue8m0, transpose_sf, unpack_sf_ue8m0

__all__ = ["bf16_einsum", "fp8_bmm", "gemm", "gemm_engine", "hc_prenorm_gemm", "k_grouped_gemm", "m_grouped_gemm_contiguous", "m_grouped_gemm_masked",
           "mqa_logits", "paged_mqa_logits", "paged_mqa_metadata", "pack_sf_ue8m0", "permute_rows", "transpose_sf", "unpack_sf_ue8m0"]
