"""Host toolchain end to end: compile, load and launch a real vectorised kernel."""
import os

import pytest
import torch

import deepjit
from deepjit.errors import CompileError, DeepJITError

ADD_SOURCE = r"""
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>
DJ_KERNEL(axpy, "ptr,ptr,f32,i64,i64")
void axpy(float* DJ_RESTRICT y, const float* DJ_RESTRICT x, float a, int64_t n, int64_t threads) {
    dj::parallel_for((n + 1023) / 1024, threads, [&](int64_t b) {
        const int64_t end = std::min<int64_t>(n, (b + 1) * 1024);
#pragma omp simd
        for (int64_t i = b * 1024; i < end; ++i) y[i] += a * x[i];
    });
}
"""


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("TST_JIT_CACHE_DIR", str(tmp_path / "cache"))
    return deepjit.Runtime(deepjit.Config(str(tmp_path), "TST"), "host")


def test_compile_load_launch(runtime):
    kernel = runtime.compile("axpy", ADD_SOURCE)
    x, y = torch.randn(10_000), torch.randn(10_000)
    expected = y + 2.5 * x
    runtime.launch(kernel, None, y, x, 2.5, x.numel(), 2)
    torch.testing.assert_close(y, expected)
    assert runtime.compile("axpy", ADD_SOURCE) is kernel


def test_launch_checks_arguments(runtime):
    kernel = runtime.compile("axpy", ADD_SOURCE)
    x = torch.randn(4)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        kernel(x, x, 1.0, 4)
    with pytest.raises(TypeError, match="argument 3 must be int"):
        kernel(x, x, 1.0, 4.0, 1)
    with pytest.raises(TypeError, match="argument 0 must be a tensor"):
        kernel("x", x, 1.0, 4, 1)


def test_compiler_failure_reports_command_and_output(runtime):
    with pytest.raises(CompileError, match=r"command failed with exit code 1:(.|\n)*kernel\.cpp(.|\n)*error"):
        runtime.compile("broken", "DJ_KERNEL(broken, \"\") void broken( {")
    tmp = os.path.join(runtime.disk_cache.roots[0], "tmp")
    assert os.listdir(tmp) == []


def test_exactly_one_kernel(runtime):
    two = ADD_SOURCE + ADD_SOURCE.replace("axpy", "axpy2")
    path = runtime.compile_without_load("two", two)
    assert os.path.exists(os.path.join(path, ".committed"))
    with pytest.raises(DeepJITError, match="expected exactly one kernel in .*, found 2"):
        runtime.compile("two", two)
