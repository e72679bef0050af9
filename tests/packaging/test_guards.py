"""The guards of deepjit.guard: an upstream package of the same import name installed beside ours, and CUDA
tensors reaching an op, each warn once, naming what to do."""
import sys
import warnings

import pytest
import torch

from deepjit import guard


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(guard, "_warned", set())
    monkeypatch.delenv("DJ_QUIET_GUARDS", raising=False)


def test_upstream_dist_beside_ours_warns_once(tmp_path, monkeypatch):
    info = tmp_path / "deep_gemm-2.6.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: deep_gemm\nVersion: 2.6.1\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    with pytest.warns(guard.SuiteGuardWarning, match="upstream's deep_gemm 2.6.1.*pip uninstall"):
        guard.warn_if_upstream_installed("deep_gemm", "deep-gemm-ascend", ("deep_gemm",))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guard.warn_if_upstream_installed("deep_gemm", "deep-gemm-ascend", ("deep_gemm",))   # once


def test_no_upstream_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guard.warn_if_upstream_installed("deep_gemm", "deep-gemm-ascend", ("surely_not_installed_dist",))


def test_cuda_tensors_warn_once_from_the_dispatch():
    import tile_kernels  # noqa: F401  (a library's backend table)
    from tile_kernels._dispatch import TABLE
    cuda = torch.device("cuda")
    with pytest.warns(guard.SuiteGuardWarning, match="tile_kernels was called with CUDA tensors"):
        try:
            TABLE.select("topk_gate", cuda)
        except Exception:
            pass   # only the warning matters: no CUDA device here
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guard.warn_if_cuda("tile_kernels", cuda)
        guard.warn_if_cuda("tile_kernels", torch.device("cpu"))


def test_quiet_switch(monkeypatch):
    monkeypatch.setenv("DJ_QUIET_GUARDS", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        guard.warn_if_cuda("deep_gemm", torch.device("cuda"))
