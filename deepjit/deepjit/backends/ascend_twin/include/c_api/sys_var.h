// c_api/sys_var.h — system variables and special registers on the twin (docs/zh/api/SIMD-API/C-API/
// sys_var/*.md): block and sub-block indices, core type tests, CTRL and the MTE2 NZ parameter
// register. `ASC_IS_AIC` / `ASC_IS_AIV` are parenthesised so `if ASC_IS_AIC {` works.
#pragma once

#include <chrono>

#include "dj_twin/runtime.h"

#define ASC_IS_AIC (::dj_twin::is_aic())
#define ASC_IS_AIV (::dj_twin::is_aiv())

inline void asc_init() { ::dj_twin::poll(); }

inline int64_t asc_get_block_idx() { return ::dj_twin::core().block_idx; }
inline int64_t asc_get_block_num() { return ::dj_twin::core().num_blocks; }
// Vector cores of a mixed block are sub-blocks 0 and 1; a vector-only kernel has one per block.
inline int64_t asc_get_sub_block_id() { return ::dj_twin::core().sub_block; }
inline int64_t asc_get_sub_block_num() {
  return ::dj_twin::core().launch->kind == ::dj_twin::KernelKind::Mix ? 2 : 1;
}
// A physical core number: blocks of a wave occupy distinct cores.
inline int64_t asc_get_core_id() {
  const ::dj_twin::Core& c = ::dj_twin::core();
  int cores = c.kind == ::dj_twin::CoreKind::AIC ? ::dj_twin::kNumAic : ::dj_twin::kNumAiv;
  int per_block = c.kind == ::dj_twin::CoreKind::AIV && c.launch->kind == ::dj_twin::KernelKind::Mix ? 2 : 1;
  return (int64_t(c.block_idx) * per_block + c.sub_block) % cores;
}
inline int64_t asc_get_system_cycle() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
inline int64_t asc_get_ctrl() { return int64_t(::dj_twin::core().ctrl); }
inline void asc_set_ctrl(uint64_t config) { ::dj_twin::core().ctrl = config; }
constexpr int64_t asc_get_vf_len() { return 256; }  // bytes per vector register on dav-3510

// MTE2_NZ_PARA: [15:0] ND matrix count, [31:16] destination N stride, [47:32] C0 column stride,
// [63:48] NZ matrix stride (strides in 32-byte units; asc_set_gm2l1_nz_para.md).
inline void asc_set_gm2l1_nz_para(uint64_t config) { ::dj_twin::core().gm2l1_nz_para = config; }
inline void asc_set_gm2l1_nz_para(uint16_t nd_num, uint16_t dst_n_stride, uint16_t dst_c0_stride,
                                  uint16_t dst_nz_matrix_stride) {
  asc_set_gm2l1_nz_para(uint64_t(nd_num) | (uint64_t(dst_n_stride) << 16) | (uint64_t(dst_c0_stride) << 32) |
                        (uint64_t(dst_nz_matrix_stride) << 48));
}
