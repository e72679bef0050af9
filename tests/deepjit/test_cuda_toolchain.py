"""The CUDA toolchain: nvcc discovery, flags and keys, a real cubin where nvcc exists, and the
ptxas checks with a fake nvcc. No NVIDIA GPU here: load and launch tests are skipped."""
import json
import os
import shutil
import textwrap

import pytest

from deepjit.backends.cuda import CudaCompilerOptions, CudaLaunchOptions, driver, parse_nvcc_version
from deepjit.backends.cuda.options import dim3
from deepjit.errors import CompileError, DeepJITError, ToolchainNotFoundError

from .helpers import list_entries, list_tmp, make_runtime, reference_hex, write_script

KERNEL = 'extern "C" __global__ void add_one(int* x) { x[threadIdx.x] += 1; }\n'
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed on this machine")
needs_gpu = pytest.mark.skipif(not driver.available(), reason="no NVIDIA GPU / driver (libcuda.so.1) on this machine")


def fake_nvcc(tmp_path, compile_body: str) -> str:
    return write_script(tmp_path / "cuda" / "bin" / "nvcc", f"""
        import sys
        argv = sys.argv[1:]
        if argv == ["--version"]:
            print("Cuda compilation tools, release 12.9, V12.9.1")
            sys.exit(0)
        out = argv[argv.index("--output-file") + 1]
        {textwrap.indent(textwrap.dedent(compile_body), " " * 8).lstrip()}
    """)


