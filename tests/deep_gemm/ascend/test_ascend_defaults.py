"""The two sets of defaults: DeepGEMM-Ascend's on the Ascend path (DG_BACKEND=ascend here, the twin;
NPU tensors on hardware) -- mk alignment 256, use_psum_layout=True, get_num_sms() = the device's AI
cores -- and NVIDIA's for CPU tensors on the host kernels (128, m_indices, worker threads)."""
import pytest
import torch

import deep_gemm
from deep_gemm import _lib
from deep_gemm.testing import calc_diff
from deepjit.backends.ascend_twin import TwinDevice


@pytest.fixture
def ascend(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    yield
    deep_gemm.set_num_sms(0)


def test_ascend_alignment_and_sm_count(ascend):
    assert deep_gemm.get_mk_alignment_for_contiguous_layout() == 256
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout() == 256
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout(8) == 256
    cores = TwinDevice().get_num_aicore_cores()
    assert deep_gemm.get_num_sms() == cores
    deep_gemm.set_num_sms(4)
    assert deep_gemm.get_num_sms() == 4
    deep_gemm.set_num_sms(0)
    assert deep_gemm.get_num_sms() == cores
    with pytest.raises(ValueError, match="new_num_sms"):
        deep_gemm.set_num_sms(cores + 1)


def test_nvidia_defaults_for_host_kernels(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "host")
    assert deep_gemm.get_mk_alignment_for_contiguous_layout() == 128
    assert deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout() == 224
    assert deep_gemm.get_num_sms() == _lib.LIB.num_threads


def test_set_alignment_wins_over_both_defaults(ascend):
    deep_gemm.set_mk_alignment_for_contiguous_layout(64)
    assert deep_gemm.get_mk_alignment_for_contiguous_layout() == 64


def _grouped_inputs():
    # two groups of 100 and 56 rows; the second starts at the 256 alignment (rows 100..255 are padding)
    a = torch.randn(312, 64).bfloat16()
    b = torch.randn(2, 48, 64).bfloat16()
    return a, b, torch.tensor([100, 312], dtype=torch.int32)


def test_psum_layout_is_the_ascend_default(ascend):
    a, b, ends = _grouped_inputs()
    d = torch.empty(312, 48, dtype=torch.bfloat16)
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ends)  # use_psum_layout left to its default
    want = torch.zeros_like(d)
    want[:100] = (a[:100].float() @ b[0].float().t()).bfloat16()
    want[256:] = (a[256:].float() @ b[1].float().t()).bfloat16()
    assert calc_diff(d, want) < 1e-5
    assert torch.all(d[100:256] == 0)


def test_m_indices_is_the_host_default(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "host")
    a, b, ends = _grouped_inputs()
    d = torch.empty(312, 48, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="grouped_layout"):  # read as m_indices [M]: wrong shape
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ends)
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, ends, use_psum_layout=True)  # explicit still works


def test_set_num_sms_limits_the_ascend_grid(ascend, monkeypatch):
    from deepjit.tilelang_route.ascend_check import recorded_launches
    deep_gemm.set_num_sms(2)
    sf = torch.exp2(torch.randint(-5, 5, (4096, 8)).float())
    with recorded_launches() as launches:
        deep_gemm.transform_sf_into_required_layout(sf, 4096, 256, (1, 32))
    ((blocks, _),) = launches
    assert blocks == 2 * 2  # two vector cores per AI core
