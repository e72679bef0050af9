"""The Ascend toolchain up to what needs an NPU: discovery, command lines, meta.json, cache keys,
kernel-name discovery from the built binary, launch options and argument packing. A fake toolkit
(see helpers.make_fake_ascend_toolkit) stands in for CANN."""
import ctypes
import json
import os

import pytest
import torch

from deepjit.backends.args import pack_ascend_args
from deepjit.backends.ascend import AscendCompilerOptions, AscendLaunchOptions, acl, find_home, kernel_names
from deepjit.backends.ascend.kernel import binary_path
from deepjit.backends.ascend.toolchain import DEEPJIT_INCLUDE
from deepjit.errors import CompileError, DeepJITError, ToolchainNotFoundError

from .helpers import list_tmp, make_fake_ascend_toolkit, make_runtime, read_calls, reference_hex

VECTOR = 'extern "C" __global__ __vector__ void scalar_increment(__gm__ int* out, int x) { *out = x + 1; }\n'
MIX = 'extern "C" __global__ __mix__(1, 2) void mixed(__gm__ float* c) {}\n'
TWO = VECTOR + VECTOR.replace("scalar_increment", "second_kernel")
NONE = "__aicore__ inline void helper() {}\n"
AICPU = 'extern "C" __aicpu__ __global__ unsigned int cpu_kernel(int64_t* out, int32_t a) { return 0; }\n'
ARCH = AscendCompilerOptions(arch=3510)
DEFAULT_BISHENG = ["--cce-aicore-only", "-mllvm", "-enable-hiipu-vf-loop-unroll", "-mllvm",
                   "-cce-aicore-dcpreload-args=false"]
DEFAULT_LINKER = ["-m", "aicorelinux", "-Ttext", "0", "--no-mmap-output-file"]


@pytest.fixture
def toolkit(tmp_path, monkeypatch):
    home = make_fake_ascend_toolkit(tmp_path / "cann")
    monkeypatch.setenv("ASCEND_HOME_PATH", home)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    for name in ("TST_JIT_LAUNCH_TIMEOUT", "DJ_JIT_LAUNCH_TIMEOUT", "DJ_JIT_DUMP_ASM", "DJ_JIT_KERNEL_DEBUG_INFO",
                 "ACLSHMEM_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def runtime(tmp_path, monkeypatch, toolkit):
    inc = tmp_path / "inc"
    inc.mkdir()
    return make_runtime(tmp_path, monkeypatch, backend="ascend", include_dirs=[str(inc)])


# ---- discovery ----------------------------------------------------------------------------------
def test_home_discovery_order_and_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_HOME_PATH", "")
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path))
    assert find_home() == str(tmp_path)
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "missing"))
    with pytest.raises(ToolchainNotFoundError, match="Ascend toolkit home was not found .*ASCEND_HOME_PATH="):
        find_home()


def test_missing_tools_are_named(tmp_path, monkeypatch, toolkit):
    os.unlink(os.path.join(toolkit, "bin", "ld.lld"))
    with pytest.raises(ToolchainNotFoundError, match=r"no executable .*bin/ld\.lld"):
        make_runtime(tmp_path, monkeypatch, backend="ascend")
    os.rmdir(os.path.join(toolkit, "aarch64-linux", "asc", "include", "adv_api"))
    with pytest.raises(ToolchainNotFoundError, match="no executable|adv_api"):
        make_runtime(tmp_path, monkeypatch, backend="ascend")


@pytest.mark.skipif(acl.available(), reason="this machine has the ACL runtime; the default arch comes from its NPU")
def test_without_an_npu_the_arch_must_be_given(runtime):
    assert runtime.default_compiler_options.arch is None
    with pytest.raises(DeepJITError, match="Ascend architecture must be specified"):
        runtime.compile_without_load("scalar_increment", VECTOR)


