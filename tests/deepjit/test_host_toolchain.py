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
    with pytest.raises(TypeError, match=r"kernel \w+: expected 5 arguments \("):
        kernel(x, x, 1.0, 4)
    with pytest.raises(TypeError, match=r"argument 3: expected an int \(i\d+\), got float"):
        kernel(x, x, 1.0, 4.0, 1)
    with pytest.raises(TypeError, match="argument 0: expected a tensor, an address or None, got"):
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


CAST_SOURCE = r"""
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>
#include <deepjit/host/convert.hpp>
// float32 -> bfloat16 (round to nearest even), 16 lanes at a time where AVX-512 is available.
DJ_KERNEL(cast_bf16, "ptr,ptr,i64,i64")
void cast_bf16(uint16_t* out, const float* in, int64_t n, int64_t threads) {
    const int64_t blocks = (n + 4095) / 4096;
    dj::parallel_for(blocks, threads, [&](int64_t b) {
        int64_t i = b * 4096;
        const int64_t end = std::min<int64_t>(n, i + 4096);
#ifdef DJ_HAVE_AVX512
        for (; i + 16 <= end; i += 16)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), dj::f32x16_to_bf16(_mm512_loadu_ps(in + i)));
#endif
        for (; i < end; ++i) out[i] = dj::f32_to_bf16(in[i]);
    });
}
"""


def test_vectorised_cast_is_bit_exact(runtime):
    kernel = runtime.compile("cast_bf16", CAST_SOURCE)
    x = torch.randn(10_007) * 1e3
    x[:4] = torch.tensor([0.0, -0.0, float("inf"), 1.00390625])  # a tie: rounds to even
    out = torch.empty(x.numel(), dtype=torch.bfloat16)
    kernel(out, x, x.numel(), 2)
    assert torch.equal(out.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))


E4M3_SOURCE = r"""
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/convert.hpp>
// E4M3 bytes -> FP32, 16 at a time where AVX-512 is available (n a multiple of 16).
DJ_KERNEL(e4m3_f32, "ptr,ptr,i64") void e4m3_f32(float* out, const uint8_t* in, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
#ifdef DJ_HAVE_AVX512
        _mm512_storeu_ps(out + i, dj::e4m3x16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
#else
        for (int j = 0; j < 16; ++j) out[i + j] = dj::e4m3_to_f32(in[i + j]);
#endif
    }
}
"""


def test_vectorised_e4m3_is_exact_on_every_code(runtime):
    # every code, subnormals (exponent field 0) included, alone and mixed with normal codes in a vector
    codes = torch.cat([torch.arange(256), torch.arange(256).flip(0)]).to(torch.uint8)
    out = torch.empty(codes.numel())
    runtime.compile("e4m3_f32", E4M3_SOURCE)(out, codes, codes.numel())
    want = codes.view(torch.float8_e4m3fn).float()
    nan = want.isnan()
    assert torch.equal(out.isnan(), nan)
    assert torch.equal(out[~nan].view(torch.int32), want[~nan].view(torch.int32))   # -0.0 kept


def test_launch_releases_the_gil(runtime):
    import threading
    import time
    spin = runtime.compile("spin", r"""
#include <deepjit/host/kernel.hpp>
#include <chrono>
DJ_KERNEL(spin, "f64") void spin(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {}
}
""")
    ticks, stop = [], threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.005)

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.02)
    before = len(ticks)
    spin(0.3)
    during = len(ticks) - before
    stop.set()
    t.join()
    assert during >= 10  # the Python thread kept running while the kernel spun


def test_cpu_identity_joins_the_key(tmp_path, monkeypatch):
    from deepjit.backends.host import toolchain
    monkeypatch.setenv("TST_JIT_CACHE_DIR", str(tmp_path / "cache"))
    config = deepjit.Config(str(tmp_path), "TST")
    native = deepjit.Runtime(config, "host").cache_key(ADD_SOURCE)
    monkeypatch.setattr(toolchain, "cpu_identity", lambda: ("Some Other CPU", "fpu sse sse2"))
    other = deepjit.Runtime(config, "host").cache_key(ADD_SOURCE)
    assert native != other


def test_compiler_override_and_missing_compiler(tmp_path, monkeypatch):
    import shutil
    monkeypatch.setenv("TST_JIT_CACHE_DIR", str(tmp_path / "cache"))
    config = deepjit.Config(str(tmp_path), "TST")
    monkeypatch.setenv("DJ_JIT_CXX", "clang-does-not-exist++")
    with pytest.raises(deepjit.ToolchainNotFoundError, match="clang-does-not-exist.*DJ_JIT_CXX"):
        deepjit.Runtime(config, "host")
    monkeypatch.setenv("TST_JIT_CXX", shutil.which("g++"))  # the library's own variable wins
    assert deepjit.Runtime(config, "host").backend.cxx == shutil.which("g++")


def test_debug_prints(runtime, monkeypatch, capsys):
    monkeypatch.setenv("TST_JIT_PRINT_COMPILER_COMMAND", "1")
    monkeypatch.setenv("TST_JIT_PRINT_LOAD_TIME", "yes")
    runtime.compile("axpy", ADD_SOURCE)
    out = capsys.readouterr().out
    assert "Running command: " in out and "Load time (" in out and " ms" in out


def test_default_flags(runtime):
    flags = runtime.default_compiler_options.get_flags()
    assert flags[:3] == ["-O3", "-march=native", "-fopenmp"] and "-fPIC" in flags and "-shared" in flags


def test_launch_argument_types(runtime):
    kernel = runtime.compile("axpy", ADD_SOURCE)
    x = torch.randn(4)
    with pytest.raises(TypeError, match=r"argument 2: expected a float \(f\d+\), got"):
        kernel(x, x, "1.0", 4, 1)
    with pytest.raises(TypeError, match=r"argument 3: expected an int \(i64\), got bool"):
        kernel(x, x, 1.0, True, 1)
    with pytest.raises(ValueError, match=r"argument 3: expected a value in \[-9223372036854775808, 9223372036854775807\] \(i64\), got"):
        kernel(x, x, 1.0, 2**63, 1)
    with pytest.raises(DeepJITError, match="kernel must not be null"):
        runtime.launch(None, None, x)


def test_concurrent_launches_of_one_kernel_keep_their_own_errors(runtime):
    """The error buffer is one per loaded kernel: a failing launch must not fail (or cut short) a good
    launch of the same kernel from another thread."""
    import threading
    fill = runtime.compile("fill_or_fail", r"""
#include <deepjit/host/kernel.hpp>
#include <chrono>
DJ_KERNEL(fill_or_fail, "ptr,i64,i64") void fill_or_fail(float* y, int64_t n, int64_t fail) {
    if (fail) { dj::report_error("asked to fail"); }
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    for (int64_t i = 0; i < n; ++i) {
        if (!fail && dj::failed()) return;   // workers stop on a reported error
        y[i] = 1.0f;
    }
    while (std::chrono::steady_clock::now() < end) {}
}
""")
    errors = {"good": 0, "bad": 0}
    short = []

    def launches(kind):
        for _ in range(20):
            y = torch.zeros(1000)
            try:
                fill(y, y.numel(), int(kind == "bad"))
            except DeepJITError:
                errors[kind] += 1
            if kind == "good" and not bool((y == 1).all()):
                short.append(1)

    threads = [threading.Thread(target=launches, args=(kind,)) for kind in ("good", "bad")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == {"good": 0, "bad": 20} and not short
