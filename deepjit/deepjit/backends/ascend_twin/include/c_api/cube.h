// c_api/cube.h — the cube unit on the twin: asc_mmad (docs/zh/api/SIMD-API/C-API/cube_compute/asc_mmad.md),
// C[m, n] (+)= sum_k A[m, k] * B[k, n], products accumulated in FP32 (int32 for 8-bit integers) in L0C.
//
// Operand layouts (dav-3510: L0A Nz, L0B Zn, L0C Nz; C0 = 32 bytes / element size, M16 = m rounded up to
// 16, N16 = n rounded up to 16), element indices:
//   A(i, k) = L0A[(k / C0) * M16 * C0 + i * C0 + k % C0]
//   B(k, j) = L0B[(k / C0) * N16 * C0 + j * C0 + k % C0]
//   C(i, j) = L0C[(j / 16) * M16 * 16 + i * 16 + j % 16]
// which is where asc_copy_l12l0a/b put the fractals of a tile (datamove.h) and where asc_copy_l0c2gm/ub
// read them with loop_src_stride = M16. c_matrix_init_val = true starts from zero, false accumulates onto
// L0C; c_matrix_source = true (the bias table) is not implemented.
#pragma once

#include <cstring>
#include <type_traits>
#include <vector>

#include "dj_twin/runtime.h"
#include "dj_twin/types.h"

namespace dj_twin {

template <typename T>
inline float cube_value(const T& v) {
  if constexpr (std::is_same_v<T, bfloat16>) return bits_float(uint32_t(v.bits) << 16);
  else return float(v);
}

template <typename T>
inline constexpr bool is_int_input = std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>;
template <typename T>
inline constexpr bool is_fp4 = std::is_same_v<T, float4_e2m1x2> || std::is_same_v<T, float4_e1m2x2>;

// Element kk of row i of an operand in the L0 layout above (rows = M for A, N for B); 4-bit types
// pack two elements per byte (C0 = 64 elements).
template <typename T>
struct L0Operand {
  const T* base;
  uint32_t rows16;
  static constexpr uint32_t C0 = is_fp4<T> ? 64 : 32 / sizeof(T);
  size_t index(uint32_t i, uint32_t kk) const { return size_t(kk / C0) * rows16 * C0 + size_t(i) * C0 + kk % C0; }
  auto value(uint32_t i, uint32_t kk) const {
    if constexpr (is_fp4<T>) {
      size_t e = index(i, kk);
      return base[e / 2].get(int(e % 2));
    } else if constexpr (is_int_input<T>) {
      return int32_t(base[index(i, kk)]);
    } else {
      return cube_value(base[index(i, kk)]);
    }
  }
  size_t bytes(uint32_t k) const {
    size_t elems = size_t(rows16) * ((k + C0 - 1) / C0 * C0);
    return is_fp4<T> ? elems / 2 : elems * sizeof(T);
  }
};

// HF32 (CTRL bit 46, asc_enable_hf32 / asc_disable_hf32; bit 47 the round mode): FP32 operands are rounded
// to HF32 before the multiply, which on Ascend 950 keeps 10 mantissa bits (asc-devkit docs/zh/api/SIMD-API/
// 基础API/矩阵计算（ISASI）/Mmad计算/关键特性说明/HF32.md, figure mmad_hf32_950), ties to even (bit 47
// clear, the default) or away from zero (bit 47 set: asc_hf32_round_mode::NEAREST_AWAY, asc-devkit
// asc_set_hf32_round_mode.md, whose own example rounds 1 + 2^-11 to 1 + 2^-10 away and to 1 even).
// Products and sums stay FP32. Inf / NaN pass unchanged.
inline constexpr int kCtrlHf32Bit = 46, kCtrlHf32AwayBit = 47;
inline float round_hf32(float x, bool ties_away) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) == 0x7F800000u) return x;
  constexpr uint32_t kDropped = 13;  // 23 - 10 mantissa bits
  const uint32_t half = 1u << (kDropped - 1);
  u += ties_away ? half : half - 1 + ((u >> kDropped) & 1);
  u &= ~((1u << kDropped) - 1);
  return bits_float(u);
}

