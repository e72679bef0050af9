"""deepjit.KernelLibrary: the per-library host runtime, defines, backend choice and thread count."""
import re
import warnings

import pytest
import torch

import deepjit
from deepjit.errors import DeepJITError

KERNEL = r"""
#include <deepjit/host/kernel.hpp>
#include <mylib/common.hpp>
DJ_KERNEL(scale, "ptr,i64") void scale(int64_t* out, int64_t x) { out[0] = x * FACTOR + kBias; }
"""


@pytest.fixture
def lib(tmp_path, monkeypatch):
    pkg = tmp_path / "mylib"
    (pkg / "host").mkdir(parents=True)
    (pkg / "host" / "scale.cpp").write_text(KERNEL)
    (pkg / "common.hpp").write_text("#pragma once\nconstexpr int64_t kBias = 1;\n")
    monkeypatch.setenv("ML_JIT_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("ML_BACKEND", "DJ_BACKEND", "ML_NUM_THREADS", "DJ_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    return deepjit.KernelLibrary("mylib", "ML", str(pkg / "__init__.py"), "1.2.3")


def run(kernel, x):
    out = torch.zeros(1, dtype=torch.int64)
    kernel(out, x)
    return out.item()


def test_defines_make_distinct_memoised_kernels(lib):
    k3 = lib.host_kernel("scale", "host/scale.cpp", {"FACTOR": 3})
    assert run(k3, 5) == 16
    assert lib.host_kernel("scale", "host/scale.cpp", {"FACTOR": 3}) is k3
    assert run(lib.host_kernel("scale", "host/scale.cpp", {"FACTOR": True}), 5) == 6
    with pytest.raises(DeepJITError, match="define value must be"):
        lib.host_kernel("scale", "host/scale.cpp", {"FACTOR": "1\n2"})
    with pytest.raises(DeepJITError, match="cannot read host kernel source"):
        lib.host_kernel("scale", "host/missing.cpp")


def test_options_and_edited_defaults_reach_the_memo(lib):
    from deepjit.backends.host import HostCompilerOptions
    define = HostCompilerOptions(extra_cxx_flags=["-DFACTOR=4"])
    k4 = lib.host_kernel("scale", "host/scale.cpp", None, define)
    assert run(k4, 5) == 21
    assert lib.host_kernel("scale", "host/scale.cpp", None, HostCompilerOptions(extra_cxx_flags=["-DFACTOR=4"])) is k4
    lib.host_runtime.default_compiler_options.extra_cxx_flags = ["-DkBiasOverride"]   # edited in place: rebuilt
    assert lib.host_kernel("scale", "host/scale.cpp", None, define) is not k4


def test_package_headers_and_version_are_keyed(lib, tmp_path):
    rt = lib.host_runtime
    assert rt.config.extra_signature == "mylib-1.2.3"
    source = "#define FACTOR 2\n" + lib.source("host/scale.cpp")
    before = rt.cache_key(source)
    (tmp_path / "mylib" / "common.hpp").write_text("#pragma once\nconstexpr int64_t kBias = 2;\n")
    fresh = deepjit.KernelLibrary("mylib", "ML", str(tmp_path / "mylib" / "__init__.py"), "1.2.3")
    assert fresh.host_runtime.cache_key(source) != before


def test_backend_choice(lib, monkeypatch):
    assert lib.backend_for(torch.device("cpu")) == "host"
    assert lib.backend_for("npu") == "reference"
    assert lib.backend_for("npu", has_ascend=True) == "ascend"
    monkeypatch.setenv("ML_BACKEND", "reference")
    assert lib.backend_for("cpu") == "reference"
    monkeypatch.setenv("ML_BACKEND", "host")
    with pytest.raises(ValueError, match=re.escape("ML_BACKEND: expected a backend for device npu (host needs CPU tensors), got 'host'")):
        lib.backend_for("npu")
    monkeypatch.setenv("ML_BACKEND", "gpu")
    with pytest.raises(ValueError, match="ML_BACKEND: expected one of reference, host, ascend, got 'gpu'"):
        lib.backend_for("cpu")


def test_no_compiler_falls_back_to_reference_with_one_warning(lib, monkeypatch):
    monkeypatch.setenv("ML_JIT_CXX", "/nonexistent/c++")
    with pytest.warns(RuntimeWarning, match="no working C\\+\\+ compiler"):
        assert lib.backend_for("cpu") == "reference"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lib.backend_for("cpu") == "reference"


def test_thread_count(lib, monkeypatch):
    monkeypatch.setenv("ML_NUM_THREADS", "3")
    assert lib.num_threads == 3
    lib.set_num_threads(1)
    assert lib.num_threads == 1
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match=re.escape(f"num_sms: expected a positive int (the thread count), got {bad!r}")):
            lib.set_num_threads(bad)