@pytest.fixture
def fake_cuda(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("TST_JIT_NVCC_COMPILER", raising=False)
    for name in ("DJ_JIT_DEBUG", "DJ_JIT_DUMP_ASM", "DJ_JIT_CHECK_NO_SPILLS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cuda"


def test_flags_in_upstream_order():
    opts = CudaCompilerOptions(optimize_level="3", use_fast_math=True, ptxas_verbose=True, ptxas_register_usage_level=10,
                               check_no_spills=True, check_no_local_memory=True, with_line_info=True, arch="90a",
                               nvcc_flags=("-std=c++20",), extra_nvcc_flags=("-DX",))
    assert opts.get_flags() == [
        "--gpu-architecture=sm_90a", "-O3", "--compiler-options=-O3", "--use_fast_math", "--ptxas-options=--verbose",
        "--ptxas-options=--register-usage-level=10", "--ptxas-options=--warn-on-spills",
        "--ptxas-options=--warn-on-local-memory-usage", "--generate-line-info", "-std=c++20", "-DX"]
    with pytest.raises(DeepJITError, match="CUDA architecture must be specified"):
        CudaCompilerOptions(optimize_level="3").get_flags()
    with pytest.raises(DeepJITError, match="optimization level must be specified"):
        CudaCompilerOptions(arch="90a").get_flags()


def test_version_parsing():
    assert parse_nvcc_version("Cuda compilation tools, release 13.0, V13.0.88") == (13, 0)
    with pytest.raises(DeepJITError, match="failed to parse NVCC version"):
        parse_nvcc_version("nvcc something")


def test_discovery_errors(tmp_path, monkeypatch, fake_cuda):
    fake_cuda.mkdir()
    with pytest.raises(ToolchainNotFoundError, match="NVCC compiler is not executable: .*bin/nvcc"):
        make_runtime(tmp_path, monkeypatch, backend="cuda")
    write_script(fake_cuda / "bin" / "nvcc", "print('Cuda compilation tools, release 12.4, V12.4.1')")
    with pytest.raises(ToolchainNotFoundError, match="too old"):
        make_runtime(tmp_path, monkeypatch, backend="cuda")
    monkeypatch.setenv("TST_JIT_NVCC_COMPILER", fake_nvcc(tmp_path / "other", "open(out, 'wb').write(b'x')"))
    assert make_runtime(tmp_path, monkeypatch, backend="cuda").backend.nvcc.startswith(str(tmp_path / "other"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(ToolchainNotFoundError, match="CUDA_HOME=.*nowhere"):
        make_runtime(tmp_path, monkeypatch, backend="cuda")


def test_every_option_but_dumps_changes_the_key(tmp_path, monkeypatch, fake_cuda):
    fake_nvcc(tmp_path, "open(out, 'wb').write(b'cubin')")
    rt = make_runtime(tmp_path, monkeypatch, backend="cuda")
    key = lambda **kw: rt.cache_key(KERNEL, CudaCompilerOptions(**{"arch": "90a", **kw}))
    base = key()
    for change in (dict(arch="100f"), dict(optimize_level="2"), dict(use_fast_math=True), dict(ptxas_verbose=True),
                   dict(ptxas_register_usage_level=5), dict(check_no_spills=True), dict(check_no_local_memory=True),
                   dict(with_line_info=True), dict(extra_nvcc_flags=["-I/some/where"]), dict(nvcc_flags=["-std=c++17"])):
        assert key(**change) != base, change
    assert key(dump_ptx=True) == base and key(dump_sass=True) == base
    assert key(extra_nvcc_flags=["-DA", "-DB"]) != key(extra_nvcc_flags=["-DB", "-DA"])


def test_spill_check_aborts_publication(tmp_path, monkeypatch, fake_cuda):
    fake_nvcc(tmp_path, "open(out, 'wb').write(b'cubin')\nprint('ptxas info: 8 bytes spilled  to local memory')")
    rt = make_runtime(tmp_path, monkeypatch, backend="cuda")
    with pytest.raises(CompileError, match="register spills are not allowed"):
        rt.compile_without_load("add_one", KERNEL, CudaCompilerOptions(arch="90a", check_no_spills=True))
    assert list_entries(tmp_path / "cache") == [] and list_tmp(tmp_path / "cache") == []
    assert rt.compile_without_load("add_one", KERNEL, CudaCompilerOptions(arch="90a"))  # unchecked: published


def test_empty_cubin_and_post_hook(tmp_path, monkeypatch, fake_cuda):
    fake_nvcc(tmp_path, "open(out, 'wb').close()")
    rt = make_runtime(tmp_path, monkeypatch, backend="cuda")
    with pytest.raises(CompileError, match="the cubin .NVCC. was not produced"):
        rt.compile_without_load("add_one", KERNEL, CudaCompilerOptions(arch="90a"))
    fake_nvcc(tmp_path, "open(out, 'wb').write(b'0123456789abcdef')")
    write_script(tmp_path / "hooks" / "hook.py", "import sys\nf = open(sys.argv[1], 'r+b'); f.write(b'HOOK')")
    rt = make_runtime(tmp_path, monkeypatch, backend="cuda")
    hooked = CudaCompilerOptions(arch="90a", post_hook="hooks/hook.py")
    assert rt.cache_key(KERNEL, hooked) != rt.cache_key(KERNEL, CudaCompilerOptions(arch="90a"))
    path = rt.compile_without_load("add_one", KERNEL, hooked)
    with open(os.path.join(path, "kernel.cubin"), "rb") as f:
        assert f.read() == b"HOOK456789abcdef"
    with open(os.path.join(path, "meta.json")) as f:
        assert json.load(f)["compiler_options"]["post_hook"] == "hooks/hook.py"
    with pytest.raises(DeepJITError, match="failed to open for reading"):
        rt.cache_key(KERNEL, CudaCompilerOptions(arch="90a", post_hook="hooks/missing.py"))


def test_post_hook_hash_chains_one_fnv1a(tmp_path, monkeypatch, fake_cuda):
    """The key's post-hook part is one FNV-1a over the hook's name then its bytes, as DeepJIT's."""
    fake_nvcc(tmp_path, "open(out, 'wb').write(b'cubin')")
    body = "import sys\n"
    write_script(tmp_path / "hooks" / "hook.py", body)
    with open(tmp_path / "hooks" / "hook.py", "rb") as f:
        content = f.read()
    rt = make_runtime(tmp_path, monkeypatch, backend="cuda")
    hooked = CudaCompilerOptions(arch="90a", post_hook="hooks/hook.py")
    options = rt.default_compiler_options.override_with(hooked)
    parts = [rt.config.extra_signature.encode(), reference_hex(rt.backend.version.encode()).encode()]
    parts += [c.encode() for c in options.hash_components()]
    parts += [reference_hex(b"hooks/hook.py", content).encode(), rt.parser.parse_into_hash(KERNEL).encode()]
    assert rt.cache_key(KERNEL, hooked) == reference_hex(*parts)


@needs_nvcc
def test_compile_without_load_with_real_nvcc(tmp_path, monkeypatch):
    for name in ("CUDA_HOME", "CUDA_PATH", "TST_JIT_NVCC_COMPILER", "DJ_JIT_DEBUG", "DJ_JIT_DUMP_ASM"):
        monkeypatch.delenv(name, raising=False)
    rt = make_runtime(tmp_path, monkeypatch, backend="cuda")
    path = rt.compile_without_load("add_one", KERNEL, CudaCompilerOptions(arch="90a"))
    assert sorted(os.listdir(path)) == [".committed", "kernel.cu", "kernel.cubin", "meta.json"]
    with open(os.path.join(path, "kernel.cubin"), "rb") as f:
        assert f.read(4) == b"\x7fELF"
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    assert list(meta) == ["command", "config", "compiler_info", "compiler_options", "artifact_sha256"]
    assert list(meta["compiler_info"]) == ["path", "version"] and "release" in meta["compiler_info"]["version"]
    assert list(meta["compiler_options"]) == [
        "optimize_level", "use_fast_math", "ptxas_verbose", "ptxas_register_usage_level", "check_no_spills",
        "check_no_local_memory", "with_line_info", "dump_ptx", "dump_sass", "arch", "nvcc_flags", "extra_nvcc_flags",
        "post_hook"]
    assert "--cubin --output-file" in meta["command"] and "--gpu-architecture=sm_90a" in meta["command"]


def test_launch_dimension_validation():
    assert dim3(4, "grid") == (4, 1, 1) and dim3((2, 3), "block") == (2, 3, 1)
    for bad in (None, 0, (1, 2, 3, 4), (2, -1), True):
        with pytest.raises(DeepJITError, match="CUDA grid dimensions"):
            dim3(bad, "grid")


@needs_gpu
@needs_nvcc
def test_load_and_launch_on_a_gpu(tmp_path, monkeypatch):
    import torch
    rt = make_runtime(tmp_path, monkeypatch, backend="cuda")
    kernel = rt.compile("add_one", KERNEL)
    x = torch.zeros(32, dtype=torch.int32, device="cuda")
    rt.launch(kernel, CudaLaunchOptions(grid=1, block=32), x)
    torch.cuda.synchronize()
    assert x.tolist() == [1] * 32
