"""Plain-PyTorch implementations: device-agnostic, written for clarity, the oracle of every test.

They take the canonical arguments the public ops produce after validation (see ``_operands``)."""
from .gemm import (
                   bf16_einsum,
                   bf16_gemm_nt,
                   decode_values,
                   dequantize,
                   expand_k_grouped_sf,
                   expand_sf,
                   fp8_bmm,
                   fp8_fp4_gemm_nt,
                   hc_prenorm_gemm,
                   k_grouped_bf16_gemm_tn,
                   k_grouped_fp8_gemm_tn,
                   m_grouped_bf16_gemm_nt,
                   m_grouped_bf16_gemm_nt_masked,
                   m_grouped_fp8_fp4_gemm_nt,
                   m_grouped_fp8_fp4_gemm_nt_masked,
                   write_output,
)
from .mqa import mqa_logits, paged_mqa_logits, paged_mqa_logits_metadata
from .sf_layout import sf_copy, sf_pack_ue8m0, sf_unpack_ue8m0

__all__ = ["mqa_logits", "paged_mqa_logits", "paged_mqa_logits_metadata", "bf16_einsum", "bf16_gemm_nt", "fp8_bmm", "hc_prenorm_gemm", "decode_values", "dequantize", "expand_k_grouped_sf", "expand_sf", "fp8_fp4_gemm_nt",
           "k_grouped_bf16_gemm_tn", "k_grouped_fp8_gemm_tn", "m_grouped_bf16_gemm_nt",
           "m_grouped_bf16_gemm_nt_masked", "m_grouped_fp8_fp4_gemm_nt", "m_grouped_fp8_fp4_gemm_nt_masked",
           "sf_copy", "sf_pack_ue8m0", "sf_unpack_ue8m0", "write_output"]
