"""The deliberate failures: each must stop the launch with an error naming the kernel, block, core,
buffer and offset (never a crash or a hang), and leave the caller's tensors untouched.

The kernels are small hand-written AscendC sources against the C API (TileLang never emits these)."""
import time

import pytest
import torch

from deepjit.backends.ascend_twin import TwinLaunchError

from .conftest import launch_source

UB_BYTES = 248 * 1024  # dav-3510's Unified Buffer

SIMT_OOB = r'''
#include <c_api/asc_simd.h>
#include <simt_api/asc_simt.h>
__simt_vf__ __launch_bounds__(32) inline void stray_store(__ubuf__ float* ub) {
  ub[63488 + threadIdx.x] = 1.0f;  // 63488 floats = 248 KiB: the first element past the UB
}
extern "C" __global__ __vector__ void oob_ub_simt(__gm__ float* x) {
  __ubuf__ float *ub = (__ubuf__ float *)0;
  asc_vf_call<stray_store>(cce::dim3(32), ub);
}
'''

COPY_OOB = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void oob_ub_copy(__gm__ float* x) {
  __ubuf__ uint8_t *ub = (__ubuf__ uint8_t *)0;
  // 256 bytes landing 128 bytes before the end of the UB
  asc_copy_gm2ub_align(ub + (248 * 1024 - 128), (__gm__ uint8_t*)x, 1, 256, 0, 0, 0,
                       static_cast<asc_load_l2_cache_mode>(0), 256, 256);
}
'''

GM_OOB = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void oob_gm_store(__gm__ float* x, __gm__ float* y) {
  __ubuf__ uint8_t *ub = (__ubuf__ uint8_t *)0;
  asc_copy_gm2ub_align(ub, (__gm__ uint8_t*)x, 1, 256, 0, 0, 0, static_cast<asc_load_l2_cache_mode>(0), 256, 256);
  asc_sync_notify(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  asc_sync_wait(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  // y holds 48 floats (192 bytes); 256 bytes are written
  asc_copy_ub2gm_align((__gm__ uint8_t*)y, ub, 1, 256, static_cast<asc_store_l2_cache_mode>(0), 256, 256);
}
'''

GM_DIRECT_TAIL = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void gm_direct_tail(__gm__ float* y) {
  // y holds 45 floats (180 bytes): the store lands in the slack before the next 64 bytes, not in a guard
  y[46] = 1.0f;
}
'''

MISSING_FLAG = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void missing_flag(__gm__ float* x, __gm__ float* y) {
  __ubuf__ uint8_t *ub = (__ubuf__ uint8_t *)0;
  asc_copy_gm2ub_align(ub, (__gm__ uint8_t*)x, 1, 256, 0, 0, 0, static_cast<asc_load_l2_cache_mode>(0), 256, 256);
  // no asc_sync_notify(PIPE_MTE2, PIPE_MTE3, 3) anywhere: this wait can never be satisfied
  asc_sync_wait(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(3));
  asc_copy_ub2gm_align((__gm__ uint8_t*)y, ub, 1, 256, static_cast<asc_store_l2_cache_mode>(0), 256, 256);
}
'''

