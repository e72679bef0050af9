"""DeepGEMM and DeepGEMM-Ascend on CPU and Ascend: FP8/FP4/BF16 GEMMs, grouped GEMMs, MQA logits, Mega MoE

``import deep_gemm`` mirrors upstream DeepGEMM 2.6.1 plus the DeepGEMM-Ascend additions. Every op
validates its arguments once, then runs the host (C++) kernels for CPU tensors, the AscendC kernels
for the forms their table entries serve on NPU tensors, the plain-PyTorch reference otherwise
(``DG_BACKEND=reference|host|ascend`` forces a path).
"""

from deepjit.guard import warn_if_upstream_installed  # noqa: E402

warn_if_upstream_installed("deep_gemm", "deep-gemm-ascend", ("deep_gemm",))

try:  # build-time settings (upstream's ``deep_gemm/envs.py``) apply unless the environment overrides them
    import os as _os

    from .envs import persistent_envs as _persistent_envs
    for _key, _value in _persistent_envs.items():
        _os.environ.setdefault(_key, _value)
except ImportError:
    pass

# isort: off
from ._lib import LIB, __version__  # noqa: E402,F401  (after the build-time settings: LIB reads them)
from . import testing, utils  # noqa: E402
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
from .layout import transform_k_grouped_sf_into_required_layout, transform_sf_into_required_layout  # noqa: E402
from .mega import (SymmBuffer, bf16_mega_moe, fp8_fp4_mega_moe, get_symm_buffer_for_mega_moe,  # noqa: E402
                   transform_weights_for_mega_moe)
from .runtime import (get_block_size_multiple_of, get_deterministic_algorithms, get_ignore_compile_dims,  # noqa: E402
                      get_npu_arch, get_num_sms, get_pdl, get_psum_layout_form, get_tc_util, set_block_size_multiple_of,
                      set_ignore_compile_dims, set_npu_arch, set_num_sms, set_pdl, set_psum_layout_form, set_tc_util,
                      use_deterministic_algorithms)
from .utils import *  # noqa: E402,F403
from .utils import __all__ as _utils_all  # noqa: E402
from . import torch_ops  # noqa: E402,F401  (registers torch.ops.deep_gemm.*)
# isort: on

fp8_gemm_nt, fp8_gemm_nn, fp8_gemm_tn, fp8_gemm_tt = fp8_fp4_gemm_nt, fp8_fp4_gemm_nn, fp8_fp4_gemm_tn, fp8_fp4_gemm_tt
m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous
m_grouped_fp8_gemm_nn_contiguous = m_grouped_fp8_fp4_gemm_nn_contiguous
m_grouped_fp8_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
# legacy names
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked
bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked

__all__ = [
    "LIB", "testing", "utils",
    "set_num_sms", "get_num_sms", "set_tc_util", "get_tc_util", "set_ignore_compile_dims", "get_ignore_compile_dims",
    "set_block_size_multiple_of", "get_block_size_multiple_of", "set_pdl", "get_pdl", "set_psum_layout_form",
    "get_psum_layout_form", "use_deterministic_algorithms", "get_deterministic_algorithms", "set_npu_arch",
    "get_npu_arch",
    "cublaslt_gemm_nt", "cublaslt_gemm_nn", "cublaslt_gemm_tn", "cublaslt_gemm_tt",
    "fp8_fp4_gemm_nt", "fp8_fp4_gemm_nn", "fp8_fp4_gemm_tn", "fp8_fp4_gemm_tt",
    "fp8_gemm_nt", "fp8_gemm_nn", "fp8_gemm_tn", "fp8_gemm_tt", "fp8_gemm_nt_skip_head_mid",
    "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nn_contiguous", "m_grouped_fp8_fp4_gemm_nt_masked",
    "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nn_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "k_grouped_fp8_gemm_tn_contiguous", "k_grouped_fp8_gemm_nt_contiguous",
    "bf16_gemm_nt", "bf16_gemm_nn", "bf16_gemm_tn", "bf16_gemm_tt",
    "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nn_contiguous", "m_grouped_bf16_gemm_nt_masked",
    "k_grouped_bf16_gemm_tn_contiguous", "fp8_m_grouped_gemm_nt_masked", "bf16_m_grouped_gemm_nt_masked",
    "einsum", "fp8_einsum", "tf32_hc_prenorm_gemm",
    "fp8_fp4_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_fp4_paged_mqa_logits", "fp8_mqa_logits",
    "fp8_paged_mqa_logits", "transform_sf_into_required_layout", "transform_k_grouped_sf_into_required_layout",
    "SymmBuffer", "get_symm_buffer_for_mega_moe", "transform_weights_for_mega_moe", "fp8_fp4_mega_moe", "bf16_mega_moe",
] + list(_utils_all)