# ---- command lines and artifacts ---------------------------------------------------------------------
def test_command_lines_entry_files_and_meta(runtime, toolkit, tmp_path):
    path = runtime.compile_without_load("scalar_increment", VECTOR, ARCH)
    calls = read_calls(toolkit)
    assert [c["tool"] for c in calls] == ["bisheng", "ld.lld"]
    build = calls[0]["cwd"]
    assert os.path.dirname(build) == os.path.join(runtime.disk_cache.roots[0], "tmp")
    adv_api = os.path.join(toolkit, "aarch64-linux", "asc", "include", "adv_api")
    assert calls[0]["argv"] == ["-O2", "--npu-arch=dav-3510", *DEFAULT_BISHENG, f"-I{tmp_path / 'inc'}",
                                f"-I{adv_api}", f"-I{DEEPJIT_INCLUDE}", f"{build}/kernel.asc", "-o", f"{build}/kernel.rel.o"]
    assert calls[1]["argv"] == [*DEFAULT_LINKER, f"{build}/kernel.rel.o", "-o", f"{build}/kernel.o"]
    assert calls[1]["cwd"] == build
    assert sorted(os.listdir(path)) == [".committed", "kernel.asc", "kernel.o", "meta.json"]
    with open(os.path.join(path, "kernel.asc")) as f:
        assert f.read() == VECTOR
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    assert list(meta) == ["command", "config", "compiler_info", "compiler_options", "artifact_sha256"]
    bisheng, lld = os.path.join(toolkit, "bin", "bisheng"), os.path.join(toolkit, "bin", "ld.lld")
    assert meta["command"] == (" ".join([bisheng, *calls[0]["argv"]]) + " && " + " ".join([lld, *calls[1]["argv"]]))
    assert meta["compiler_info"] == {"path": bisheng, "version": "fake bisheng 9.9 (deepjit tests)\n",
                                     "linker_path": lld, "linker_version": "fake LLD 9.9 (compatible with GNU linkers)\n"}
    assert list(meta["compiler_options"]) == [
        "optimize_level", "arch", "debug_info", "dump_asm", "bisheng_flags", "linker_flags", "extra_bisheng_flags",
        "extra_linker_flags", "aicpu", "aicpu_flags", "aicpu_linker_flags", "extra_aicpu_flags",
        "extra_aicpu_linker_flags"]
    assert meta["compiler_options"]["arch"] == 3510
    assert "-cce-aicore-dcpreload-args=false" in meta["compiler_options"]["bisheng_flags"]
    assert kernel_names(binary_path(path)) == ["scalar_increment"]


def test_debug_and_extra_flags_order(runtime, toolkit):
    options = AscendCompilerOptions(arch=2201, optimize_level="3", debug_info=True, extra_bisheng_flags=["-DX=1"],
                                    extra_linker_flags=["--gc-sections"])
    runtime.compile_without_load("scalar_increment", VECTOR, options)
    bisheng, lld = read_calls(toolkit)
    assert bisheng["argv"][:7] == ["-O3", "--npu-arch=dav-2201", "-g", "-gdwarf-5", "-gembed-source",
                                   "-gline-tables-only", "--cce-aicore-only"]
    assert bisheng["argv"][len(DEFAULT_BISHENG) + 6] == "-DX=1"
    assert lld["argv"][: len(DEFAULT_LINKER) + 1] == [*DEFAULT_LINKER, "--gc-sections"]


def test_mixed_kernel_is_one_kernel_and_counts_are_checked_on_load(runtime):
    assert kernel_names(binary_path(runtime.compile_without_load("mixed", MIX, ARCH))) == ["mixed"]
    for tag, source, count in (("two", TWO, 2), ("none", NONE, 0)):
        runtime.compile_without_load(tag, source, ARCH)  # no kernel-count check here
        with pytest.raises(DeepJITError, match=f"expected exactly one kernel in .*kernel.o, found {count}"):
            runtime.compile(tag, source, ARCH)


@pytest.mark.skipif(acl.available(), reason="the ACL runtime is present")
def test_loading_without_acl_names_the_library(runtime):
    with pytest.raises(ToolchainNotFoundError, match="libascendcl.so"):
        runtime.compile("scalar_increment", VECTOR, ARCH)


def test_dump_asm_runs_on_a_miss_only_and_is_not_keyed(runtime, toolkit):
    plain = runtime.compile_without_load("scalar_increment", VECTOR, ARCH)
    assert runtime.compile_without_load("scalar_increment", VECTOR, AscendCompilerOptions(arch=3510, dump_asm=True)) \
        == plain
    assert not os.path.exists(os.path.join(plain, "asm"))
    dumped = runtime.compile_without_load("mixed", MIX, AscendCompilerOptions(arch=3510, dump_asm=True))
    dump_call = read_calls(toolkit)[-1]
    assert dump_call["cwd"].endswith("/asm") and "-save-temps" in dump_call["argv"]
    assert "kernel.asci" in os.listdir(os.path.join(dumped, "asm"))