MISSING_CROSS_CORE = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __mix__(1, 2) void missing_cross_core(__gm__ float* x, __gm__ float* y) {
  __ubuf__ uint8_t *ub = (__ubuf__ uint8_t *)0;
  if ASC_IS_AIV {
    asc_sync_intra_wait(PIPE_V, 5);  // the cube core never arrives on flag 5
    asc_copy_ub2gm_align((__gm__ uint8_t*)y, ub, 1, 256, static_cast<asc_store_l2_cache_mode>(0), 256, 256);
  }
}
'''


def _error(runtime, name, source, *args, num_blocks=1):
    with pytest.raises(TwinLaunchError) as exc:
        launch_source(runtime, name, source, *args, num_blocks=num_blocks)
    return str(exc.value)


def test_simt_store_past_the_unified_buffer(twin_runtime):
    x = torch.zeros(64)
    message = _error(twin_runtime, "oob_ub_simt", SIMT_OOB, x)
    for part in ("oob_ub_simt", "block 0", "AIV", "UB", str(UB_BYTES)):
        assert part in message, (part, message)


def test_copy_intrinsic_past_the_unified_buffer(twin_runtime):
    x = torch.arange(64, dtype=torch.float32)
    message = _error(twin_runtime, "oob_ub_copy", COPY_OOB, x)
    for part in ("oob_ub_copy", "block 0", "AIV", "UB", str(UB_BYTES - 128), "asc_copy_gm2ub"):
        assert part in message, (part, message)


def test_write_past_a_global_tensor_leaves_the_caller_tensors_unchanged(twin_runtime):
    x = torch.arange(64, dtype=torch.float32)
    y = torch.full((48,), -7.0)
    message = _error(twin_runtime, "oob_gm_store", GM_OOB, x, y)
    for part in ("oob_gm_store", "block 0", "AIV", "asc_copy_ub2gm"):
        assert part in message, (part, message)
    assert "global tensor" in message and "offset" in message, message
    assert torch.equal(y, torch.full((48,), -7.0)), "a failed launch wrote into the caller's tensor"
    assert torch.equal(x, torch.arange(64, dtype=torch.float32))


def test_direct_store_just_past_a_ragged_global_tensor(twin_runtime):
    y = torch.full((45,), -7.0)
    message = _error(twin_runtime, "gm_direct_tail", GM_DIRECT_TAIL, y)
    for part in ("gm_direct_tail", "wrote past global tensor", "byte 184", "180-byte"):
        assert part in message, (part, message)
    assert torch.equal(y, torch.full((45,), -7.0)), "a failed launch wrote into the caller's tensor"


def test_wait_without_a_set_is_an_error_not_a_hang(twin_runtime):
    x, y = torch.ones(64), torch.full((64,), 3.0)
    twin_runtime.compile("missing_flag", MISSING_FLAG)  # the compile is not part of the timed launch
    start = time.monotonic()
    message = _error(twin_runtime, "missing_flag", MISSING_FLAG, x, y)
    assert time.monotonic() - start < 9  # reported at once, not after the 10 s default timeout
    for part in ("missing_flag", "block 0", "AIV", "PIPE_MTE2", "PIPE_MTE3", "3"):
        assert part in message, (part, message)
    assert torch.equal(y, torch.full((64,), 3.0))


def test_cross_core_wait_times_out(twin_runtime, monkeypatch):
    monkeypatch.setenv("DJ_TWIN_WAIT_TIMEOUT", "0.5")
    x, y = torch.ones(64), torch.full((64,), 3.0)
    twin_runtime.compile("missing_cross_core", MISSING_CROSS_CORE)
    start = time.monotonic()
    message = _error(twin_runtime, "missing_cross_core", MISSING_CROSS_CORE, x, y)
    assert time.monotonic() - start < 9  # the 0.5 s timeout, not the 10 s default
    for part in ("missing_cross_core", "block 0", "AIV", "PIPE_V", "5"):
        assert part in message, (part, message)
    assert torch.equal(y, torch.full((64,), 3.0))


NOTIFY_WITHOUT_WAIT = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void notify_without_wait(__gm__ float* x, __gm__ float* y) {
  __ubuf__ uint8_t *ub = (__ubuf__ uint8_t *)0;
  asc_copy_gm2ub_align(ub, (__gm__ uint8_t*)x, 1, 256, 0, 0, 0, static_cast<asc_load_l2_cache_mode>(0), 256, 256);
  asc_sync_notify(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  asc_sync_wait(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  asc_copy_ub2gm_align((__gm__ uint8_t*)y, ub, 1, 256, static_cast<asc_store_l2_cache_mode>(0), 256, 256);
  asc_sync_notify(PIPE_MTE3, PIPE_MTE2, static_cast<event_t>(6));  // set, never waited on
}
'''

LOCK_WITHOUT_UNLOCK = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __cube__ void lock_without_unlock(__gm__ float* x) {
  asc_lock(PIPE_MTE1, 2, ASC_LOCK_BLOCK);  // never unlocked
}
'''

ARRIVE_WITHOUT_WAIT = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __mix__(1, 2) void arrive_without_wait(__gm__ float* x) {
  if ASC_IS_AIC {
    asc_sync_intra_arrive(PIPE_FIX, 3);  // AIV0's flag 3: no vector core ever waits on it
  }
}
'''


def test_notify_without_a_wait_is_reported_at_kernel_end(twin_runtime):
    x, y = torch.ones(64), torch.full((64,), 3.0)
    message = _error(twin_runtime, "notify_without_wait", NOTIFY_WITHOUT_WAIT, x, y)
    for part in ("notify_without_wait", "block 0", "AIV", "kernel end", "PIPE_MTE3", "PIPE_MTE2", "6"):
        assert part in message, (part, message)
    assert torch.equal(y, torch.full((64,), 3.0)), "a failed launch wrote into the caller's tensor"


def test_lock_without_unlock_is_reported_at_kernel_end(twin_runtime):
    message = _error(twin_runtime, "lock_without_unlock", LOCK_WITHOUT_UNLOCK, torch.ones(8))
    for part in ("lock_without_unlock", "block 0", "AIC", "kernel end", "PIPE_MTE1", "2"):
        assert part in message, (part, message)


def test_cross_core_arrive_without_a_wait_is_reported_at_kernel_end(twin_runtime):
    message = _error(twin_runtime, "arrive_without_wait", ARRIVE_WITHOUT_WAIT, torch.ones(8))
    for part in ("arrive_without_wait", "block 0", "kernel end", "3"):
        assert part in message, (part, message)


def test_unpaired_flags_at_kernel_end_pass_when_allowed(twin_runtime, monkeypatch):
    """DJ_TWIN_ALLOW_UNPAIRED_FLAGS=1 lets a kernel end with flags still set (a pre-armed ping-pong flag,
    as TileLang's FlashMLA port leaves them) and runs it to completion; a held lock is still an error."""
    monkeypatch.setenv("DJ_TWIN_ALLOW_UNPAIRED_FLAGS", "1")
    x, y = torch.arange(64, dtype=torch.float32), torch.full((64,), 3.0)
    launch_source(twin_runtime, "notify_without_wait", NOTIFY_WITHOUT_WAIT, x, y)
    assert torch.equal(y, x)
    launch_source(twin_runtime, "arrive_without_wait", ARRIVE_WITHOUT_WAIT, torch.ones(8))
    message = _error(twin_runtime, "lock_without_unlock", LOCK_WITHOUT_UNLOCK, torch.ones(8))
    assert "kernel end" in message and "PIPE_MTE1" in message, message
