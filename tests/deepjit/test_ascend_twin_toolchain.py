"""The Ascend twin toolchain itself: source rewriting and entry parsing, the cache entry's toolchain
name, argument packing, and a hand-written mixed kernel whose modes exercise the launch model
(blocks, AIC + two AIVs, cross-core flags) and every reported failure: out-of-bounds UB by an
intrinsic and by a direct dereference, a write past a global tensor, a wait whose flag is never
set, a set never waited on, a notify that may run ahead of the wait for the flag's previous notify, a
nested lock and a cross-core wait that times out; DJ_TWIN_POISON exposing a
read of on-chip memory nothing wrote (mode 9 skips the load into UB); the launch timeout (mode 10)."""
import ctypes
import json
import os
import re
import time

import pytest
import torch

import deepjit
from deepjit.backends.ascend_twin import AscendLaunchOptions, TwinLaunchError
from deepjit.backends.ascend_twin.source import parse_entry, rewrite_onchip_nulls, uses_lane_sync
from deepjit.errors import DeepJITError

# Mode 0: y[i] = 2 * x[i] + block (each AIV takes half of its block's n elements, the AIC tells the
# AIVs to start through a cross-core flag). Other modes fail in one specific way each.
PROBE = r"""
#include <c_api/asc_simd.h>

extern "C" __global__ __mix__(1, 2) void probe(__gm__ float* x, __gm__ float* y, int32_t n, int32_t mode) {
  asc_init();
  __ubuf__ float* ub = (__ubuf__ float*)0;
  int32_t half_n = n / 2;
  if ASC_IS_AIC {
    if (mode == 7) return;  // never arrives: the AIVs' waits time out
    if (mode == 8) {        // fails while the AIVs wait
      __cbuf__ float* l1 = (__cbuf__ float*)0;
      asc_copy_gm2ub_align((__ubuf__ uint8_t*)ub, (__gm__ uint8_t*)x, 4);
      (void)l1;
    }
    asc_sync_intra_arrive(PIPE_S, 0);
    asc_sync_intra_arrive(PIPE_S, 16);
    if (mode == 16) {
      asc_sync_intra_arrive(PIPE_S, 1);
      asc_sync_intra_arrive(PIPE_S, 17);
    }
    return;
  }
  asc_sync_intra_wait(PIPE_S, 0);
  while (mode == 10) asc_sync_pipe(PIPE_V);  // never ends: the launch timeout stops it
  int32_t base = (int32_t)block_idx * n + (int32_t)asc_get_sub_block_id() * half_n;
  uint32_t bytes = uint32_t(half_n) * 4;
  if (mode == 1) {
    asc_copy_gm2ub_align((__ubuf__ uint8_t*)(ub + 248 * 256 - 8), (__gm__ uint8_t*)(x + base), bytes);
  }
  if (mode != 9) asc_copy_gm2ub_align((__ubuf__ uint8_t*)ub, (__gm__ uint8_t*)(x + base), bytes);
  if (mode == 2) asc_sync_wait(PIPE_MTE2, PIPE_V, EVENT_ID3);
  asc_sync_notify(PIPE_MTE2, PIPE_V, EVENT_ID0);
  asc_sync_wait(PIPE_MTE2, PIPE_V, EVENT_ID0);
  for (int32_t i = 0; i < half_n; ++i) ub[i] = 2.0f * ub[i] + float(block_idx);
  if (mode == 4) ub[248 * 256 + 40] = 1.0f;
  if (mode == 5) asc_sync_notify(PIPE_V, PIPE_MTE3, EVENT_ID1);
  if (mode == 11) {
    asc_sync_notify(PIPE_V, PIPE_MTE3, EVENT_ID2);
    asc_sync_notify(PIPE_V, PIPE_MTE3, EVENT_ID2);
    asc_sync_wait(PIPE_V, PIPE_MTE3, EVENT_ID2);
    asc_sync_wait(PIPE_V, PIPE_MTE3, EVENT_ID2);
  }
  if (mode == 12) asc_sync_notify(PIPE_V, PIPE_MTE3, 8);
  if (mode == 13) asc_sync_wait(PIPE_ALL, PIPE_MTE3, EVENT_ID0);
  if (mode == 14 || mode == 15) {  // 14: nothing keeps MTE2 from setting the flag again before MTE3's wait
    asc_sync_notify(PIPE_MTE2, PIPE_MTE3, EVENT_ID4);
    asc_sync_wait(PIPE_MTE2, PIPE_MTE3, EVENT_ID4);
    if (mode == 15) {              // 15: a flag back from MTE3 orders MTE2's next notify after that wait
      asc_sync_notify(PIPE_MTE3, PIPE_MTE2, EVENT_ID4);
      asc_sync_wait(PIPE_MTE3, PIPE_MTE2, EVENT_ID4);
    }
    asc_sync_notify(PIPE_MTE2, PIPE_MTE3, EVENT_ID4);
    asc_sync_wait(PIPE_MTE2, PIPE_MTE3, EVENT_ID4);
  }
  if (mode == 16) {  // ordered by a cross-core wait on MTE2, then by a lock MTE2 takes after MTE3 released it
    asc_sync_notify(PIPE_MTE2, PIPE_MTE3, EVENT_ID6);
    asc_sync_wait(PIPE_MTE2, PIPE_MTE3, EVENT_ID6);
    asc_sync_intra_wait(PIPE_MTE2, 1);
    asc_sync_notify(PIPE_MTE2, PIPE_MTE3, EVENT_ID6);
    asc_sync_wait(PIPE_MTE2, PIPE_MTE3, EVENT_ID6);
    asc_lock(PIPE_MTE3, 3);
    asc_unlock(PIPE_MTE3, 3);
    asc_lock(PIPE_MTE2, 3);
    asc_unlock(PIPE_MTE2, 3);
    asc_sync_notify(PIPE_MTE2, PIPE_MTE3, EVENT_ID6);
    asc_sync_wait(PIPE_MTE2, PIPE_MTE3, EVENT_ID6);
  }
  if (mode == 15) {  // ordered through the scalar unit's wait, then by asc_sync()
    asc_sync_notify(PIPE_V, PIPE_MTE3, EVENT_ID5);
    asc_sync_wait(PIPE_V, PIPE_MTE3, EVENT_ID5);
    asc_sync_notify(PIPE_MTE3, PIPE_S, EVENT_ID5);
    asc_sync_wait(PIPE_MTE3, PIPE_S, EVENT_ID5);
    asc_sync_notify(PIPE_V, PIPE_MTE3, EVENT_ID5);
    asc_sync_wait(PIPE_V, PIPE_MTE3, EVENT_ID5);
    asc_sync();
    asc_sync_notify(PIPE_V, PIPE_MTE3, EVENT_ID5);
    asc_sync_wait(PIPE_V, PIPE_MTE3, EVENT_ID5);
  }
  if (mode == 6) {
    asc_lock(PIPE_MTE1, 2);
    asc_lock(PIPE_M, 2);
  }
  uint32_t out_bytes = mode == 3 && block_idx == 2 && asc_get_sub_block_id() == 1 ? bytes + 64 : bytes;
  asc_copy_ub2gm_align((__gm__ uint8_t*)(y + base), (__ubuf__ uint8_t*)ub, out_bytes);
}
"""


