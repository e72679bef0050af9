"""deep_gemm's Ascend kernels through deepjit's real Ascend toolchain, without an NPU: the exact
bisheng and ld.lld command lines (a fake CANN from tests/deepjit/helpers records them), the source
bisheng gets (defines prepended to the package file), and cache keys that follow source, included
headers, defines and flags."""
import os
import shutil

import pytest
import torch

import deepjit
from deep_gemm._operands import GroupedRows, QuantOperand
from deep_gemm.ascend import bf16_gemm, fp8_mx_gemm, m_grouped_bf16_gemm, mqa_logits, paged_mqa_logits, sf_layout
from deep_gemm.attention import PagedKV, Quantised
from deepjit.backends.ascend import AscendCompilerOptions
from deepjit.backends.ascend.toolchain import DEEPJIT_INCLUDE
from tests.deepjit.helpers import make_fake_ascend_toolkit, read_calls

PACKAGE = os.path.dirname(os.path.dirname(bf16_gemm.__file__))
ARCH = AscendCompilerOptions(arch=3510)
# Recorded expectation: deepjit's default bisheng and ld.lld flags for dav-3510 (spec: deepjit §10).
BISHENG_FLAGS = ["-O2", "--npu-arch=dav-3510", "--cce-aicore-only", "-mllvm", "-enable-hiipu-vf-loop-unroll",
                 "-mllvm", "-cce-aicore-dcpreload-args=false"]
LINKER_FLAGS = ["-m", "aicorelinux", "-Ttext", "0", "--no-mmap-output-file"]


