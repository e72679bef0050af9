"""DeepGEMM and DeepGEMM-Ascend on CPU and Ascend: FP8/FP4/BF16 GEMMs, grouped GEMMs, MQA logits, Mega MoE"""

__version__ = "0.1.0"

from ._lib import LIB  # noqa: E402  (needs __version__)
from .attention import (fp8_fp4_mqa_logits, fp8_fp4_paged_mqa_logits, fp8_mqa_logits,  # noqa: E402
                        fp8_paged_mqa_logits, get_paged_mqa_logits_metadata)
from .einsum import einsum, fp8_einsum, fp8_gemm_nt_skip_head_mid, tf32_hc_prenorm_gemm  # noqa: E402
from .gemm import (bf16_gemm_nn, bf16_gemm_nt, bf16_gemm_tn, bf16_gemm_tt, cublaslt_gemm_nn,  # noqa: E402
                   cublaslt_gemm_nt, cublaslt_gemm_tn, cublaslt_gemm_tt, fp8_fp4_gemm_nn, fp8_fp4_gemm_nt,
                   fp8_fp4_gemm_tn, fp8_fp4_gemm_tt)
from .grouped import (m_grouped_bf16_gemm_nn_contiguous, m_grouped_bf16_gemm_nt_contiguous,  # noqa: E402
                      m_grouped_bf16_gemm_nt_masked, m_grouped_fp8_fp4_gemm_nn_contiguous,
                      m_grouped_fp8_fp4_gemm_nt_contiguous, m_grouped_fp8_fp4_gemm_nt_masked)
from .k_grouped import (k_grouped_bf16_gemm_tn_contiguous, k_grouped_fp8_gemm_nt_contiguous,  # noqa: E402
                        k_grouped_fp8_gemm_tn_contiguous)
from .layout import transform_sf_into_required_layout  # noqa: E402
from .runtime import (get_block_size_multiple_of, get_deterministic_algorithms, get_ignore_compile_dims,  # noqa: E402
                      get_npu_arch, get_num_sms, get_pdl, get_psum_layout_form, get_tc_util, set_block_size_multiple_of,
                      set_ignore_compile_dims, set_npu_arch, set_num_sms, set_pdl, set_psum_layout_form, set_tc_util,
                      use_deterministic_algorithms)
from . import testing, utils  # noqa: E402
from .utils import *  # noqa: E402,F401,F403

fp8_gemm_nt, fp8_gemm_nn, fp8_gemm_tn, fp8_gemm_tt = fp8_fp4_gemm_nt, fp8_fp4_gemm_nn, fp8_fp4_gemm_tn, fp8_fp4_gemm_tt
m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous
m_grouped_fp8_gemm_nn_contiguous = m_grouped_fp8_fp4_gemm_nn_contiguous
m_grouped_fp8_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
# legacy names
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked
