"""Runtime settings: SM count = host worker threads, heuristics knobs, Ascend additions, env fallbacks."""
import os

import pytest

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.testing.generators import generate_normal


@pytest.mark.backends("reference", "host", why="the SM count is the host worker threads there; the Ascend SM count "
                       "(AI cores) is in ascend/test_ascend_defaults.py")
def test_num_sms_maps_to_worker_threads(backend):
    default = deep_gemm.get_num_sms()
    try:
        deep_gemm.set_num_sms(1)
        assert deep_gemm.get_num_sms() == 1 and deep_gemm.LIB.num_threads == 1
        case = generate_normal(64, 128, 256, "fp8")
        deep_gemm.fp8_gemm_nt(case.a, case.b, case.d)
        assert calc_diff(case.d, case.ref_d) < 1e-3
    finally:
        deep_gemm.set_num_sms(0)
    assert deep_gemm.get_num_sms() == default
    with pytest.raises(ValueError):
        deep_gemm.set_num_sms((os.cpu_count() or 1) + 1)
    with pytest.raises(TypeError):
        deep_gemm.set_num_sms(1.5)


def test_heuristic_knobs_round_trip():
    assert deep_gemm.get_tc_util() == 100          # 0 (unset) reads as 100
    deep_gemm.set_tc_util(60)
    assert deep_gemm.get_tc_util() == 60
    deep_gemm.set_tc_util(0)
    with pytest.raises(ValueError):
        deep_gemm.set_tc_util(101)
    deep_gemm.set_pdl(True)
    assert deep_gemm.get_pdl() is True
    deep_gemm.set_pdl(False)
    deep_gemm.set_ignore_compile_dims(True)
    assert deep_gemm.get_ignore_compile_dims()
    deep_gemm.set_ignore_compile_dims(False)
    deep_gemm.set_block_size_multiple_of((32, 64))
    assert deep_gemm.get_block_size_multiple_of() == (32, 64)
    deep_gemm.set_block_size_multiple_of(1)
    with pytest.raises(ValueError):
        deep_gemm.set_block_size_multiple_of(0)


def test_ascend_additions():
    deep_gemm.use_deterministic_algorithms(True)
    assert deep_gemm.get_deterministic_algorithms()
    deep_gemm.use_deterministic_algorithms(False)
    deep_gemm.set_npu_arch(3510)
    assert deep_gemm.get_npu_arch() == 3510
    deep_gemm.set_npu_arch(0)
    with pytest.raises(TypeError):
        deep_gemm.use_deterministic_algorithms(1)


def test_backend_env_forces_reference(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "reference")
    from deep_gemm import _dispatch
    assert _dispatch.TABLE.backend("fp8_fp4_gemm_nt", "cpu") == "reference"
    monkeypatch.setenv("DG_BACKEND", "nonsense")
    case = generate_normal(8, 64, 128, "fp8")
    with pytest.raises(ValueError, match="DG_BACKEND"):
        deep_gemm.fp8_gemm_nt(case.a, case.b, case.d)


def test_public_names():
    for name in ("set_num_sms", "get_num_sms", "set_tc_util", "get_tc_util", "set_ignore_compile_dims",
                 "set_block_size_multiple_of", "set_pdl", "get_pdl", "transform_sf_into_required_layout",
                 "get_tma_aligned_size", "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
                 "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor", "get_m_alignment_for_contiguous_layout",
                 "per_token_cast_to_fp8", "ceil_div", "align", "SymmBuffer", "fp8_fp4_mega_moe", "bf16_mega_moe",
                 "fp8_mqa_logits", "fp8_paged_mqa_logits", "cublaslt_gemm_nt"):
        assert callable(getattr(deep_gemm, name)), name
    for name in ("calc_diff", "bench", "bench_kineto", "count_bytes", "assert_bitwise_equal", "test_filter",
                 "ignore_env", "suppress_stdout_stderr", "get_arch_major"):
        assert callable(getattr(deep_gemm.testing, name)), name
    assert deep_gemm.testing.count_bytes((case := generate_normal(8, 64, 128, "fp8")).a, case.d, None) == \
        8 * 128 + 8 * 4 + 8 * 64 * 2