def test_aicpu_mode(runtime, toolkit):
    path = runtime.compile_without_load("cpu_kernel", AICPU, AscendCompilerOptions(aicpu=True))
    bisheng, lld = read_calls(toolkit)
    assert bisheng["argv"][:8] == ["-O2", "--cce-aicore-lang", "--cce-lite-aicpu", "--cce-aicpu-only",
                                   "--cce-aicpu-launch-with-interface", "--cce-aicore-arch=dav-c310-vec", "-fPIC", "-c"]
    assert "--npu-arch" not in " ".join(bisheng["argv"])
    assert lld["argv"][:6] == ["-m", "aicpulinux", "-shared", "-soname=libkernel.aicpu.so", "-Bsymbolic",
                               "--no-mmap-output-file"]
    assert lld["argv"][-1].endswith("/kernel.aicpu.so")
    assert kernel_names(binary_path(path)) == ["cpu_kernel"]


def test_compiler_failure_cleans_up(runtime):
    with pytest.raises(CompileError, match=r"command failed with exit code 1:\n.*bisheng(.|\n)*deliberately broken"):
        runtime.compile_without_load("broken", "#error no\n" + VECTOR, ARCH)
    assert list_tmp(runtime.disk_cache.roots[0]) == []
    assert runtime.compile_without_load("scalar_increment", VECTOR, ARCH)


def test_print_compiler_command(runtime, monkeypatch, capsys):
    monkeypatch.setenv("TST_JIT_PRINT_COMPILER_COMMAND", "1")
    runtime.compile_without_load("scalar_increment", VECTOR, ARCH)
    assert capsys.readouterr().out.count("Running command: ") == 2


# ---- cache keys -------------------------------------------------------------------------------------
def test_key_sensitivity(runtime):
    key = lambda **kw: runtime.cache_key(VECTOR, AscendCompilerOptions(**{"arch": 3510, **kw}))
    base = key()
    assert key(arch=2201) != base and key(optimize_level="3") != base and key(debug_info=True) != base
    no_preload = tuple(f for f in DEFAULT_BISHENG if f not in ("-mllvm", "-cce-aicore-dcpreload-args=false"))
    assert key(bisheng_flags=no_preload) != base
    assert key(extra_bisheng_flags=["-v"]) != key(extra_linker_flags=["-v"])  # the lists are separate components
    assert key(extra_aicpu_flags=["-DZ"]) == base and key(dump_asm=True) == base  # inactive list, dumps: not keyed
    aicpu = runtime.cache_key(AICPU, AscendCompilerOptions(aicpu=True))
    assert runtime.cache_key(AICPU, AscendCompilerOptions(aicpu=True, extra_bisheng_flags=["-DZ"])) == aicpu
    assert runtime.cache_key(AICPU, AscendCompilerOptions(aicpu=True, extra_aicpu_flags=["-DZ"])) != aicpu


def test_key_chains_one_fnv1a_over_the_documented_parts(runtime):
    """DeepJIT's key: FNV-1a over extra signature, compiler hash (itself one FNV-1a over the bisheng and
    linker versions), the option parts, the post-hook hash ("" on Ascend) and the source hash."""
    version, linker = runtime.backend.version, runtime.backend.linker_version
    compiler = reference_hex(version.encode(), linker.encode())
    assert runtime.backend.compiler_hash() == compiler
    options = runtime.default_compiler_options.override_with(ARCH)
    parts = [runtime.config.extra_signature.encode(), compiler.encode()]
    parts += [c.encode() for c in options.hash_components()]
    parts += [b"", runtime.parser.parse_into_hash(VECTOR).encode()]
    assert runtime.cache_key(VECTOR, ARCH) == reference_hex(*parts)


def test_include_dir_paths_are_not_keyed(tmp_path, monkeypatch, toolkit):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ka = make_runtime(tmp_path, monkeypatch, backend="ascend", include_dirs=[str(tmp_path / "a")])
    kb = make_runtime(tmp_path, monkeypatch, backend="ascend", include_dirs=[str(tmp_path / "b")])
    assert ka.cache_key(VECTOR, ARCH) == kb.cache_key(VECTOR, ARCH)


def test_option_errors():
    with pytest.raises(DeepJITError, match="optimization level must be specified"):
        AscendCompilerOptions(optimize_level="", arch=3510).get_bisheng_flags()
    with pytest.raises(DeepJITError, match="Ascend architecture must be specified"):
        AscendCompilerOptions(optimize_level="2", arch=0).get_bisheng_flags()


