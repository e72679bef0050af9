"""Plain Python launch arguments follow the kernel's declared parameter types (Ascend and CUDA): the
declaration is read from the source kept beside the binary, as DeepJIT's C++ packs each argument with its
static type."""
import ctypes
import os
import struct

import pytest
import torch

from deepjit.backends.args import pack_ascend_args, to_ctype
from deepjit.backends.ascend import AscendCompilerOptions
from deepjit.backends.params import declared_types, read_declared_types, read_sched_mode, sched_mode_of
from deepjit.errors import DeepJITError

from .helpers import make_fake_ascend_toolkit, make_runtime

MIXED = """
// a comment naming __global__ void decoy(float x)
extern "C" __global__ __aicore__ void mixed_echo(GM_ADDR out, int8_t a, float b, int64_t c, double d,
                                                 const uint32_t e, __gm__ float* f) { }
"""


def test_declarations_are_read_from_the_source():
    assert declared_types(MIXED, "mixed_echo") == ["ptr", "int8_t", "float", "int64_t", "double", "uint32_t", "ptr"]
    assert declared_types(MIXED) == declared_types(MIXED, "mixed_echo")      # the only entry kernel
    cuda = 'template <int N> __global__ void __launch_bounds__(128, 1) scale(float* x, float s, int n) {}'
    assert declared_types(cuda) == ["ptr", "float", "int"]
    aicpu = 'extern "C" __aicpu__ __global__ unsigned int k(int64_t* out, int32_t a, unsigned long b, float c) {}'
    assert declared_types(aicpu, "k") == ["ptr", "int32_t", "unsigned long", "float"]
    two = cuda + "\n" + cuda.replace("scale", "other")
    assert declared_types(two) is None and declared_types(two, "other") == ["ptr", "float", "int"]
    assert declared_types("#include <kernel.cuh>\n") is None                # defined in a header: unknown
    assert declared_types('extern "C" __global__ void noop(void) {}') == []


def test_a_float_parameter_gets_four_bytes():
    declared = declared_types(MIXED, "mixed_echo")
    t = torch.zeros(4)
    packed = pack_ascend_args([t, -2, 1.5, 3, 0.25, 7, 64], declared)
    assert packed[0:8] == t.data_ptr().to_bytes(8, "little")
    assert packed[8:9] == b"\xfe"                                           # int8 at 8
    assert packed[12:16] == struct.pack("<f", 1.5)                          # float at 12, not a double at 16
    assert packed[16:24] == (3).to_bytes(8, "little") and packed[24:32] == struct.pack("<d", 0.25)
    assert packed[32:36] == (7).to_bytes(4, "little") and packed[40:48] == (64).to_bytes(8, "little")
    assert len(packed) == 48
    # without a declaration the explicit rule stays: int64 and double
    assert pack_ascend_args([1.5]) == struct.pack("<d", 1.5)
    # a declaration naming another parameter count is not trusted
    assert pack_ascend_args([1.5], ["float", "int"]) == struct.pack("<d", 1.5)


def test_declared_types_check_the_value():
    assert to_ctype(0, 2, "float").value == 2.0
    with pytest.raises(TypeError, match="expected an int for the declared 'int32_t', got float"):
        to_ctype(0, 1.5, "int32_t")
    with pytest.raises(ValueError, match="expected a value that fits the declared 'uint8_t', got"):
        to_ctype(0, 256, "uint8_t")
    with pytest.raises(TypeError, match="expected a ctypes or numpy scalar of the declared 'half', got"):
        to_ctype(0, 1.0, "half")
    with pytest.raises(TypeError, match=r"expected a pointer \(the kernel declares one\), got"):
        to_ctype(0, 1.0, "ptr")
    assert isinstance(to_ctype(0, ctypes.c_double(1.0), "float"), ctypes.c_double)   # explicit ctypes win


def test_the_compiled_artifact_keeps_the_declaration(tmp_path, monkeypatch):
    home = make_fake_ascend_toolkit(tmp_path / "cann")
    monkeypatch.setenv("ASCEND_HOME_PATH", home)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    rt = make_runtime(tmp_path, monkeypatch, backend="ascend")
    path = rt.compile_without_load("mixed_echo", MIXED, AscendCompilerOptions(arch=3510))
    assert read_declared_types(os.path.join(path, "kernel.asc"), "mixed_echo")[2] == "float"
    assert read_declared_types(os.path.join(path, "missing.asc")) is None


