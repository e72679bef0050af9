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

namespace dj_twin {

template <typename T>
inline float cube_value(const T& v) {
  if constexpr (std::is_same_v<T, bfloat16>) return bits_float(uint32_t(v.bits) << 16);
  else return float(v);
}

template <typename T>
inline constexpr bool is_int_input = std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>;

template <typename C, typename T>
inline void mmad(C* c, const T* a, const T* b, uint16_t m, uint16_t k, uint16_t n, bool c_matrix_source,
                 bool init_zero, const char* op) {
  if (m == 0 || k == 0 || n == 0) return;  // "the instruction is not executed"
  if (c_matrix_source) fail("%s: c_matrix_source (bias table) is not implemented on the twin", op);
  static_assert(std::is_same_v<C, float> || std::is_same_v<C, int32_t>, "L0C holds float or int32_t");
  constexpr uint32_t C0 = 32 / sizeof(T);
  const uint32_t M16 = (m + 15u) / 16 * 16, N16 = (n + 15u) / 16 * 16, K0 = (k + C0 - 1) / C0 * C0;
  check(Mem::L0A, a, size_t(M16) * K0 * sizeof(T), op);
  check(Mem::L0B, b, size_t(N16) * K0 * sizeof(T), op);
  check(Mem::L0C, c, size_t(M16) * N16 * sizeof(C), op);
  using Acc = std::conditional_t<std::is_same_v<C, float>, float, int32_t>;
  // Gather A row-major and B column-major once, then one dot product per output element.
  std::vector<Acc> av(size_t(m) * k), bv(size_t(n) * k);
  for (uint32_t i = 0; i < m; ++i)
    for (uint32_t kk = 0; kk < k; ++kk) {
      const T& x = a[size_t(kk / C0) * M16 * C0 + size_t(i) * C0 + kk % C0];
      if constexpr (is_int_input<T>) av[size_t(i) * k + kk] = Acc(x);
      else av[size_t(i) * k + kk] = cube_value(x);
    }
  for (uint32_t j = 0; j < n; ++j)
    for (uint32_t kk = 0; kk < k; ++kk) {
      const T& x = b[size_t(kk / C0) * N16 * C0 + size_t(j) * C0 + kk % C0];
      if constexpr (is_int_input<T>) bv[size_t(j) * k + kk] = Acc(x);
      else bv[size_t(j) * k + kk] = cube_value(x);
    }
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
  count_cube_macs(uint64_t(m) * n * k, int(8 * sizeof(T)));
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
                  "asc_mmad");
}