# ---- launch options and argument packing ------------------------------------------------------------
def test_launch_defaults_come_from_env(tmp_path, monkeypatch, toolkit):
    assert make_runtime(tmp_path, monkeypatch, backend="ascend").default_launch_options == AscendLaunchOptions(
        num_ubuf_bytes=0, num_launch_timeout_secs=300)
    monkeypatch.setenv("DJ_JIT_LAUNCH_TIMEOUT", "11")
    monkeypatch.setenv("TST_JIT_LAUNCH_TIMEOUT", "7")
    rt = make_runtime(tmp_path, monkeypatch, backend="ascend")
    assert rt.default_launch_options.num_launch_timeout_secs == 7
    merged = rt.default_launch_options.override_with(AscendLaunchOptions(num_blocks=4, num_ubuf_bytes=1024))
    assert (merged.num_blocks, merged.num_ubuf_bytes, merged.num_launch_timeout_secs) == (4, 1024, 7)


@pytest.mark.parametrize("options, message", [
    (dict(num_blocks=None), "Ascend block count must be positive"),
    (dict(num_blocks=0), "Ascend block count must be positive"),
    (dict(num_ubuf_bytes=-1), "Ascend dynamic UB size must not be negative"),
    (dict(num_launch_timeout_secs=-1), "Ascend launch timeout is out of range"),
    (dict(num_launch_timeout_secs=65536), "Ascend launch timeout is out of range"),
])
def test_launch_option_validation(options, message):
    full = {"num_blocks": 1, "num_ubuf_bytes": 0, "num_launch_timeout_secs": 10, **options}
    with pytest.raises(DeepJITError, match=message):
        AscendLaunchOptions(**full).validate(aicpu=False)


def test_aicpu_rejects_dynamic_ub():
    with pytest.raises(DeepJITError, match="AICPU kernels do not support dynamic UB"):
        AscendLaunchOptions(num_blocks=1, num_ubuf_bytes=32, num_launch_timeout_secs=0).validate(aicpu=True)


def test_argument_packing():
    packed = pack_ascend_args([ctypes.c_int8(-2), ctypes.c_float(1.5), ctypes.c_int64(3), ctypes.c_double(0.25)])
    assert len(packed) == 24
    assert packed[0:1] == b"\xfe" and packed[1:4] == b"\0\0\0"          # int8 padded to 4
    assert packed[4:8] == bytes(ctypes.c_float(1.5))                      # float at 4
    assert packed[8:16] == (3).to_bytes(8, "little")                       # int64 at 8
    assert packed[16:24] == bytes(ctypes.c_double(0.25))                  # double at 16
    assert pack_ascend_args([]) == b"\0" * 8                               # never empty
    t = torch.zeros(3)
    packed = pack_ascend_args([ctypes.c_int32(7), t, 5, 2.0])
    assert len(packed) == 32 and packed[:4] == (7).to_bytes(4, "little") and packed[4:8] == b"\0" * 4
    assert int.from_bytes(packed[8:16], "little") == t.data_ptr()
    assert packed[16:24] == (5).to_bytes(8, "little") and packed[24:32] == bytes(ctypes.c_double(2.0))
    assert len(pack_ascend_args([ctypes.c_int32(1)])) == 8                 # rounded up to 8
    with pytest.raises(TypeError, match="argument 0"):
        pack_ascend_args(["text"])
    with pytest.raises(TypeError, match="argument 1.*bool"):
        pack_ascend_args([1, True])


# ---- on an NPU ----------------------------------------------------------------------------------
@pytest.mark.npu(hardware="the ACL runtime's device properties and a bisheng-built kernel")
def test_device_properties_and_scalar_increment(tmp_path, monkeypatch):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    rt = make_runtime(tmp_path, monkeypatch, backend="ascend")
    prop = rt.device.get_prop()
    assert all(v > 0 for k, v in vars(prop).items() if k not in ("soc_name",) and "warp" not in k)
    assert rt.default_compiler_options.arch == prop.npu_arch
    source = '#include <kernel_operator.h>\n' + VECTOR
    kernel = rt.compile("scalar_increment", source)
    out = torch.zeros(1, dtype=torch.int32, device="npu")
    rt.launch(kernel, AscendLaunchOptions(num_blocks=1), out, ctypes.c_int32(31))
    torch.npu.synchronize()
    assert out.item() == 32
