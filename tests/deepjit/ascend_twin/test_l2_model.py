"""The twin's L2 model (dj_twin/l2_model.h, DJ_TWIN_L2=1) on hand-counted kernels: HBM bytes are the
lines that miss an LRU of the L2 size (reads) and the dirty lines written back; L2 bytes are the lines
each core requests (a data mover's lines once per instruction, streaming SIMT bytes as they are, cached
SIMT loads that hit the core's data cache not at all). Tensor sizes here are multiples of 128 bytes, so
every tensor starts on a line (the twin places a tensor's end at a page end)."""
import pytest
import torch

from deepjit.backends.ascend_twin.kernel import L2_BYTES_ENV, L2_MODEL_ENV
from deepjit.tilelang_route import ascend_check

from .conftest import launch_source

# Each block reads x's first 1 KiB into UB twice (two instructions), then writes it to its own 1 KiB of y.
REREAD = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void l2_reread(__gm__ float* x, __gm__ float* y) {
  __ubuf__ uint8_t *ub = (__ubuf__ uint8_t *)0;
  for (int i = 0; i < 2; ++i)
    asc_copy_gm2ub_align(ub, (__gm__ uint8_t*)x, 4, 256, 0, 0, 0, static_cast<asc_load_l2_cache_mode>(0), 256, 256);
  asc_sync_notify(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  asc_sync_wait(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  asc_copy_ub2gm_align((__gm__ uint8_t*)y + asc_get_block_idx() * 1024, ub, 4, 256,
                       static_cast<asc_store_l2_cache_mode>(0), 256, 256);
}
'''

# 64 lanes: each loads the same 32 floats of w with asc_ldca (one line, cached) and its own float of x
# with asc_ldcg (streamed), and stores one float of y with asc_stcg.
SIMT = r'''
#include <c_api/asc_simd.h>
#include <simt_api/asc_simt.h>
__simt_vf__ __launch_bounds__(64) inline void lanes(__gm__ float* w, __gm__ float* x, __gm__ float* y) {
  const uint32_t i = threadIdx.x;
  float sum = asc_ldcg(x + i);
  for (uint32_t h = 0; h < 32; ++h) sum += asc_ldca(w + h);
  asc_stcg(y + i, sum);
}
extern "C" __global__ __vector__ void l2_simt(__gm__ float* w, __gm__ float* x, __gm__ float* y) {
  asc_vf_call<lanes>(cce::dim3(64), w, x, y);
}
'''


# The cube core loads a 32 x 128 BF16 block of an MN-major x (element (r, c) at x[r + c * 4096]: one
# 64-byte segment per K column, columns 8 KiB apart) with dn2nz, the same block of a K-major y (rows
# 4096 elements apart, 256 bytes each) with nd2nz, and stores a 16 x 32 FP32 L0C tile to z (rows of
# 128 bytes).
CUBE = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __cube__ void l2_cube(__gm__ bfloat16_t* x, __gm__ bfloat16_t* y, __gm__ float* z) {
  __cbuf__ bfloat16_t *l1 = (__cbuf__ bfloat16_t *)0;
  asc_set_gm2l1_nz_para(1, 1, 32, 0);
  asc_copy_gm2l1_dn2nz(l1, x, 4096 * 2, static_cast<asc_load_l2_cache_mode>(0), 32, 128, 0, false);
  asc_copy_gm2l1_nd2nz(l1 + 32 * 128, y, 4096 * 2, static_cast<asc_load_l2_cache_mode>(0), 32, 128, 0, false);
  __cc__ float *l0c = (__cc__ float *)0;
  asc_set_l0c_copy_nz_para(1, 0, 0);
  asc_copy_l0c2gm(z, l0c, 32, 16, 32, 16, static_cast<asc_store_l2_cache_mode>(0), asc_unit_flag_mode::DISABLE,
                  asc_quant_mode::NoQuant, asc_relu_pre_mode::NoRelu, false, true, false, 0);
}
'''


def test_off_by_default(twin_runtime, monkeypatch):
    monkeypatch.delenv(L2_MODEL_ENV, raising=False)
    result = launch_source(twin_runtime, "l2_reread", REREAD, torch.arange(256.0), torch.zeros(512), num_blocks=2)
    assert result.hbm_bytes is None and "hbm_bytes" not in result.counters
    # without the model every GM byte is an HBM byte and there is no l2 unit
    est = ascend_check.roofline(ascend_check._counters(result), "vector", 2, "bf16")
    assert "l2" not in est and est["hbm"] == pytest.approx((4096 + 2048) / (1.6e12 * 2 / 64))


@pytest.mark.parametrize("blocks", [2, 65])  # 65: two waves of the 64 AIV; the cache lasts the launch
def test_rereads_hit_and_writes_go_back_once(twin_runtime, monkeypatch, blocks):
    monkeypatch.setenv(L2_MODEL_ENV, "1")
    x, y = torch.arange(256.0), torch.zeros(256 * blocks)
    result = launch_source(twin_runtime, "l2_reread", REREAD, x, y, num_blocks=blocks)
    assert torch.equal(y, x.repeat(blocks))
    # x's 8 lines come from HBM once for every block and both reads; y's 8 lines a block are written back once
    assert result.hbm_bytes == 1024 + 1024 * blocks
    assert sum(c.hbm_read for c in result.cores) == 1024
    # L2 serves every instruction: each block 2 reads + 1 write of 1 KiB
    assert result.l2_bytes == blocks * 3 * 1024
    est = ascend_check.roofline(ascend_check._counters(result), "vector", blocks, "bf16")
    share = min(1.0, blocks / 64)
    assert est["hbm"] == pytest.approx((1024 + 1024 * blocks) / (1.6e12 * share))
    assert est["l2"] == pytest.approx(3072 * blocks / (100 * 1.65e9 * 32 * share))


def test_a_small_l2_evicts(twin_runtime, monkeypatch):
    monkeypatch.setenv(L2_MODEL_ENV, "1")
    monkeypatch.setenv(L2_BYTES_ENV, "512")  # 4 lines: x's 8 lines no longer stay
    result = launch_source(twin_runtime, "l2_reread", REREAD, torch.arange(256.0), torch.zeros(512))
    reads = sum(c.hbm_read for c in result.cores)
    assert reads == 2 * 1024  # both reads miss on every line
    assert result.hbm_bytes == reads + 1024  # y's first KiB, written back as it is evicted or at the end


def test_simt_cached_loads_hit_the_data_cache(twin_runtime, monkeypatch):
    monkeypatch.setenv(L2_MODEL_ENV, "1")
    w, x, y = torch.ones(32), torch.arange(64.0), torch.zeros(64)
    result = launch_source(twin_runtime, "l2_simt", SIMT, w, x, y)
    assert torch.equal(y, x + 32)
    assert result.counters["routes"] == {"simt_gm_load": 64 * 4 + 64 * 32 * 4, "simt_gm_store": 64 * 4}
    # L2: x's and y's bytes streamed, w's one line once (then data-cache hits)
    assert result.l2_bytes == 256 + 256 + 128
    # HBM: x (2 lines) and w (1 line) read, y (2 lines) written
    assert result.hbm_bytes == (2 + 1 + 2) * 128


def test_data_movers_fetch_each_line_once_per_instruction(twin_runtime, monkeypatch):
    """dn2nz walks rows outer, columns inner: each K column's line is touched by all 32 rows, yet fetched
    once; nd2nz reads 2 lines a row; FixPipe writes 16 rows of 128 bytes."""
    monkeypatch.setenv(L2_MODEL_ENV, "1")
    x, y = torch.randn(128, 4096).bfloat16(), torch.randn(32, 4096).bfloat16()
    z = torch.full((16, 32), -1.0)
    result = launch_source(twin_runtime, "l2_cube", CUBE, x, y, z)
    assert torch.equal(z, torch.zeros(16, 32))
    assert result.counters["routes"]["gm_to_l1"] == 2 * 32 * 128 * 2
    assert result.l2_bytes == 128 * 128 + 32 * 2 * 128 + 16 * 128
    assert result.hbm_bytes == result.l2_bytes  # every line is touched once
