// Drives the twin's vector register API (through TileLang's simd_inst.h wrappers) on one fake AIV core;
// reads float32 inputs from stdin and writes each op's raw result bytes to stdout for test_vec_ops.py.
#include <cstdio>
#include <vector>

#include "c_api/asc_simd.h"

// The element-type names simd_inst.h maps to registers (common.h gets them from the SIMT headers).
using fp8_e4_t = float8_e4m3_t;
struct fp8_e5_t { uint8_t bits; };

#include <tl_templates/ascend/simd_inst.h>

namespace V = simd_inst;

void dj_twin::record_failure(Launch& l, const char* text) {
  std::snprintf(l.message, sizeof l.message, "%s", text);
  l.failed = true;
}

static uint8_t ub[248 * 1024] __attribute__((aligned(64)));

template <class T> static void emit(const T* p, size_t n) { std::fwrite(p, sizeof(T), n, stdout); }

int main() {
  dj_twin::Launch launch;
  launch.kernel = "test_vec_ops";
  dj_twin::Core core;
  core.launch = &launch;
  core.mem[int(dj_twin::Mem::UB)] = ub;
  core.has_mem[int(dj_twin::Mem::UB)] = true;
  dj_twin::tls_core = &core;

  float* x = reinterpret_cast<float*>(ub);  // 64 inputs
  if (std::fread(x, 4, 64, stdin) != 64) return 2;
  __ubuf__ float* src = x;
  vector_bool all32 = asc_create_mask_b32(PAT_ALL);

  // 1. f32 -> bf16 RNE, PART_EVEN, then pack the low halves (nd2nz_copy.h's sequence): 64 bf16.
  auto r = V::vlds_norm(src, 0);
  auto bf = V::vcvt<bfloat16_t>(r, all32, ROUND_R, RS_DISABLE, PART_EVEN, MODE_ZEROING);
  auto packed = V::vpack<uint16_t>((V::vec_t<uint32_t>&)bf, LOWER);
  __ubuf__ uint16_t* out16 = reinterpret_cast<uint16_t*>(ub + 4096);
  V::vsts_norm<uint16_t>(packed, out16, 0, asc_create_mask_b16(PAT_VL64));
  emit(out16, 64);

  // 2. f32 -> e4m3 saturating, parts P0..P3 OR-ed: byte 4i+p = x[i] for each part p.
  vector_f8e4m3 acc;
  for (int p = 0; p < 4; ++p) {
    vector_f8e4m3 q;
    if (p == 0) q = V::vcvt<fp8_e4_t>(r, all32, ROUND_R, RS_ENABLE, PART_P0, MODE_ZEROING);
    if (p == 1) q = V::vcvt<fp8_e4_t>(r, all32, ROUND_R, RS_ENABLE, PART_P1, MODE_ZEROING);
    if (p == 2) q = V::vcvt<fp8_e4_t>(r, all32, ROUND_R, RS_ENABLE, PART_P2, MODE_ZEROING);
    if (p == 3) q = V::vcvt<fp8_e4_t>(r, all32, ROUND_R, RS_ENABLE, PART_P3, MODE_ZEROING);
    for (int k = 0; k < 256; ++k) acc.e[k] |= q.e[k];
  }
  emit(acc.e, 256);

  // 3. tail mask of 37 lanes: max, min (value + index) and sum of those lanes.
  uint32_t count = 37;
  vector_bool tail = asc_update_mask_b32(count);  // the C API decrements count (TileLang's wrapper copies it)
  auto mx = V::vcmax(r, tail, MODE_ZEROING);
  auto mn = V::vcmin(r, tail, MODE_ZEROING);
  auto sm = V::vcadd(r, tail, MODE_ZEROING);
  emit(mx.e, 2);
  emit(mn.e, 2);
  emit(sm.e, 1);
  emit(&count, 1);

  // 4. where(x > 0.5, x * 2 + 1, -x) with compare/select/axpy.
  auto gt = V::vcmps_gt(r, 0.5f, all32);
  auto one = V::vdup(1.0f, all32, MODE_ZEROING);
  V::vaxpy(one, r, 2.0f, all32, MODE_ZEROING);
  auto neg = V::vneg(r, all32, MODE_ZEROING);
  auto sel = V::vsel(one, neg, gt);
  emit(sel.e, 64);

  // 5. bf16 -> f32 even/odd halves re-interleaved (nd2nz_copy.h's widening): 128 floats back.
  __ubuf__ bfloat16_t* bsrc = reinterpret_cast<bfloat16_t*>(ub + 8192);
  for (int i = 0; i < 128; ++i) bsrc[i] = bfloat16_t(x[i % 64] * float(i + 1));
  auto b = V::vlds_norm(bsrc, 0);
  auto lo = V::vcvt<float>(b, asc_create_mask_b16(PAT_ALL), PART_EVEN, MODE_ZEROING);
  auto hi = V::vcvt<float>(b, asc_create_mask_b16(PAT_ALL), PART_ODD, MODE_ZEROING);
  auto [h0, h1] = V::vintlv(lo, hi);
  emit(h0.e, 64);
  emit(h1.e, 64);

  // 6. C API forms: asc_bfloat162float / _v2 widen the even / odd BF16 elements; asc_mula (d += a * b, fused)
  // under the 37-lane tail mask zeroes the other lanes; asc_float2bfloat16_rn / _v2 narrow.
  vector_float ev, od, fused = r;
  asc_bfloat162float(ev, b, all32);
  asc_bfloat162float_v2(od, b, all32);
  uint32_t lanes = 37;
  asc_mula(fused, r, r, asc_update_mask_b32(lanes));
  emit(ev.e, 64);
  emit(od.e, 64);
  emit(fused.e, 64);
  // asc_float2bfloat16_rn / _v2: x rounded to BF16 (RNE) in the even / odd elements, the others 0.
  vector_bfloat16_t nev, nod;
  asc_float2bfloat16_rn(nev, r, all32);
  asc_float2bfloat16_rn_v2(nod, r, all32);
  emit(nev.e, 128);
  emit(nod.e, 128);
  // asc_float2half_rn: x rounded to FP16 (RNE, overflow to inf) in the even elements, the others 0.
  vector_half hev;
  asc_float2half_rn(hev, r, all32);
  emit(hev.e, 128);

  // 6b. asc_e4m32float / _v2 / _v3 / _v4 over every E4M3 code (byte b = b): FP32 lane i of quarter k holds
  // code 4i + k.
  __ubuf__ uint8_t* codes = ub + 12288;
  for (int i = 0; i < 256; ++i) codes[i] = uint8_t(i);
  vector_fp8_e4m3fn_t q;
  asc_loadalign(q, codes);
  vector_float quarter[4];
  asc_e4m32float(quarter[0], q, asc_create_mask_b8(PAT_ALL));
  asc_e4m32float_v2(quarter[1], q, asc_create_mask_b8(PAT_ALL));
  asc_e4m32float_v3(quarter[2], q, asc_create_mask_b8(PAT_ALL));
  asc_e4m32float_v4(quarter[3], q, asc_create_mask_b8(PAT_ALL));
  for (auto& v : quarter) emit(v.e, 64);
  // under a 37-lane FP32 mask the other lanes are 0
  uint32_t e4_lanes = 37;
  vector_float masked;
  asc_e4m32float_v3(masked, q, asc_update_mask_b32(e4_lanes));
  emit(masked.e, 64);

  // 6c. asc_e2m1x22bfloat16 / _v2 / _v3 / _v4 over every byte (both nibbles: every E2M1 pair): BF16 elements
  // 2k, 2k + 1 of quarter p hold the low, high nibble of byte 4k + p.
  vector_fp4x2_e2m1_t pairs;
  asc_loadalign(pairs, codes);
  vector_bfloat16_t fp4[4];
  asc_e2m1x22bfloat16(fp4[0], pairs, asc_create_mask_b8(PAT_ALL));
  asc_e2m1x22bfloat16_v2(fp4[1], pairs, asc_create_mask_b8(PAT_ALL));
  asc_e2m1x22bfloat16_v3(fp4[2], pairs, asc_create_mask_b8(PAT_ALL));
  asc_e2m1x22bfloat16_v4(fp4[3], pairs, asc_create_mask_b8(PAT_ALL));
  for (auto& v : fp4) emit(v.e, 128);

  // 6d. asc_float2e4m3_rn / _sat, quarters _v2 .. _v4: x with specials in lanes 50..55 (+-inf, NaN, 500, the
  // overflow tie 464, a value below E4M3's smallest subnormal); lane i's code in byte `quarter` of its 32-bit lane.
  __ubuf__ float* sx = reinterpret_cast<float*>(ub + 16384);
  for (int i = 0; i < 64; ++i) sx[i] = x[i];
  const float specials[] = {__builtin_inff(), -__builtin_inff(), __builtin_nanf(""), 500.0f, 464.0f, 1e-4f};
  for (int i = 0; i < 6; ++i) sx[50 + i] = specials[i];
  vector_float s;
  asc_loadalign(s, sx);
  vector_fp8_e4m3fn_t narrowed[8];
  asc_float2e4m3_rn(narrowed[0], s, all32);
  asc_float2e4m3_rn_v2(narrowed[1], s, all32);
  asc_float2e4m3_rn_v3(narrowed[2], s, all32);
  asc_float2e4m3_rn_v4(narrowed[3], s, all32);
  asc_float2e4m3_rn_sat(narrowed[4], s, all32);
  asc_float2e4m3_rn_sat_v2(narrowed[5], s, all32);
  asc_float2e4m3_rn_sat_v3(narrowed[6], s, all32);
  asc_float2e4m3_rn_sat_v4(narrowed[7], s, all32);
  for (auto& v : narrowed) emit(v.e, 256);

  // 7. A load past the end of UB, and 8. a whole-register (NORM) load or store off the 32-byte grid, each stop
  // the launch with the op and offset named.
  auto report = [&](auto access) {
    launch.failed = false;
    if (sigsetjmp(core.exit_jmp, 1) == 0) {
      access();
      std::fprintf(stderr, "no error\n");
    } else {
      std::fprintf(stderr, "%s\n", launch.message);
    }
  };
  report([&] { (void)V::vlds_norm(reinterpret_cast<float*>(ub + sizeof ub - 128), 0); });
  report([&] { (void)V::vlds_norm(reinterpret_cast<float*>(ub + 16), 0); });
  report([&] { asc_storealign(reinterpret_cast<__ubuf__ float*>(ub + 4), r, all32); });
  return 0;
}