def test_rewrites_only_onchip_null_literals():
    text = "(__ubuf__ uint8_t *)0; (__cc__ float*)0; (__ca__ InT *)0x10; (__gm__ float*)0; (__cbuf__ T *) 0;"
    out = rewrite_onchip_nulls(text)
    assert "(__ubuf__ uint8_t *)::dj_twin::onchip_base(::dj_twin::Mem::UB)" in out
    assert "(__cc__ float*)::dj_twin::onchip_base(::dj_twin::Mem::L0C)" in out
    assert "(__cbuf__ T *)::dj_twin::onchip_base(::dj_twin::Mem::L1)" in out
    assert "(__ca__ InT *)0x10" in out and "(__gm__ float*)0" in out


def test_parses_the_entry_and_its_core_type():
    e = parse_entry(PROBE)
    assert (e.name, e.kind) == ("probe", "mix")
    assert [(p.type, p.name) for p in e.params] == [("__gm__ float*", "x"), ("__gm__ float*", "y"), ("int32_t", "n"),
                                                   ("int32_t", "mode")]
    assert parse_entry('extern "C" __global__ __vector__ void v(void) {}').params == ()
    with pytest.raises(DeepJITError, match="cannot tell its core type"):
        parse_entry('extern "C" __global__ __aicore__ void k(__gm__ float* x) {}')
    with pytest.raises(DeepJITError, match=r"only __mix__\(1, 2\)"):
        parse_entry('extern "C" __global__ __mix__(1, 1) void k(__gm__ float* x) {}')
    with pytest.raises(DeepJITError, match="exactly one"):
        parse_entry("int main() {}")
    assert uses_lane_sync("asc_syncthreads();") and not uses_lane_sync("asc_sync_wait(a, b, c);")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    root = tmp_path_factory.mktemp("twinlib")
    pkg = root / "twinprobe"
    (pkg / "ascend").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ascend" / "probe.asc").write_text(PROBE)
    return deepjit.KernelLibrary("twinprobe", "TWP", str(pkg / "__init__.py"), "0.1")


