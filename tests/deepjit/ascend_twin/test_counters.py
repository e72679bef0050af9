"""The twin's launch counters on small hand-written kernels whose byte and op counts are known by hand:
GM bytes only on routes with a GM end, on-chip moves on their own route, SIMT lane work and the SIMT GM
access helpers counted; and the roofline those counters give."""
import pytest
import torch

from deepjit.tilelang_route import ascend_check

from .conftest import launch_source

# Each of 2 blocks: 2 bursts of 256 bytes GM -> UB, then the same 512 bytes UB -> GM.
COPY = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void count_copy(__gm__ float* x, __gm__ float* y) {
  __ubuf__ uint8_t *ub = (__ubuf__ uint8_t *)0;
  auto* src = (__gm__ uint8_t*)x + asc_get_block_idx() * 512;
  auto* dst = (__gm__ uint8_t*)y + asc_get_block_idx() * 512;
  asc_copy_gm2ub_align(ub, src, 2, 256, 0, 0, 0, static_cast<asc_load_l2_cache_mode>(0), 256, 256);
  asc_sync_notify(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  asc_sync_wait(PIPE_MTE2, PIPE_MTE3, static_cast<event_t>(0));
  asc_copy_ub2gm_align(dst, ub, 2, 256, static_cast<asc_store_l2_cache_mode>(0), 256, 256);
}
'''

# The cube core moves a 16 x 32 FP32 L0C tile (2 KiB) to GM and a 16 x 16 FP32 tile (1 KiB) to AIV0's UB;
# the vector cores do nothing.
FIXPIPE = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __mix__(1, 2) void count_fixpipe(__gm__ float* y) {
  if ASC_IS_AIC {
    __cc__ float *l0c = (__cc__ float *)0;
    __ubuf__ float *ub = (__ubuf__ float *)0;
    asc_copy_l0c2gm(y, l0c, 32, 16, 32, 16, static_cast<asc_store_l2_cache_mode>(0), asc_unit_flag_mode::DISABLE,
                    asc_quant_mode::NoQuant, asc_relu_pre_mode::NoRelu, false, true, false, 0);
    asc_copy_l0c2ub(ub, l0c, 16, 16, 16, 16, 0, asc_dual_dst_mode::DISABLE, asc_unit_flag_mode::DISABLE,
                    asc_quant_mode::NoQuant, asc_relu_pre_mode::NoRelu, false, true, false, 0);
  }
}
'''

# AIV0 writes 2 bursts of 4 blocks (256 bytes) of its UB into the cube core's L1; the cube core loads 2
# fractals (1 KiB) of another L1 region into L0A and fills 2 blocks (64 bytes) of L1: no GM byte at all.
ONCHIP = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __mix__(1, 2) void count_onchip(__gm__ float* y) {
  __cbuf__ uint8_t *l1 = (__cbuf__ uint8_t *)0;
  if ASC_IS_AIV {
    if (asc_get_sub_block_id() == 0) asc_copy_ub2l1(l1, (__ubuf__ uint8_t *)0, 2, 4, 0, 0);
  }
  if ASC_IS_AIC {
    __ca__ bfloat16_t *l0a = (__ca__ bfloat16_t *)0;
    asc_copy_l12l0a(l0a, (__cbuf__ bfloat16_t *)(l1 + 8192), 0, 0, 1, 2, 1, 1);
    asc_fill_l1(l1 + 16384, uint32_t(0), asc_fill_value_config{1, 2, 0});
  }
}
'''

# 64 lanes; each loads one float2 with asc_ldcg (8 bytes), adds and multiplies float2s (2 + 2 ops), takes
# one max (1 op), adds a plain float (not seen: 0 ops), stores 2 floats with asc_stcg (8 bytes) and one
# float by a plain dereference (not seen: 0 bytes). The max outside asc_vf_call is not SIMT work.
SIMT = r'''
#include <c_api/asc_simd.h>
#include <simt_api/asc_simt.h>
__simt_vf__ __launch_bounds__(64) inline void lane_work(__gm__ float2* x, __gm__ float* y, __gm__ float* z) {
  const uint32_t i = threadIdx.x;
  float2 v = asc_ldcg(x + i);
  v = (v + v) * v;
  const float m = max(v.x, v.y) + 1.0f;
  asc_stcg(y + 2 * i, v.x);
  asc_stcg(y + 2 * i + 1, m);
  z[i] = m;
}
extern "C" __global__ __vector__ void count_simt(__gm__ float2* x, __gm__ float* y, __gm__ float* z) {
  z[64] = max(1.0f, 2.0f);
  asc_vf_call<lane_work>(cce::dim3(64), x, y, z);
}
'''


def test_gm_copy_counts_each_gm_byte_once(twin_runtime):
    x = torch.arange(256, dtype=torch.float32)
    y = torch.zeros(256)
    result = launch_source(twin_runtime, "count_copy", COPY, x, y, num_blocks=2)
    assert torch.equal(y, x)
    counters = result.counters
    assert counters["routes"] == {"gm_to_ub": 1024, "ub_to_gm": 1024}
    assert counters["bytes"] == {"PIPE_MTE2": 1024, "PIPE_MTE3": 1024}
    assert [c.routes for c in result.cores] == [{"gm_to_ub": 512, "ub_to_gm": 512}] * 2
    est = ascend_check.roofline(ascend_check._counters(result), "vector", 2, "bf16")
    assert est["hbm"] == pytest.approx(2048 / (1.6e12 * 2 / 64))  # 2 of 64 AIV: their share of HBM
    assert est["bound"] == "hbm"


def test_fixpipe_to_ub_is_on_chip_and_to_gm_is_hbm(twin_runtime):
    y = torch.full((16, 32), -1.0)
    result = launch_source(twin_runtime, "count_fixpipe", FIXPIPE, y)
    assert torch.equal(y, torch.zeros(16, 32))  # the L0C starts as zeros
    counters = result.counters
    assert counters["routes"] == {"l0c_to_gm": 16 * 32 * 4, "l0c_to_ub": 16 * 16 * 4}
    assert counters["bytes"] == {"PIPE_FIX": 3072}  # both go through the FixPipe
    est = ascend_check.roofline(ascend_check._counters(result), "mix", 1, "bf16")
    assert est["hbm"] == pytest.approx(2048 / (1.6e12 * 2 / 64))  # only the L0C -> GM bytes
    # both moves on the one AIC's FixPipe at 128 B/cycle, 1.65 GHz
    assert est["fixpipe"] == pytest.approx(3072 / (128 * 1.65e9))
    # one AIC's share of HBM (1/32 of 1.6 TB/s) is below its FixPipe's 211 GB/s
    assert est["bound"] == "hbm" and "fixpipe 0.015 us" in ascend_check.format_roofline(est)


def test_ub_to_l1_and_l1_to_l0_are_on_chip(twin_runtime):
    result = launch_source(twin_runtime, "count_onchip", ONCHIP, torch.zeros(8))
    counters = result.counters
    assert counters["routes"] == {"ub_to_l1": 256, "l1_to_l0": 1024, "fill": 64}
    assert {c.core: c.routes for c in result.cores}["AIV0"] == {"ub_to_l1": 256}
    est = ascend_check.roofline(ascend_check._counters(result), "mix", 1, "bf16")
    assert est["hbm"] == 0
    assert est["mte1"] == pytest.approx(1024 / (256 * 1.65e9))
    assert est["ub_to_l1"] == pytest.approx(256 / (128 * 1.65e9 * 2))
    assert est["bound"] == "mte1"


def test_simt_lanes_count_ops_and_helper_gm_bytes(twin_runtime):
    x = torch.arange(128, dtype=torch.float32)
    y = torch.zeros(128)
    z = torch.zeros(65)
    result = launch_source(twin_runtime, "count_simt", SIMT, x, y, z)
    v = (x + x) * x
    m = torch.maximum(v[0::2], v[1::2]) + 1
    assert torch.equal(y[0::2], v[0::2]) and torch.equal(y[1::2], m) and torch.equal(z[:64], m)
    counters = result.counters
    assert counters["simt_ops"] == 64 * 5
    assert counters["routes"] == {"simt_gm_load": 64 * 8, "simt_gm_store": 64 * 8}
    assert counters["vector_ops"] == 0 and counters["bytes"] == {}  # no pipe moved anything
    est = ascend_check.roofline(ascend_check._counters(result), "vector", 1, "bf16")
    assert est["simt"] == pytest.approx(320 / (32 * 1.65e9))  # one AIV, 32 lane ops a cycle
    assert est["hbm"] == pytest.approx(1024 / (1.6e12 / 64))
    assert est["bound"] == "hbm" and "simt 0.006 us" in ascend_check.format_roofline(est)


def test_roofline_units_from_routes():
    # a cube kernel on 4 of 32 AIC: the L1 -> L0 bytes go to MTE1 (256 B/cycle per AIC), not HBM
    est = ascend_check.roofline({"routes": {"gm_to_l1": 1 << 20, "l1_to_l0": 1 << 24, "fill": 1 << 30},
                                 "cube_macs": 0}, "cube", 4, "bf16")
    assert est["hbm"] == pytest.approx((1 << 20) / (1.6e12 / 8))
    assert est["mte1"] == pytest.approx((1 << 24) / (256 * 1.65e9 * 4))
    assert est["bound"] == "mte1"
    # UB -> L1 from 2 AIV of a mix block at the (estimated) 128 B/cycle each
    est = ascend_check.roofline({"routes": {"ub_to_l1": 1 << 20}}, "mix", 1, "bf16")
    assert est["ub_to_l1"] == pytest.approx((1 << 20) / (128 * 1.65e9 * 2)) and est["hbm"] == 0
    assert est["bound"] == "ub_to_l1"
    assert ascend_check.roofline({"routes": {"fill": 512}}, "cube", 1, "bf16")["bound"] == "none"