// C (+)= A x B with optional MX scales: scale(i, kk) of A at byte ((i / 16) * ceil(k / 64) + kk / 64) * 32 +
// (i % 16) * 2 + (kk / 32) % 2 of its scale buffer (likewise for B with j), as asc_copy_l12l0a_mx lays them out.
template <typename C, typename T>
inline void mmad(C* c, const T* a, const T* b, uint16_t m, uint16_t k, uint16_t n, bool c_matrix_source,
                 bool init_zero, const uint8_t* scale_a, const uint8_t* scale_b, const char* op) {
  if (m == 0 || k == 0 || n == 0) return;  // "the instruction is not executed"
  if (c_matrix_source) fail("%s: c_matrix_source (bias table) is not implemented on the twin", op);
  static_assert(std::is_same_v<C, float> || std::is_same_v<C, int32_t>, "L0C holds float or int32_t");
  const uint32_t M16 = (m + 15u) / 16 * 16, N16 = (n + 15u) / 16 * 16;
  L0Operand<T> A{a, M16}, B{b, N16};
  check(Mem::L0A, a, A.bytes(k), op);
  check(Mem::L0B, b, B.bytes(k), op);
  check(Mem::L0C, c, size_t(M16) * N16 * sizeof(C), op);
  const uint32_t pairs = (k + 63u) / 64;
  if (scale_a) {
    size_t end_a = size_t(scale_a - core().mx_scale[0]) + size_t(M16 / 16) * pairs * 32;
    size_t end_b = size_t(scale_b - core().mx_scale[1]) + size_t(N16 / 16) * pairs * 32;
    if (end_a > sizeof core().mx_scale[0] || end_b > sizeof core().mx_scale[1])
      fail("%s: the MX scales of this tile end at %zu / %zu, past the %zu-byte scale buffers", op, end_a, end_b,
           sizeof core().mx_scale[0]);
  }
  auto scale = [&](const uint8_t* s, uint32_t row, uint32_t kk) {
    return decode_e8m0(s[(size_t(row / 16) * pairs + kk / 64) * 32 + (row % 16) * 2 + (kk / 32) % 2]);
  };
  using Acc = std::conditional_t<std::is_same_v<C, float>, float, int32_t>;
  const uint64_t ctrl = core().ctrl;
  const bool hf32 = std::is_same_v<T, float> && ((ctrl >> kCtrlHf32Bit) & 1);
  const bool hf32_away = (ctrl >> kCtrlHf32AwayBit) & 1;
  auto operand = [&](float v) { return hf32 ? round_hf32(v, hf32_away) : v; };
  // Gather A row-major and B column-major once (scales applied), then one dot product per element.
  std::vector<Acc> av(size_t(m) * k), bv(size_t(n) * k);
  for (uint32_t i = 0; i < m; ++i)
    for (uint32_t kk = 0; kk < k; ++kk)
      av[size_t(i) * k + kk] = scale_a ? Acc(A.value(i, kk) * scale(scale_a, i, kk)) : Acc(operand(A.value(i, kk)));
  for (uint32_t j = 0; j < n; ++j)
    for (uint32_t kk = 0; kk < k; ++kk)
      bv[size_t(j) * k + kk] = scale_b ? Acc(B.value(j, kk) * scale(scale_b, j, kk)) : Acc(operand(B.value(j, kk)));
  for (uint32_t i = 0; i < m; ++i) {
    const Acc* ar = av.data() + size_t(i) * k;
    for (uint32_t j = 0; j < n; ++j) {
      const Acc* br = bv.data() + size_t(j) * k;
      Acc s = 0;
      for (uint32_t kk = 0; kk < k; ++kk) s += ar[kk] * br[kk];
      C& out = c[size_t(j / 16) * M16 * 16 + size_t(i) * 16 + j % 16];
      out = init_zero ? C(s) : C(out + s);
    }
  }
  // The cube's cost geometry, as TileLang 0.1.15's A5 estimator charges an mmad (src/ascend/transform/
  // estimate_latency.cc CubeOperations): M and N padded to 16, K to the operand's K group (256 bits: 16
  // for 16-bit, 32 for 8-bit, 64 for 4-bit operands; FP32 1, HF32 8), and an MX mmad's larger of M and N
  // at least 48 (cube_mx_min_mn).
  const int bits = is_fp4<T> ? 4 : int(8 * sizeof(T));
  const uint64_t k_group = bits == 32 ? (hf32 ? 8 : 1) : uint64_t(256 / bits);
  const uint64_t m_al = M16, n_al = N16, k_al = (k + k_group - 1) / k_group * k_group;
  const uint64_t charged = scale_a ? std::min(m_al, n_al) * std::max<uint64_t>({m_al, n_al, 48}) * k_al
                                   : m_al * n_al * k_al;
  const CubeMode mode = scale_a ? CubeMode::Mx : hf32 ? CubeMode::Hf32 : CubeMode::Plain;
  count_cube_macs(uint64_t(m) * n * k, bits, charged, mode);
}

}  // namespace dj_twin