def _copy_package(root) -> str:
    """The Ascend kernel sources in a private package tree (so a test may edit a header)."""
    pkg = os.path.join(str(root), "deep_gemm")
    shutil.copytree(os.path.join(PACKAGE, "ascend"), os.path.join(pkg, "ascend"),
                    ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return pkg


@pytest.fixture
def toolkit(tmp_path, monkeypatch):
    home = make_fake_ascend_toolkit(tmp_path / "cann")
    monkeypatch.setenv("ASCEND_HOME_PATH", home)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("DG_JIT_DUMP_ASM", "DJ_JIT_DUMP_ASM", "DG_JIT_KERNEL_DEBUG_INFO", "DJ_JIT_KERNEL_DEBUG_INFO",
                 "ACLSHMEM_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


def _library(pkg: str) -> deepjit.KernelLibrary:
    return deepjit.KernelLibrary("deep_gemm", "DG", os.path.join(pkg, "_lib.py"), "toolchain-test")


def _args(layout="nt", out=torch.float32, c=False, alpha=None):
    a = torch.empty(64, 96, dtype=torch.bfloat16) if layout[0] == "n" else torch.empty(96, 64, dtype=torch.bfloat16).t()
    b = torch.empty(80, 96, dtype=torch.bfloat16) if layout[1] == "t" else torch.empty(96, 80, dtype=torch.bfloat16).t()
    d = torch.empty(64, 80, dtype=out)
    return a, b, d, (d if c else None), alpha


@pytest.mark.parametrize(("layout", "out", "c", "alpha", "entry", "defines"), [
    ("nt", torch.float32, False, None, "dg_bf16_gemm",
     "DG_A_MN_MAJOR 0|DG_BLOCK_M 128|DG_B_MN_MAJOR 0|DG_D_FP32 1|DG_SHAPE_K 96|DG_SHAPE_M 0|DG_SHAPE_N 80"),
    ("tn", torch.bfloat16, True, 0.5, "dg_bf16_gemm_epilogue",
     "DG_A_MN_MAJOR 1|DG_B_MN_MAJOR 1|DG_D_FP32 0|DG_HAS_C 1|DG_SHAPE_K 96|DG_SHAPE_M 0|DG_SHAPE_N 80"),
])
def test_bisheng_and_linker_command_lines(tmp_path, toolkit, layout, out, c, alpha, entry, defines):
    pkg = _copy_package(tmp_path / "pkg")
    lib = _library(pkg)
    name, path, defs = bf16_gemm.kernel_spec(*_args(layout, out, c, alpha))
    assert name == entry
    handle = lib.ascend_kernel(name, path, defs)
    with open(os.path.join(pkg, path)) as f:
        body = f.read()
    assert handle.source == "".join(f"#define {d}\n" for d in defines.split("|")) + body
    artifact = lib.ascend_runtime(False).compile_without_load(name, handle.source, ARCH)
    bisheng, lld = read_calls(toolkit)
    build = bisheng["cwd"]
    adv_api = os.path.join(toolkit, "aarch64-linux", "asc", "include", "adv_api")
    assert bisheng["tool"] == "bisheng" and bisheng["argv"] == [
        *BISHENG_FLAGS, f"-I{tmp_path / 'pkg'}", f"-I{adv_api}", f"-I{DEEPJIT_INCLUDE}", f"{build}/kernel.asc", "-o",
        f"{build}/kernel.rel.o"]
    assert lld["tool"] == "ld.lld" and lld["argv"] == [*LINKER_FLAGS, f"{build}/kernel.rel.o", "-o",
                                                       f"{build}/kernel.o"]
    with open(os.path.join(artifact, "kernel.asc")) as f:
        assert f.read() == handle.source


def _capture(monkeypatch, module, lib) -> list:
    """The handles ``module``'s glue asks deepjit for (the launch itself is skipped)."""
    seen = []

    def capture(name, path, defines):
        seen.append((lib.ascend_kernel(name, path, defines), path))
        return lambda *args: None

    monkeypatch.setattr(module, "kernel", capture)
    return seen


def _grouped_call():
    rows = GroupedRows(torch.zeros(256, dtype=torch.int64), torch.tensor([200], dtype=torch.int32), True, 256)
    m_grouped_bf16_gemm.m_grouped_bf16_gemm_nt_contiguous(
        torch.empty(256, 64, dtype=torch.bfloat16), torch.empty(1, 96, 64, dtype=torch.bfloat16),
        torch.empty(256, 96, dtype=torch.bfloat16), rows, True)


def _fp8_call():
    op = lambda mn: QuantOperand(torch.zeros(mn, 64, dtype=torch.float8_e4m3fn), torch.ones(mn, 2), False, True,
                                 mn, 64, None, 1, 32)
    fp8_mx_gemm.fp8_gemm_nt(op(256), op(96), torch.empty(256, 96, dtype=torch.bfloat16))


def _fp8_query(*shape):
    return Quantised(torch.zeros(*shape, dtype=torch.float8_e4m3fn), None, False, False)


def _mqa_call():
    kv = Quantised(torch.zeros(64, 64, dtype=torch.float8_e4m3fn), torch.ones(64), False, True)
    ranges = torch.zeros(4, dtype=torch.int32)
    mqa_logits.mqa_logits(_fp8_query(4, 8, 64), kv, torch.ones(4, 8), ranges, ranges, torch.empty(4, 64), False, True)


def _paged_call():
    cache = PagedKV(torch.zeros(4, 32, 1, 68, dtype=torch.uint8), False, 64)
    paged_mqa_logits.paged_mqa_logits(_fp8_query(2, 1, 8, 64), cache, torch.ones(2, 8),
                                      torch.zeros(2, 1, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32),
                                      torch.empty(2, 64, dtype=torch.bfloat16), False)


def _sf_call():
    sf_layout.transform_sf(torch.ones(96, 3), 96, 3, 1, "k", torch.tensor([96], dtype=torch.int32))


@pytest.mark.parametrize(("module", "call", "entry", "defines"), [
    (m_grouped_bf16_gemm, _grouped_call, "dg_m_grouped_bf16_gemm",
     ("DG_BLOCK_M 128", "DG_B_MN_MAJOR 0", "DG_D_FP32 0", "DG_SHAPE_K 64", "DG_SHAPE_N 96", "DG_ZERO_PADDING 1")),
    (fp8_mx_gemm, _fp8_call, "dg_fp8_mx_gemm", ("DG_AB_FP4 0", "DG_A_MN_MAJOR 0", "DG_BLOCK_M 128", "DG_B_MN_MAJOR 0",
                                                "DG_D_FP32 0",
                                                "DG_SHAPE_K 64", "DG_SHAPE_M 0", "DG_SHAPE_N 96")),
    (mqa_logits, _mqa_call, "dg_fp8_mqa_logits",
     ("DG_CLEAN 1", "DG_COMPRESSED 0", "DG_HEADS 8", "DG_HEAD_DIM 64", "DG_KV_TOKEN_SF 1", "DG_LOGITS_FP32 1",
      "DG_MX 0", "DG_QK_FP4 0")),
    (paged_mqa_logits, _paged_call, "dg_fp8_paged_mqa_logits",
     ("DG_BLOCK_KV 32", "DG_CLEAN 0", "DG_HEADS 8", "DG_HEAD_DIM 64", "DG_KV_NZ 0", "DG_KV_UNIT_SF 0", "DG_LOGITS_FP32 0",
      "DG_MX 0", "DG_QK_FP4 0")),
    (sf_layout, _sf_call, "dg_sf_transform", ("DG_FLOAT_INPUT 1", "DG_GROUPING 2")),
])
def test_glue_kernels_command_lines(tmp_path, toolkit, monkeypatch, module, call, entry, defines):
    """The M-grouped, FP8, MQA logits and sf transform kernels as their glue asks for them (defines
    captured at the library call)."""
    pkg = _copy_package(tmp_path / "pkg")
    lib = _library(pkg)
    seen = _capture(monkeypatch, module, lib)
    call()
    ((handle, path),) = seen
    assert handle.name == entry
    with open(os.path.join(pkg, path)) as f:
        assert handle.source == "".join(f"#define {d}\n" for d in defines) + f.read()
    lib.ascend_runtime(False).compile_without_load(handle.name, handle.source, ARCH)
    bisheng, lld = read_calls(toolkit)
    build = bisheng["cwd"]
    adv_api = os.path.join(toolkit, "aarch64-linux", "asc", "include", "adv_api")
    assert bisheng["argv"] == [*BISHENG_FLAGS, f"-I{tmp_path / 'pkg'}", f"-I{adv_api}", f"-I{DEEPJIT_INCLUDE}",
                               f"{build}/kernel.asc", "-o", f"{build}/kernel.rel.o"]
    assert lld["argv"] == [*LINKER_FLAGS, f"{build}/kernel.rel.o", "-o", f"{build}/kernel.o"]


def test_cache_key_follows_source_headers_defines_and_flags(tmp_path, toolkit):
    pkg = _copy_package(tmp_path / "pkg")
    name, path, defs = bf16_gemm.kernel_spec(*_args())
    runtime = _library(pkg).ascend_runtime(False)
    source = _library(pkg).ascend_kernel(name, path, defs).source
    base = runtime.cache_key(source, ARCH)
    assert runtime.cache_key(source, ARCH) == base
    assert runtime.cache_key(source + "// edited\n", ARCH) != base
    other = bf16_gemm.kernel_spec(*_args(out=torch.bfloat16))[2]
    assert runtime.cache_key(_library(pkg).ascend_kernel(name, path, other).source, ARCH) != base
    assert runtime.cache_key(source, AscendCompilerOptions(arch=3510, extra_bisheng_flags=["-DDG_BLOCK_N=128"])) != base
    assert runtime.cache_key(source, AscendCompilerOptions(arch=3510, optimize_level="3")) != base
    # an included package header is part of the key (a fresh library re-reads it)
    assert _library(pkg).ascend_runtime(False).cache_key(source, ARCH) == base
    with open(os.path.join(pkg, "ascend", "cube_gemm.h"), "a") as f:
        f.write("// edited\n")
    assert _library(pkg).ascend_runtime(False).cache_key(source, ARCH) != base