@pytest.fixture(scope="module")
def probe(lib):
    return lib.ascend_kernel("probe", "ascend/probe.asc")


def _run(probe, mode, blocks=3, n=64):
    x = torch.randn(blocks * n, generator=torch.Generator().manual_seed(mode))
    y = torch.full_like(x, -7.0)
    counters = probe.launch(AscendLaunchOptions(num_blocks=blocks), x, y, ctypes.c_int32(n), ctypes.c_int32(mode))
    return x, y, counters


def test_runs_every_block_on_one_cube_and_two_vector_cores(probe):
    x, y, counters = _run(probe, 0)
    blocks = torch.arange(3, dtype=torch.float32).repeat_interleave(64)
    assert torch.equal(y, 2 * x + blocks)
    assert sorted((c.block, c.core) for c in counters.cores) == [(b, k) for b in range(3) for k in ("AIC", "AIV0",
                                                                                                      "AIV1")]
    assert counters.total_bytes("MTE2") == counters.total_bytes("MTE3") == x.numel() * 4


def test_cache_entry_records_the_twin_toolchain(lib):
    rt = lib.ascend_runtime(twin=True)
    path = rt.compile_without_load("probe", lib.source("ascend/probe.asc"))
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    assert meta["compiler_info"]["name"] == "ascend-twin" and meta["compiler_info"]["version"]
    assert rt.cache_key(lib.source("ascend/probe.asc")) in path
    assert rt.cache_key(lib.source("ascend/probe.asc")) != lib.host_runtime.cache_key(lib.source("ascend/probe.asc"))
    assert " -g " not in f" {meta['command']} "   # debug info only on request (below)


def test_debug_info_on_request(tmp_path, monkeypatch):
    """<PREFIX>_JIT_KERNEL_DEBUG_INFO gives twin builds -g (gdb on a twin kernel); it changes the key."""
    pkg = tmp_path / "twindebug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    plain = deepjit.KernelLibrary("twindebug", "TWD", str(pkg / "__init__.py"), "0.1").ascend_runtime(twin=True)
    monkeypatch.setenv("TWD_JIT_KERNEL_DEBUG_INFO", "1")
    debug = deepjit.KernelLibrary("twindebug", "TWD", str(pkg / "__init__.py"), "0.1").ascend_runtime(twin=True)
    assert "-g" not in plain.default_compiler_options.get_flags()
    assert "-g" in debug.default_compiler_options.get_flags()
    assert plain.cache_key(PROBE) != debug.cache_key(PROBE)


@pytest.mark.parametrize("mode, pattern", [
    (1, r"block \d, core AIV[01]: asc_copy_gm2ub_align: buffer UB offset 253920, 128 bytes, is outside \[0, 253952\)"),
    (2, r"asc_sync_wait\(PIPE_MTE2, PIPE_V, event 3\): no asc_sync_notify"),
    (3, r"block 2, core AIV1: asc_copy_ub2gm_align: global tensor y offset 640, 192 bytes, is outside \[0, 768\)"),
    (4, r"core AIV[01]: buffer UB offset 254112 is outside \[0, 253952\) during a direct access \(SIGSEGV\)"),
    (5, r"kernel end: asc_sync_notify\(PIPE_V, PIPE_MTE3, event 1\) was set and never waited on"),
    (11, r"asc_sync_notify\(PIPE_V, PIPE_MTE3, event 2\): the flag is still set by an earlier notify"),
    (12, r"asc_sync_notify\(PIPE_V, PIPE_MTE3, 8\): event id outside \[0, 8\)"),
    (13, r"asc_sync_wait: PIPE_ALL is not a pipe a flag can name"),
    (14, r"asc_sync_notify\(PIPE_MTE2, PIPE_MTE3, event 4\): nothing orders this notify after the asc_sync_wait"),
    (6, r"asc_lock\(PIPE_M, 2\): mutex 2 is already locked \(by PIPE_MTE1\)"),
    (8, r"core AIC: asc_copy_gm2ub_align: UB is not a memory of the AIC core"),
])
def test_failures_are_reported_and_leave_outputs_untouched(probe, mode, pattern):
    x = torch.randn(3 * 64)
    y = torch.full_like(x, -7.0)
    with pytest.raises(TwinLaunchError, match=f"launch of probe \\(3 blocks\\) failed: kernel probe, .*{pattern}"):
        probe.launch(AscendLaunchOptions(num_blocks=3), x, y, ctypes.c_int32(64), ctypes.c_int32(mode))
    assert torch.equal(y, torch.full_like(x, -7.0))