// (c, a, b, left_height m, n_dim k, right_width n, unit_flag, k_direction_align, c_matrix_source,
// c_matrix_init_val): the dav-3510 form TileLang's gemm.h calls. unit_flag only overlaps the FIX pipe
// with the cube on the chip; in program order it changes nothing.
template <typename C, typename T>
inline void asc_mmad(C* c_matrix, T* a_matrix, T* b_matrix, uint16_t left_height, uint16_t n_dim, uint16_t right_width,
                     uint8_t unit_flag, bool k_direction_align, bool c_matrix_source, bool c_matrix_init_val) {
  (void)unit_flag;
  (void)k_direction_align;
  ::dj_twin::mmad(c_matrix, a_matrix, b_matrix, left_height, n_dim, right_width, c_matrix_source, c_matrix_init_val,
                  nullptr, nullptr, "asc_mmad");
}

// MX block-scaled form (asc_mmad_mx.md): FP8 / FP4 operands, each 32 K-elements of a row scaled by
// an E8M0 power of two loaded by asc_copy_l12l0a_mx / asc_copy_l12l0b_mx. disable_gemv = false
// (GEMV mode, m = 1, A read as ND) is not implemented.
template <typename C, typename T>
inline void asc_mmad_mx(C* c_matrix, T* a_matrix, T* b_matrix, uint16_t left_height, uint16_t n_dim,
                        uint16_t right_width, uint8_t unit_flag, bool disable_gemv, bool c_matrix_source,
                        bool c_matrix_init_val) {
  using namespace dj_twin;
  (void)unit_flag;
  static_assert(is_fp4<T> || std::is_same_v<T, float8_e4m3> || std::is_same_v<T, float8_e5m2>,
                "asc_mmad_mx takes FP8 (E4M3 / E5M2) or FP4 (E2M1 / E1M2 pairs) operands");
  if (!disable_gemv) fail("asc_mmad_mx: GEMV mode (disable_gemv = false) is not implemented on the twin");
  Core& c = core();
  int64_t off_a = onchip_offset(Mem::L0A, a_matrix), off_b = onchip_offset(Mem::L0B, b_matrix);
  if (off_a % 16 || off_b % 16 || off_a < 0 || off_b < 0)
    fail("asc_mmad_mx: L0A / L0B operand offsets %lld / %lld must be non-negative multiples of 16", (long long)off_a,
         (long long)off_b);
  mmad(c_matrix, a_matrix, b_matrix, left_height, n_dim, right_width, c_matrix_source, c_matrix_init_val,
       c.mx_scale[0] + off_a / 16, c.mx_scale[1] + off_b / 16, "asc_mmad_mx");
}

// ---- cube modes (CTRL bits; asc-devkit impl/c_api/instr_impl/npu_arch_3510/cube_compute_impl.h) ----------
enum class asc_hf32_round_mode : uint8_t {
  NEAREST_AWAY = 0,
  NEAREST_EVEN = 1,
  NEAREST_ZERO = NEAREST_AWAY  // asc-devkit's old name for the same mode
};
namespace dj_twin {
inline void set_ctrl_bit(int bit, bool on) {
  poll();
  uint64_t& ctrl = core().ctrl;
  ctrl = on ? (ctrl | (uint64_t(1) << bit)) : (ctrl & ~(uint64_t(1) << bit));
}
}  // namespace dj_twin
inline void asc_enable_hf32() { ::dj_twin::set_ctrl_bit(::dj_twin::kCtrlHf32Bit, true); }
inline void asc_disable_hf32() { ::dj_twin::set_ctrl_bit(::dj_twin::kCtrlHf32Bit, false); }
inline void asc_set_fp32_mode() { ::dj_twin::set_ctrl_bit(::dj_twin::kCtrlHf32Bit, false); }
inline void asc_set_hf32_round_mode(asc_hf32_round_mode mode) {
  ::dj_twin::set_ctrl_bit(::dj_twin::kCtrlHf32AwayBit, mode == asc_hf32_round_mode::NEAREST_AWAY);
}
inline void asc_enable_hf32_trans(uint32_t mode) { ::dj_twin::set_ctrl_bit(::dj_twin::kCtrlHf32AwayBit, mode != 0); }
// Which of M / N the cube walks first (CTRL bit 51) changes only the order of independent outputs.
inline void asc_set_mmad_direction_m() { ::dj_twin::set_ctrl_bit(51, false); }
inline void asc_set_mmad_direction_n() { ::dj_twin::set_ctrl_bit(51, true); }