BATCH = """
extern "C" __global__ __schedmode__(1) __mix__(1, 2) void batch_echo(__gm__ float* out, int32_t n) { }
"""


def test_the_scheduling_mode_is_read_with_the_declaration(tmp_path):
    from deepjit.backends.ascend_twin.source import parse_entry
    entry = parse_entry(BATCH)
    assert (entry.name, entry.kind, entry.sched_mode, len(entry.params)) == ("batch_echo", "mix", 1, 2)
    # the qualifier may come before __global__ too (DeepGEMM-Ascend writes it first)
    first = BATCH.replace('extern "C" __global__ __schedmode__(1)', 'extern "C" __schedmode__( 1 ) __global__')
    assert parse_entry(first).sched_mode == 1
    assert parse_entry(BATCH.replace("__schedmode__(1) ", "")).sched_mode == 0
    assert declared_types(BATCH) == ["ptr", "int32_t"]                       # not a parameter list
    for bad in ("__schedmode__(2)", "__schedmode__(n)", "__schedmode__(1) __schedmode__(0)"):
        with pytest.raises(DeepJITError, match=r"batch_echo: __schedmode__ takes 0 \(normal\) or 1 \(batch\)"):
            parse_entry(BATCH.replace("__schedmode__(1)", bad))
    assert sched_mode_of("k", "__global__ __vector__") == 0
    # a comment before the entry is no qualifier of it
    decoy = '/* extern "C" __global__ __schedmode__(1) __mix__(1, 2) */ // extern "C" __schedmode__(1)\n'
    vector = decoy + BATCH.replace("__schedmode__(1) __mix__(1, 2)", "__vector__")
    assert (parse_entry(vector).kind, parse_entry(vector).sched_mode) == ("vector", 0)
    source = tmp_path / "kernel.asc"
    source.write_text("// __global__ __schedmode__(1) void batch_echo(int x)\n" + MIXED + BATCH)
    assert read_sched_mode(str(source), "batch_echo") == 1 and read_sched_mode(str(source), "mixed_echo") == 0
    source.write_text(vector)
    assert read_sched_mode(str(source), "batch_echo") == 0
    # comment marks inside a string literal are no comment; entries without extern "C" right before them
    literal = '#define TAG "a/*"\n' + BATCH
    assert parse_entry(literal).sched_mode == 1 and declared_types(literal) == ["ptr", "int32_t"]
    block = BATCH.replace('extern "C" __global__', '#include <x.h>\nextern "C" {\n__global__') + "}\n"
    cxx = "#pragma once\n" + BATCH.replace('extern "C" ', "")
    for text in (block, cxx):
        source.write_text(text)
        assert read_sched_mode(str(source), "batch_echo") == 1, text
    assert read_sched_mode(str(tmp_path / "missing.asc"), "batch_echo") == 0


def test_a_batch_kernel_is_launched_in_batch_mode(monkeypatch):
    """On an NPU the launch carries ACL's schemMode attribute (aclrtLaunchKernelAttrId 1) beside the qualifier."""
    from deepjit.backends.ascend import acl
    from deepjit.backends.ascend.kernel import AscendKernel
    from deepjit.backends.ascend.options import AscendLaunchOptions

    seen = []

    def call(name, *args):
        if name == "aclrtLaunchKernelWithHostArgs":
            cfg = args[3]
            attrs = [] if cfg is None else cfg._obj.attrs[:cfg._obj.numAttrs]
            seen.append([(a.id, a.value.schemMode) for a in attrs if a.id == acl.ACL_RT_LAUNCH_KERNEL_ATTR_SCHEM_MODE])

    monkeypatch.setattr(acl, "call", call)
    options = AscendLaunchOptions(num_blocks=2, num_ubuf_bytes=0, num_launch_timeout_secs=0, stream=1)
    for mode in (1, 0):
        kernel = AscendKernel.__new__(AscendKernel)
        kernel._bin, kernel._func, kernel.aicpu, kernel.param_types, kernel.sched_mode = None, 1, False, ["ptr", "int32_t"], mode
        kernel.launch(options, torch.zeros(1), 3)
        kernel._func = None
    assert seen == [[(1, 1)], []]
