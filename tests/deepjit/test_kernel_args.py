"""deepjit.kernel_args: an Ascend kernel's one named argument struct, filled by name from the header the
kernel includes, passed in global memory. On the twin: results through top-level and nested pointer
fields, out-of-bounds accesses through them caught and named by field, and a struct the descriptor parser
lays out unlike the compiler refused naming the field."""
import ctypes

import pytest
import torch

import deepjit
from deepjit import descriptors, kernel_args
from deepjit.backends.ascend_twin.kernel import TwinLaunchError
from deepjit.errors import DeepJITError

ARGS_H = r"""
#pragma once
#include <stdint.h>
struct KargsOut { __gm__ float* y; int64_t y_offset; };
struct KargsScaleArgs {
  __gm__ const float* x;   // n floats are read from x + x_offset
  KargsOut out;            // and written to out.y + out.y_offset
  int64_t x_offset;
  int32_t n;
  float scale;
};
// #pragma pack is invisible to the descriptor parser: ctypes puts x at 8, the compiler at 4.
#pragma pack(push, 1)
struct KargsPackedArgs { int32_t n; __gm__ float* x; };
#pragma pack(pop)
"""
SCALE = r"""
#include <c_api/asc_simd.h>
#include <kargs/ascend/args.h>

extern "C" __global__ __vector__ void kargs_scale(__gm__ const KargsScaleArgs* args) {
  asc_init();
  const KargsScaleArgs p = *args;
  __ubuf__ float* ub = (__ubuf__ float*)0;
  asc_copy_gm2ub_align((__ubuf__ uint8_t*)ub, (__gm__ uint8_t*)(p.x + p.x_offset), uint32_t(p.n) * 4);
  asc_sync_notify(PIPE_MTE2, PIPE_V, EVENT_ID0);
  asc_sync_wait(PIPE_MTE2, PIPE_V, EVENT_ID0);
  for (int32_t i = 0; i < p.n; ++i) ub[i] = ub[i] * p.scale;
  asc_sync_notify(PIPE_V, PIPE_MTE3, EVENT_ID0);
  asc_sync_wait(PIPE_V, PIPE_MTE3, EVENT_ID0);
  asc_copy_ub2gm_align((__gm__ uint8_t*)(p.out.y + p.out.y_offset), (__ubuf__ uint8_t*)ub, uint32_t(p.n) * 4);
}
"""
PACKED = r"""
#include <c_api/asc_simd.h>
#include <kargs/ascend/args.h>

extern "C" __global__ __vector__ void kargs_packed(__gm__ const KargsPackedArgs* args) { asc_init(); (void)args; }
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    pkg = tmp_path_factory.mktemp("kargs") / "kargs"
    (pkg / "ascend").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ascend" / "args.h").write_text(ARGS_H)
    (pkg / "ascend" / "scale.asc").write_text(SCALE)
    (pkg / "ascend" / "packed.asc").write_text(PACKED)
    return deepjit.KernelLibrary("kargs", "KARGS", str(pkg / "__init__.py"), "0.1")


def _struct(lib, name="KargsScaleArgs"):
    return descriptors.struct_type(lib.source("ascend/args.h"), name)


def _scale(lib, x, y, *, n, x_offset=0, y_offset=0, scale=2.0):
    return kernel_args.pack(_struct(lib), x=x, out={"y": y, "y_offset": y_offset}, x_offset=x_offset, n=n,
                            scale=scale)


def test_fields_by_name_reach_the_kernel(lib):
    x, y = torch.arange(24, dtype=torch.float32), torch.full((32,), -1.0)
    args = _scale(lib, x, y, n=16, x_offset=8, y_offset=8, scale=0.5)
    kernel = lib.ascend_kernel("kargs_scale", "ascend/scale.asc")
    kernel(1, args)
    assert torch.equal(y[8:24], x[8:24] * 0.5) and torch.equal(y[:8], torch.full((8,), -1.0))
    y.fill_(0)
    kernel(1, args)  # the same packed struct again: the launch rewrote a copy of it, not the caller's bytes
    assert torch.equal(y[8:24], x[8:24] * 0.5)


def test_out_of_bounds_read_through_a_pointer_field_is_caught(lib):
    x, y = torch.ones(16), torch.zeros(16)
    with pytest.raises(TwinLaunchError, match=r"args\.x offset 4, 64 bytes, is outside \[0, 64\)"):
        lib.ascend_kernel("kargs_scale", "ascend/scale.asc")(1, _scale(lib, x, y, n=16, x_offset=1))
    assert torch.equal(y, torch.zeros(16))  # a failed launch copies nothing back


def test_out_of_bounds_write_through_a_nested_pointer_field_is_caught(lib):
    x, y = torch.ones(16), torch.zeros(12)
    with pytest.raises(TwinLaunchError, match=r"args\.out\.y offset 0, 64 bytes, is outside \[0, 48\)"):
        lib.ascend_kernel("kargs_scale", "ascend/scale.asc")(1, _scale(lib, x, y, n=16))


def test_an_address_outside_every_tensor_is_refused(lib):
    x, y = torch.ones(16), torch.zeros(16)
    stray = torch.zeros(16)  # an address only: not a referenced tensor, so not guarded for this launch
    args = kernel_args.pack(_struct(lib), x=x, out={"y": stray.data_ptr(), "y_offset": 0}, x_offset=0, n=16,
                            scale=1.0)
    with pytest.raises(TwinLaunchError, match=r"args\.out\.y: address 0x[0-9a-f]+ is not inside any tensor"):
        lib.ascend_kernel("kargs_scale", "ascend/scale.asc")(1, args)
    assert torch.equal(y, torch.zeros(16))


def test_layout_the_parser_misreads_fails_naming_the_field(lib):
    packed = _struct(lib, "KargsPackedArgs")
    assert packed.x.offset == 8  # ctypes' natural alignment; the compiler packs it at 4
    with pytest.raises(DeepJITError, match=r"KargsPackedArgs\.x is at byte 4 as compiled but at 8"):
        lib.ascend_kernel("kargs_packed", "ascend/packed.asc")(1, kernel_args.pack(packed, n=1, x=torch.ones(1)))


def test_a_struct_kernel_refuses_positional_arguments_and_the_wrong_struct(lib):
    kernel = lib.ascend_kernel("kargs_scale", "ascend/scale.asc")
    with pytest.raises(TypeError, match=r"kernel \w+: expected one KargsScaleArgs \(deepjit\.kernel_args\.pack\), got \d+ arguments"):
        kernel(1, torch.ones(4), torch.ones(4), 0, 4, ctypes.c_float(1.0))
    with pytest.raises(TypeError, match=r": expected struct \S*KargsScaleArgs, got a KargsPackedArgs"):
        kernel(1, kernel_args.pack(_struct(lib, "KargsPackedArgs"), n=1, x=torch.ones(1)))


def test_pack_names_a_missing_or_unknown_field_and_mixed_devices(lib):
    with pytest.raises(TypeError, match=r"no field z in the C\+\+ struct; missing scale"):
        kernel_args.pack(_struct(lib), x=torch.ones(1), out={"y": torch.ones(1), "y_offset": 0}, x_offset=0, n=1,
                         z=1.0)
    with pytest.raises(ValueError, match=r"\w+: expected pointer fields naming tensors on one device, got x on cpu, out\.y on meta"):
        kernel_args.pack(_struct(lib), x=torch.ones(1), out={"y": torch.ones(1, device="meta"), "y_offset": 0},
                         x_offset=0, n=1, scale=1.0)
    args = _scale(lib, torch.ones(2), torch.ones(3), n=2)
    assert args.tensor.dtype == torch.uint8 and args.tensor.numel() == ctypes.sizeof(_struct(lib))
    assert sorted(args.referenced) == ["out.y", "x"]