@pytest.mark.parametrize("mode", [15, 16])
def test_notifies_ordered_after_the_previous_wait_pass(probe, mode):
    """A flag's next notify ordered after the wait that took the previous one is legal (mode 14, with nothing
    ordering it, fails above): mode 15 by a flag back, by the scalar unit's wait or by asc_sync(); mode 16 by a
    cross-core wait on the notifying pipe (taken to order it after all the core did) or by a lock that pipe
    takes after the waiting pipe released it."""
    x, y, _ = _run(probe, mode)
    assert torch.equal(y, 2 * x + torch.arange(3, dtype=torch.float32).repeat_interleave(64))


def test_cross_core_wait_times_out_naming_the_flag(probe, monkeypatch):
    monkeypatch.setenv("DJ_TWIN_WAIT_TIMEOUT", "0.3")
    start = time.perf_counter()
    with pytest.raises(TwinLaunchError, match=r"core AIV[01]: asc_sync_intra_wait\(PIPE_S, 0\): no "
                                              r"asc_sync_intra_arrive reached this flag within 0.3 s"):
        _run(probe, 7)
    assert time.perf_counter() - start < 5


def test_launch_timeout_stops_a_kernel_that_never_ends(probe):
    x = torch.randn(64)
    start = time.perf_counter()
    with pytest.raises(TwinLaunchError, match=r"did not finish within 1 s \(num_launch_timeout_secs\)"):
        probe.launch(AscendLaunchOptions(num_blocks=1, num_launch_timeout_secs=1), x, torch.empty_like(x),
                     ctypes.c_int32(64), ctypes.c_int32(10))
    assert time.perf_counter() - start < 10


def test_poison_exposes_reads_of_unwritten_onchip_memory(probe, monkeypatch):
    _, y, _ = _run(probe, 9)
    assert torch.equal(y, torch.arange(3, dtype=torch.float32).repeat_interleave(64))  # zero-filled UB
    monkeypatch.setenv("DJ_TWIN_POISON", "1")
    _, y, _ = _run(probe, 9)
    assert y.isnan().all()


def test_arguments_are_read_as_the_device_reads_them(probe):
    x = torch.randn(64)
    with pytest.raises(TwinLaunchError, match="argument n: the packed arguments end before it"):
        probe.launch(AscendLaunchOptions(num_blocks=1), x, torch.empty_like(x))
    with pytest.raises(TwinLaunchError, match="take 24 bytes of arguments, the launch passed 32"):
        probe.launch(AscendLaunchOptions(num_blocks=1), x, x, ctypes.c_int32(64), ctypes.c_int32(0), ctypes.c_int32(1))
    with pytest.raises(TwinLaunchError, match="argument y: address 0x1234 is not inside any tensor argument"):
        probe.launch(AscendLaunchOptions(num_blocks=1), x, ctypes.c_void_p(0x1234), ctypes.c_int32(64),
                     ctypes.c_int32(0))
    with pytest.raises(DeepJITError, match="block count must be positive"):
        probe.launch(AscendLaunchOptions(num_blocks=0), x, x, ctypes.c_int32(64), ctypes.c_int32(0))


def test_backend_for_forced_ascend(lib, monkeypatch):
    monkeypatch.setenv("TWP_BACKEND", "ascend")
    assert lib.backend_for(torch.device("cpu"), has_ascend=True) == "ascend"
    assert lib.backend_for("npu", has_ascend=True) == "ascend"
    with pytest.raises(NotImplementedError, match="TWP_BACKEND=ascend: twinprobe has no Ascend kernel for scale"):
        lib.backend_for("cpu", has_ascend=False, op="scale")
    with pytest.raises(ValueError, match=re.escape("TWP_BACKEND: expected a backend for device cuda (ascend needs NPU tensors, or CPU tensors for the "
                                                "Ascend twin), got 'ascend'")):
        lib.backend_for("cuda", has_ascend=True)
