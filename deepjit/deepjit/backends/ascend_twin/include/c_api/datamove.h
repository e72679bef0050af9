// c_api/datamove.h — the data movers on the twin: GM <-> UB (MTE2 / MTE3), GM -> L1 with ND->NZ
// (MTE2), UB -> L1 (MTE3), L1 -> L0A/L0B (MTE1) and L0C -> GM/UB (FIX pipe), with the dav-3510
// layouts from docs/zh/api/SIMD-API/C-API/cube_datamove/*_arch_3510.md and the argument orders
// TileLang 0.1.15's codegen emits (src/ascend/codegen/codegen_ascend.cc).
//
// Layouts (C0 = 32 bytes, a fractal = 16 rows x C0 = 512 bytes):
//   L1 "NZ" after nd2nz: element (r, c) of a matrix at byte
//     (c / C0) * c0_stride * 32 + r * n_stride * 32 + (c % C0) * size  (strides from MTE2_NZ_PARA);
//     columns past D up to the next C0 boundary are zero-filled.
//   L0A / L0B (2D load, non-transposed): fractal (im, ik) of the source window goes to
//     dst + (ik * dst_stride + im) * 512, read from src + ((k_start + ik) * src_stride + m_start + im) * 512.
//   L0C (mmad output, see cube.h): element (m, n) at float index (n / 16) * src_stride * 16 + m * 16 + n % 16,
//     src_stride in rows (units of 16 elements) as asc_copy_l0c2gm's loop_src_stride.
// Every byte range is checked (dj_twin::check / check_gm) and counted per pipe and per route.
#pragma once

#include <cstring>
#include <type_traits>

#include "c_api/atomic.h"
#include "c_api/utils_enum.h"
#include "dj_twin/runtime.h"

namespace dj_twin {

// A range in another core of this block (the AIC's L1 seen from an AIV, an AIV's UB seen from the AIC):
// `p` is an address relative to the current core's (possibly absent) memory `m`.
inline uint8_t* peer_range(Core* peer, Mem m, const void* p, size_t bytes, const char* op) {
  Core& c = core();
  int64_t off = onchip_offset(m, p);
  if (!peer) fail("%s: this block has no core owning the destination %s", op, kMemName[int(m)]);
  if (off < 0 || uint64_t(off) + bytes > kMemSize[int(m)])
    fail("%s: buffer %s of %s offset %lld, %zu bytes, is outside [0, %zu)", op, kMemName[int(m)], peer->core_name(),
         (long long)off, bytes, kMemSize[int(m)]);
  (void)c;
  return peer->mem[int(m)] + off;
}

inline void check_align(const void* p, size_t align, Mem m, const char* op) {
  int64_t off = onchip_offset(m, p);
  if (off % int64_t(align)) fail("%s: %s address offset %lld is not %zu-byte aligned", op, kMemName[int(m)],
                                 (long long)off, align);
}

template <typename T>
inline void fill_elems(uint8_t* dst, size_t n, uint32_t value) {
  for (size_t i = 0; i < n; ++i) std::memcpy(dst + i * sizeof(T), &value, sizeof(T));
}

}  // namespace dj_twin

// ---- GM <-> UB ------------------------------------------------------------------------------------

inline void asc_set_copy_pad_val(uint32_t value) { ::dj_twin::core().pad_val = value; }
inline void asc_set_copy_pad_val(uint16_t value) { ::dj_twin::core().pad_val = value; }
inline void asc_set_copy_pad_val(uint8_t value) { ::dj_twin::core().pad_val = value; }

// n_burst rows of len_burst bytes; row i read at src + i * src_stride and written at dst + i * dst_stride
// (strides in bytes, row to row), preceded by left_padding_num and followed by right_padding_num
// elements of the pad value (asc_set_copy_pad_val) when pad_enable is set.
template <typename T>
inline void asc_copy_gm2ub_align(T* dst, T* src, uint16_t n_burst, uint32_t len_burst, uint8_t left_padding_num,
                                 uint8_t right_padding_num, uint8_t pad_enable, asc_load_l2_cache_mode,
                                 uint64_t src_stride, uint64_t dst_stride) {
  using namespace dj_twin;
  const char* op = "asc_copy_gm2ub_align";
  begin_gm_move();
  check_align(dst, 32, Mem::UB, op);
  auto* d = reinterpret_cast<uint8_t*>(dst);
  auto* s = reinterpret_cast<const uint8_t*>(src);
  size_t left = size_t(left_padding_num) * sizeof(T), right = size_t(right_padding_num) * sizeof(T);
  for (uint32_t i = 0; i < n_burst; ++i) {
    uint8_t* row = d + i * dst_stride;
    check(Mem::UB, row, left + len_burst + right, op);
    check_gm(s + i * src_stride, len_burst, op);
    touch_gm(s + i * src_stride, len_burst, false);
    if (pad_enable) fill_elems<T>(row, left_padding_num, core().pad_val);
    std::memcpy(row + left, s + i * src_stride, len_burst);
    if (pad_enable) fill_elems<T>(row + left + len_burst, right_padding_num, core().pad_val);
  }
  count_rows_move(Route::GM_TO_UB, n_burst, len_burst,  // one run only when contiguous at both ends
                  src_stride == len_burst && dst_stride == left + len_burst + right);
}

// The C API's plain form (one burst, no padding).
template <typename T>
inline void asc_copy_gm2ub_align(T* dst, T* src, uint32_t size) {
  asc_copy_gm2ub_align(dst, src, 1, size, 0, 0, 0, asc_load_l2_cache_mode::NORMAL_FIRST_VICTIM, size, size);
}

// n_burst rows of len_burst bytes from src + i * src_stride to dst + i * dst_stride (bytes).
template <typename T>
inline void asc_copy_ub2gm_align(T* dst, T* src, uint16_t n_burst, uint32_t len_burst, asc_store_l2_cache_mode,
                                 uint64_t dst_stride, uint64_t src_stride) {
  using namespace dj_twin;
  const char* op = "asc_copy_ub2gm_align";
  begin_gm_move();
  check_align(src, 32, Mem::UB, op);
  auto* d = reinterpret_cast<uint8_t*>(dst);
  auto* s = reinterpret_cast<const uint8_t*>(src);
  for (uint32_t i = 0; i < n_burst; ++i) {
    check(Mem::UB, s + i * src_stride, len_burst, op);
    check_gm(d + i * dst_stride, len_burst, op);
    touch_gm(d + i * dst_stride, len_burst, true);
    gm_store(d + i * dst_stride, s + i * src_stride, len_burst, op);
  }
  count_rows_move(Route::UB_TO_GM, n_burst, len_burst, dst_stride == len_burst && src_stride == len_burst);
}

template <typename T>
inline void asc_copy_ub2gm_align(T* dst, T* src, uint32_t size) {
  asc_copy_ub2gm_align(dst, src, 1, size, asc_store_l2_cache_mode::NORMAL_FIRST_VICTIM, size, size);
}

// Plain contiguous copies of `size` bytes (asc_copy_gm2ub / asc_copy_ub2gm).
inline void asc_copy_gm2ub(void* dst, void* src, uint32_t size) {
  asc_copy_gm2ub_align(static_cast<uint8_t*>(dst), static_cast<uint8_t*>(src), size);
}
inline void asc_copy_ub2gm(void* dst, void* src, uint32_t size) {
  asc_copy_ub2gm_align(static_cast<uint8_t*>(dst), static_cast<uint8_t*>(src), size);
}

// ---- UB -> L1 (a vector core writes its block's cube-core L1) ------------------------------------
// n_burst bursts of len_burst 32-byte blocks; the source advances len_burst + src_gap blocks per
// burst, the destination len_burst + dst_gap.
inline void asc_copy_ub2l1(void* dst, void* src, uint16_t n_burst, uint16_t len_burst, uint16_t src_gap,
                           uint16_t dst_gap) {
  using namespace dj_twin;
  const char* op = "asc_copy_ub2l1";
  Core& c = core();
  auto* s = static_cast<uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  size_t burst = size_t(len_burst) * 32;
  for (uint32_t i = 0; i < n_burst; ++i) {
    const uint8_t* from = s + i * (size_t(len_burst) + src_gap) * 32;
    check(Mem::UB, from, burst, op);
    uint8_t* to = c.kind == CoreKind::AIC ? d + i * (size_t(len_burst) + dst_gap) * 32
                                          : peer_range(c.block->aic, Mem::L1, d + i * (size_t(len_burst) + dst_gap) * 32,
                                                       burst, op);
    if (c.kind == CoreKind::AIC) check(Mem::L1, to, burst, op);
    std::memcpy(to, from, burst);
  }
  count_rows_move(Route::UB_TO_L1, n_burst, burst, src_gap == 0 && dst_gap == 0);
}

// ---- L1 -> UB (the cube core writes a vector core's UB; asc_copy_l12ub.md, PIPE_MTE1) -------------
// The only raw L1 read-back on dav-3510 (asc_copy_l12gm.md:
// 950 does not support L1 -> GM). n_burst bursts of len_burst 32-byte blocks into the UB of vector core
// `sub_blockid`; src_gap / dst_gap 32-byte blocks between the end of one burst and the next.
inline void asc_copy_l12ub(void* dst, void* src, bool sub_blockid, uint16_t n_burst, uint16_t len_burst,
                           uint16_t src_gap, uint16_t dst_gap) {
  using namespace dj_twin;
  const char* op = "asc_copy_l12ub";
  Core& c = core();
  if (c.kind != CoreKind::AIC) fail("%s: only the cube core owns L1 (issue it under ASC_IS_AIC)", op);
  auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  size_t burst = size_t(len_burst) * 32;
  for (uint32_t i = 0; i < n_burst; ++i) {
    const uint8_t* from = s + i * (size_t(len_burst) + src_gap) * 32;
    check(Mem::L1, from, burst, op);
    uint8_t* to = peer_range(c.block->aiv[sub_blockid ? 1 : 0], Mem::UB, d + i * (size_t(len_burst) + dst_gap) * 32,
                             burst, op);
    std::memcpy(to, from, burst);
  }
  count_move(Route::L1_TO_UB, size_t(n_burst) * burst);
}
inline void asc_copy_l12ub_sync(void* dst, void* src, bool sub_blockid, uint16_t n_burst, uint16_t len_burst,
                                uint16_t src_gap, uint16_t dst_gap) {
  asc_copy_l12ub(dst, src, sub_blockid, n_burst, len_burst, src_gap, dst_gap);
}

// ---- GM -> L1 with ND -> NZ / DN -> NZ -------------------------------------------------------------

namespace dj_twin {

// n_value rows x d_value columns; source element (r, c) at src_of(r, c); nz_para gives the layout.
template <typename T, typename SrcOf>
inline void gm2l1_to_nz(T* dst, uint16_t n_value, uint32_t d_value, uint64_t loop4_src_stride, bool smallc0_en,
                        const char* op, SrcOf src_of) {
  static_assert(sizeof(T) <= 4, "ND->NZ element types are 1, 2 or 4 bytes");
  if (smallc0_en) fail("%s: smallc0_en (SmallC0 mode) is not implemented on the twin", op);
  Core& c = core();
  const uint64_t para = c.gm2l1_nz_para;
  const uint32_t nd_num = uint32_t(para & 0xFFFF);
  const uint64_t n_stride = ((para >> 16) & 0xFFFF) * 32, c0_stride = ((para >> 32) & 0xFFFF) * 32,
                 matrix_stride = ((para >> 48) & 0xFFFF) * 32;
  constexpr uint32_t C0 = 32 / sizeof(T);
  const uint32_t col_blocks = (d_value + C0 - 1) / C0;
  auto* d = reinterpret_cast<uint8_t*>(dst);
  check_align(dst, 32, Mem::L1, op);
  begin_gm_move();
  for (uint32_t j = 0; j < nd_num; ++j) {
    for (uint32_t r = 0; r < n_value; ++r) {
      for (uint32_t b = 0; b < col_blocks; ++b) {
        uint8_t* row = d + j * matrix_stride + b * c0_stride + r * n_stride;
        check(Mem::L1, row, 32, op);
        for (uint32_t e = 0; e < C0; ++e) {
          uint32_t col = b * C0 + e;
          if (col < d_value) {
            const uint8_t* from = src_of(j * loop4_src_stride, r, col);
            check_gm(from, sizeof(T), op);
            touch_gm(from, sizeof(T), false);
            std::memcpy(row + e * sizeof(T), from, sizeof(T));
          } else {
            std::memset(row + e * sizeof(T), 0, sizeof(T));
          }
        }
      }
    }
  }
  count_move(Route::GM_TO_L1, size_t(nd_num) * n_value * d_value * sizeof(T));
}

}  // namespace dj_twin

// ND source: row r at src + r * loop1_src_stride bytes, D elements contiguous.
template <typename T>
inline void asc_copy_gm2l1_nd2nz(T* dst, T* src, uint64_t loop1_src_stride, asc_load_l2_cache_mode, uint16_t n_value,
                                 uint32_t d_value, uint64_t loop4_src_stride, bool smallc0_en) {
  auto* s = reinterpret_cast<const uint8_t*>(src);
  ::dj_twin::gm2l1_to_nz(dst, n_value, d_value, loop4_src_stride, smallc0_en, "asc_copy_gm2l1_nd2nz",
                         [&](uint64_t base, uint32_t r, uint32_t c) {
                           return s + base + r * loop1_src_stride + uint64_t(c) * sizeof(T);
                         });
}

// DN source (the transposed matrix in GM): element (r, c) at src + c * loop1_src_stride + r * size,
// i.e. the N rows of the NZ result are contiguous in GM.
template <typename T>
inline void asc_copy_gm2l1_dn2nz(T* dst, T* src, uint64_t loop1_src_stride, asc_load_l2_cache_mode, uint16_t n_value,
                                 uint32_t d_value, uint64_t loop4_src_stride, bool smallc0_en) {
  auto* s = reinterpret_cast<const uint8_t*>(src);
  ::dj_twin::gm2l1_to_nz(dst, n_value, d_value, loop4_src_stride, smallc0_en, "asc_copy_gm2l1_dn2nz",
                         [&](uint64_t base, uint32_t r, uint32_t c) {
                           return s + base + uint64_t(c) * loop1_src_stride + uint64_t(r) * sizeof(T);
                         });
}

// ---- L1 -> L0A / L0B (2D, non-transposed: fractals copied as they are) ---------------------------

namespace dj_twin {

inline void l1_to_l0(Mem dst_mem, void* dst, const void* src, uint16_t m_start, uint16_t k_start, uint8_t m_step,
                     uint8_t k_step, int32_t src_stride, uint16_t dst_stride, const char* op) {
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  check_align(dst, 512, dst_mem, op);
  for (uint32_t ik = 0; ik < k_step; ++ik) {
    for (uint32_t im = 0; im < m_step; ++im) {
      const uint8_t* from = s + (int64_t(k_start + ik) * src_stride + (m_start + im)) * 512;
      uint8_t* to = d + (size_t(ik) * dst_stride + im) * 512;
      check(Mem::L1, from, 512, op);
      check(dst_mem, to, 512, op);
      std::memcpy(to, from, 512);
    }
  }
  count_move(Route::L1_TO_L0, size_t(m_step) * k_step * 512);
}

}  // namespace dj_twin

template <typename T>
inline void asc_copy_l12l0a(T* dst, T* src, uint16_t m_start_position, uint16_t k_start_position, uint8_t m_step,
                            uint8_t k_step, int16_t src_stride, uint16_t dst_stride) {
  ::dj_twin::l1_to_l0(::dj_twin::Mem::L0A, dst, src, m_start_position, k_start_position, m_step, k_step, src_stride,
                      dst_stride, "asc_copy_l12l0a");
}

template <typename T>
inline void asc_copy_l12l0b(T* dst, T* src, uint16_t m_start_position, uint16_t k_start_position, uint8_t m_step,
                            uint8_t k_step, int16_t src_stride, uint16_t dst_stride) {
  ::dj_twin::l1_to_l0(::dj_twin::Mem::L0B, dst, src, m_start_position, k_start_position, m_step, k_step, src_stride,
                      dst_stride, "asc_copy_l12l0b");
}

// ---- L1 -> L0A / L0B, transposed ------------------------------------------------------------------
// The source window is rows [m_start * 16, +m_step * 16) x columns [k_start * C0, +k_step * C0) of an
// L1 NZ matrix (column blocks src_stride fractals apart); its transpose lands in the destination's
// L0 layout, the source's row direction becoming the destination's K (C0) direction:
// source element (r, c) (window-relative) goes to byte ((r / C0) * dst_stride + c / 16) * 512 + (c % 16) * 32 +
// (r % C0) * size. For 16-bit types this is "each 16 x 16 fractal (im, ik) transposed into
// dst + (im * dst_stride + ik) * 512", as TileLang's NN GEMM lowering uses it.

namespace dj_twin {

template <typename T>
inline void l1_to_l0_transpose(Mem dst_mem, T* dst, const T* src, uint16_t m_start, uint16_t k_start, uint8_t m_step,
                               uint8_t k_step, int32_t src_stride, uint16_t dst_stride, const char* op) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4, "transposed loads take 8/16/32-bit types");
  constexpr uint32_t C0 = 32 / sizeof(T);
  if (sizeof(T) == 1 && m_step % 2) fail("%s: 8-bit transposed loads need an even m_step, got %d", op, m_step);
  if (sizeof(T) == 4 && k_step % 2) fail("%s: 32-bit transposed loads need an even k_step, got %d", op, k_step);
  auto* d = reinterpret_cast<uint8_t*>(dst);
  auto* s = reinterpret_cast<const uint8_t*>(src);
  check_align(dst, 512, dst_mem, op);
  const uint32_t rows = uint32_t(m_step) * 16, cols = uint32_t(k_step) * C0;
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t c = 0; c < cols; ++c) {
      uint32_t sr = m_start * 16u + r, sc = k_start * C0 + c;
      const uint8_t* from = s + int64_t(sc / C0) * src_stride * 512 + sr * 32 + (sc % C0) * sizeof(T);
      uint8_t* to = d + (size_t(r / C0) * dst_stride + c / 16) * 512 + (c % 16) * 32 + (r % C0) * sizeof(T);
      check(Mem::L1, from, sizeof(T), op);
      check(dst_mem, to, sizeof(T), op);
      std::memcpy(to, from, sizeof(T));
    }
  count_move(Route::L1_TO_L0, size_t(rows) * cols * sizeof(T));
}

}  // namespace dj_twin

template <typename T>
inline void asc_copy_l12l0a_transpose(T* dst, T* src, uint16_t m_start_position, uint16_t k_start_position,
                                      uint8_t m_step, uint8_t k_step, int16_t src_stride, uint16_t dst_stride) {
  ::dj_twin::l1_to_l0_transpose(::dj_twin::Mem::L0A, dst, src, m_start_position, k_start_position, m_step, k_step,
                                src_stride, dst_stride, "asc_copy_l12l0a_transpose");
}

template <typename T>
inline void asc_copy_l12l0b_transpose(T* dst, T* src, uint16_t m_start_position, uint16_t k_start_position,
                                      uint8_t m_step, uint8_t k_step, int16_t src_stride, uint16_t dst_stride) {
  ::dj_twin::l1_to_l0_transpose(::dj_twin::Mem::L0B, dst, src, m_start_position, k_start_position, m_step, k_step,
                                src_stride, dst_stride, "asc_copy_l12l0b_transpose");
}

// ---- L1 -> L0A / L0B MX scales (asc_copy_l12l0a_mx.md) ----------------------------------------
// A scale fractal is 32 bytes: 16 rows x one int16 pair of E8M0 scales (the scales of K elements
// [64p, 64p + 32) and [64p + 32, 64p + 64) of each row, low byte first). Source fractal (x, y) at
// src + ((x_start + x) * src_stride + y_start + y) * 32, destination at the scale address
// dst * 16 (the data tile's L0 address / 16) + (x * dst_stride + y) * 32.

namespace dj_twin {

inline void l1_to_l0_mx(int which, uint64_t dst, const void* src, uint16_t x_start, uint16_t y_start, uint8_t x_step,
                        uint8_t y_step, uint16_t src_stride, uint16_t dst_stride, const char* op) {
  Core& c = core();
  Mem mem = which == 0 ? Mem::L0A : Mem::L0B;
  int64_t base = int64_t(dst * 16) - int64_t(reinterpret_cast<uintptr_t>(c.mem[int(mem)]));
  if (base < 0 || base % 16) fail("%s: dst %llu is not an %s address / 16", op, (unsigned long long)dst,
                                  kMemName[int(mem)]);
  int64_t scale_base = base / 16;
  auto* s = static_cast<const uint8_t*>(src);
  for (uint32_t x = 0; x < x_step; ++x)
    for (uint32_t y = 0; y < y_step; ++y) {
      const uint8_t* from = s + (size_t(x_start + x) * src_stride + y_start + y) * 32;
      int64_t to = scale_base + int64_t(size_t(x) * dst_stride + y) * 32;
      check(Mem::L1, from, 32, op);
      if (to < 0 || to + 32 > int64_t(sizeof c.mx_scale[0]))
        fail("%s: MX scale offset %lld, 32 bytes, is outside the %s scale buffer [0, %zu)", op, (long long)to,
             kMemName[int(mem)], sizeof c.mx_scale[0]);
      std::memcpy(c.mx_scale[which] + to, from, 32);
    }
  const size_t bytes = size_t(x_step) * y_step * 32;
  count_move(Route::L1_TO_L0, bytes, bytes, MoveVariant::MxScales);
}

}  // namespace dj_twin

inline void asc_copy_l12l0a_mx(uint64_t dst, fp8_e8m0_t* src, uint16_t x_start_pos, uint16_t y_start_pos,
                               uint8_t x_step, uint8_t y_step, uint16_t src_stride, uint16_t dst_stride) {
  ::dj_twin::l1_to_l0_mx(0, dst, src, x_start_pos, y_start_pos, x_step, y_step, src_stride, dst_stride,
                         "asc_copy_l12l0a_mx");
}
inline void asc_copy_l12l0b_mx(uint64_t dst, fp8_e8m0_t* src, uint16_t x_start_pos, uint16_t y_start_pos,
                               uint8_t x_step, uint8_t y_step, uint16_t src_stride, uint16_t dst_stride) {
  ::dj_twin::l1_to_l0_mx(1, dst, src, x_start_pos, y_start_pos, x_step, y_step, src_stride, dst_stride,
                         "asc_copy_l12l0b_mx");
}

// ---- filling L1 / L0A / L0B (asc_fill_l1.md, struct/asc_fill_value_config.md) -------------------
// repeat iterations of blk_num blocks (32 B in L1, 512 B in L0A/L0B), dst_gap blocks between
// iterations; each element gets value's low bytes (a uint32_t value) or value converted (a half).
struct asc_fill_value_config {
  uint64_t repeat = 0, blk_num = 0, dst_gap = 0;
};

namespace dj_twin {

template <typename T, typename V>
inline void fill(Mem m, T* dst, V value, const asc_fill_value_config& config, const char* op) {
  const size_t block = m == Mem::L1 ? 32 : 512;
  uint8_t elem[sizeof(T)];
  if constexpr (std::is_same_v<V, uint32_t>) {
    std::memcpy(elem, &value, sizeof(T) < 4 ? sizeof(T) : 4);
  } else {
    T converted = T(float(value));
    std::memcpy(elem, &converted, sizeof(T));
  }
  auto* d = reinterpret_cast<uint8_t*>(dst);
  for (uint64_t r = 0; r < config.repeat; ++r) {
    uint8_t* row = d + r * (config.blk_num + config.dst_gap) * block;
    check(m, row, config.blk_num * block, op);
    for (size_t i = 0; i < config.blk_num * block; i += sizeof(T)) std::memcpy(row + i, elem, sizeof(T));
  }
  count_move(Route::FILL, config.repeat * config.blk_num * block);
}

}  // namespace dj_twin

template <typename T, typename V>
inline void asc_fill_l1(T* dst, V value, const asc_fill_value_config& config) {
  ::dj_twin::fill(::dj_twin::Mem::L1, dst, value, config, "asc_fill_l1");
}
template <typename T, typename V>
inline void asc_fill_l0a(T* dst, V value, const asc_fill_value_config& config) {
  ::dj_twin::fill(::dj_twin::Mem::L0A, dst, value, config, "asc_fill_l0a");
}
template <typename T, typename V>
inline void asc_fill_l0b(T* dst, V value, const asc_fill_value_config& config) {
  ::dj_twin::fill(::dj_twin::Mem::L0B, dst, value, config, "asc_fill_l0b");
}

// ---- L0C -> GM / UB (the FIX pipe) ---------------------------------------------------------------

enum class asc_unit_flag_mode : uint8_t { DISABLE = 0, RESERVED = 1, ENABLE = 2, ENABLE_AND_CLOSE = 3 };
// quant_pre values as TileLang 0.1.15 passes them (src/ascend/op/copy.cc GetCCQuantPre).
enum class asc_quant_mode : uint8_t {
  NoQuant = 0, F322F16 = 1, REQ8 = 9, QF322FP8_PRE = 13, F322BF16 = 16, REQ4 = 22, DEQS16 = 28
};
enum class asc_relu_pre_mode : uint8_t { NoRelu = 0, NormalRelu = 1, ScalarRelu = 2, VectorRelu = 3 };
// Dual destination (L0C -> UB of both vector cores of the block): SPLIT_M gives vector core s the
// rows [s*m/2, (s+1)*m/2), SPLIT_N the columns [s*n/2, (s+1)*n/2); each lands at the same UB address.
enum class asc_dual_dst_mode : uint8_t { DISABLE = 0, SPLIT_M = 1, SPLIT_N = 2 };

namespace dj_twin {

// One L0C element converted as quant_pre says into the destination type.
template <typename D, typename S>
inline void fix_store(uint8_t* to, S v, int quant, const char* op) {
  if constexpr (std::is_same_v<S, float>) {
    if (quant == int(asc_quant_mode::NoQuant)) {
      if constexpr (sizeof(D) == 4) { std::memcpy(to, &v, 4); return; }
    } else if (quant == int(asc_quant_mode::F322F16)) {
      if constexpr (sizeof(D) == 2) { uint16_t h = float_to_f16(v); std::memcpy(to, &h, 2); return; }
    } else if (quant == int(asc_quant_mode::F322BF16)) {
      if constexpr (sizeof(D) == 2) { uint16_t h = float_to_bf16(v); std::memcpy(to, &h, 2); return; }
    } else {
      fail("%s: quant_pre mode %d is not implemented on the twin", op, quant);
    }
  } else {
    if (quant == int(asc_quant_mode::NoQuant)) {
      if constexpr (sizeof(D) == 4) { std::memcpy(to, &v, 4); return; }
    } else {
      fail("%s: quant_pre mode %d for int32 L0C is not implemented on the twin", op, quant);
    }
  }
  fail("%s: quant_pre mode %d does not produce a %zu-byte destination element", op, quant, sizeof(D));
}

// Rows [m0, m1) x columns [n0, n1) of the NZ L0C tile at `src` (column blocks src_stride rows apart)
// to `to(m - m0, n - n0)`; nz2nd: row-major with dst_stride elements per row; nz2dn: column-major;
// neither: NZ with dst_stride elements between column blocks. `to` says where an element is written,
// `commit` is called once it is there.
template <typename D, typename S, typename To, typename Commit>
inline void fix_copy(const S* src, uint32_t m0, uint32_t m1, uint32_t n0, uint32_t n1, uint16_t src_stride, int quant,
                     int relu, bool split_en, bool nz2nd_en, bool nz2dn_en, uint8_t clip_relu_pre, const char* op,
                     To to, Commit commit) {
  if (split_en) fail("%s: split_en (channel split) is not implemented on the twin", op);
  if (clip_relu_pre) fail("%s: clip_relu_pre is not implemented on the twin", op);
  if (relu != int(asc_relu_pre_mode::NoRelu) && relu != int(asc_relu_pre_mode::NormalRelu))
    fail("%s: relu_pre mode %d is not implemented on the twin", op, relu);
  if (nz2nd_en && nz2dn_en) fail("%s: nz2nd_en and nz2dn_en are both set", op);
  Core& c = core();
  if (c.l0c_nd_num != 1) fail("%s: asc_set_l0c_copy_nz_para nd_num %d (!= 1) is not implemented on the twin", op,
                              c.l0c_nd_num);
  for (uint32_t m = m0; m < m1; ++m) {
    for (uint32_t n = n0; n < n1; ++n) {
      const S* from = src + (size_t(n / 16) * src_stride + m) * 16 + n % 16;
      check(Mem::L0C, from, sizeof(S), op);
      S v = *from;
      if (relu == int(asc_relu_pre_mode::NormalRelu) && v < S(0)) v = S(0);
      uint8_t* dst = to(m - m0, n - n0);
      fix_store<D>(dst, v, quant, op);
      commit(dst);
    }
  }
}

template <typename D>
inline size_t fix_dst_index(uint32_t m, uint32_t n, uint32_t dst_stride, bool nz2nd, bool nz2dn) {
  if (nz2nd) return size_t(m) * dst_stride + n;
  if (nz2dn) return size_t(n) * dst_stride + m;
  return size_t(n / 16) * dst_stride + size_t(m) * 16 + n % 16;
}

}  // namespace dj_twin

template <typename D, typename S>
inline void asc_copy_l0c2gm(D* dst, S* src, uint16_t n_size, uint16_t m_size, uint32_t loop_dst_stride,
                            uint16_t loop_src_stride, asc_store_l2_cache_mode, asc_unit_flag_mode, asc_quant_mode quant,
                            asc_relu_pre_mode relu, bool split_en, bool nz2nd_en, bool nz2dn_en,
                            uint8_t clip_relu_pre) {
  using namespace dj_twin;
  const char* op = "asc_copy_l0c2gm";
  begin_gm_move();
  auto* d = reinterpret_cast<uint8_t*>(dst);
  // Each element is converted into `staged`, then stored to GM (an atomic combine under a store-mode atomic).
  alignas(8) uint8_t staged[sizeof(D)];
  uint8_t* target = nullptr;
  fix_copy<D>(src, 0, m_size, 0, n_size, loop_src_stride, int(quant), int(relu), split_en, nz2nd_en, nz2dn_en,
              clip_relu_pre, op, [&](uint32_t m, uint32_t n) {
                target = d + fix_dst_index<D>(m, n, loop_dst_stride, nz2nd_en, nz2dn_en) * sizeof(D);
                check_gm(target, sizeof(D), op);
                touch_gm(target, sizeof(D), true);
                return staged;
              }, [&](uint8_t*) { gm_store(target, staged, sizeof(D), op); });
  count_move(Route::L0C_TO_GM, size_t(m_size) * n_size * sizeof(D));
}

template <typename D, typename S>
inline void asc_copy_l0c2ub(D* dst, S* src, uint16_t n_size, uint16_t m_size, uint32_t loop_dst_stride,
                            uint16_t loop_src_stride, uint8_t sub_blockid, asc_dual_dst_mode dual,
                            asc_unit_flag_mode, asc_quant_mode quant, asc_relu_pre_mode relu, bool split_en,
                            bool nz2nd_en, bool nz2dn_en, uint8_t clip_relu_pre) {
  using namespace dj_twin;
  const char* op = "asc_copy_l0c2ub";
  Core& c = core();
  if (c.kind != CoreKind::AIC) fail("%s: only the cube core moves L0C", op);
  auto one = [&](int sub, uint32_t m0, uint32_t m1, uint32_t n0, uint32_t n1) {
    Core* target = c.block->aiv[sub];
    fix_copy<D>(src, m0, m1, n0, n1, loop_src_stride, int(quant), int(relu), split_en, nz2nd_en, nz2dn_en,
                clip_relu_pre, op, [&](uint32_t m, uint32_t n) {
                  D* p = dst + fix_dst_index<D>(m, n, loop_dst_stride, nz2nd_en, nz2dn_en);
                  return peer_range(target, Mem::UB, p, sizeof(D), op);
                }, [](uint8_t*) {});
  };
  switch (dual) {
    case asc_dual_dst_mode::DISABLE: one(sub_blockid & 1, 0, m_size, 0, n_size); break;
    case asc_dual_dst_mode::SPLIT_M:
      if (m_size % 2) fail("%s: dual destination SPLIT_M needs an even m_size, got %d", op, m_size);
      one(0, 0, m_size / 2, 0, n_size);
      one(1, m_size / 2, m_size, 0, n_size);
      break;
    case asc_dual_dst_mode::SPLIT_N:
      if (n_size % 2) fail("%s: dual destination SPLIT_N needs an even n_size, got %d", op, n_size);
      one(0, 0, m_size, 0, n_size / 2);
      one(1, 0, m_size, n_size / 2, n_size);
      break;
    default: fail("%s: dual destination mode %d is not a mode", op, int(dual));
  }
  const size_t bytes = size_t(m_size) * n_size * sizeof(D);
  if (dual == asc_dual_dst_mode::DISABLE) {
    count_move(Route::L0C_TO_UB, bytes);
  } else {  // the timeline costs a dual copy by each AIV's ND row (NZ output: unknown, 0)
    const uint64_t cols = dual == asc_dual_dst_mode::SPLIT_N ? n_size / 2 : n_size;
    count_move(Route::L0C_TO_UB, bytes, bytes, MoveVariant::Dual, nz2nd_en ? cols * sizeof(D) : 0);
  }
}

// (nd_num, src_nd_stride, dst_nd_stride) of the next L0C copy; only nd_num = 1 is implemented.
inline void asc_set_l0c_copy_nz_para(uint16_t nd_num, uint16_t src_nd_stride, uint16_t dst_nd_stride) {
  ::dj_twin::Core& c = ::dj_twin::core();
  c.l0c_nd_num = nd_num;
  c.l0c_src_nd_stride = src_nd_stride;
  c.l0c_dst_nd_stride = dst_nd_stride;
}

// --- asc-devkit's own argument forms (npu_arch_3510 cube_datamove_impl.h), as hand-written kernels and
// TileLang's T.import_source intrinsics call them -------------------------------------------------------

// asc_copy_gm2l1_nd2nz with the L2 cache control as a plain uint8_t (`l2_cache_ctl`): a cache hint only.
template <typename T>
inline void asc_copy_gm2l1_nd2nz(T* dst, T* src, uint64_t loop1_src_stride, uint8_t l2_cache_ctl, uint16_t n_value,
                                 uint32_t d_value, uint64_t loop4_src_stride, bool smallc0_en) {
  asc_copy_gm2l1_nd2nz(dst, src, loop1_src_stride, static_cast<asc_load_l2_cache_mode>(l2_cache_ctl), n_value,
                       d_value, loop4_src_stride, smallc0_en);
}

// The 22-argument asc_copy_l0c2ub (docs: C-API/cube_datamove/asc_copy_l0c2ub.md): dual_dst_ctl before
// sub_blockid, clip_relu_pre before unit_flag_ctl, then the post-processing stage (quant_post, relu_post,
// clip_relu_post, eltwise_op, eltwise_antq_en), c0_pad_en, broadcast_en. The twin runs the pre-processing
// stage only; any post-processing, element-wise, C0 padding or broadcast setting fails naming itself.
template <typename D, typename S>
inline void asc_copy_l0c2ub(D* dst, S* src, uint16_t n_size, uint16_t m_size, uint32_t loop_dst_stride,
                            uint16_t loop_src_stride, uint8_t dual_dst_ctl, bool sub_blockid, uint8_t clip_relu_pre,
                            uint8_t unit_flag_ctl, uint64_t quant_pre, uint8_t relu_pre, bool split_en, bool nz2nd_en,
                            uint64_t quant_post, uint8_t relu_post, bool clip_relu_post, uint8_t eltwise_op,
                            bool eltwise_antq_en, bool c0_pad_en, bool broadcast_en, bool nz2dn_en) {
  const char* op = "asc_copy_l0c2ub";
  if (quant_post) ::dj_twin::fail("%s: quant_post %llu is not implemented on the twin", op, (unsigned long long)quant_post);
  if (relu_post || clip_relu_post) ::dj_twin::fail("%s: relu_post / clip_relu_post are not implemented on the twin", op);
  if (eltwise_op || eltwise_antq_en) ::dj_twin::fail("%s: eltwise_op / eltwise_antq_en are not implemented on the twin", op);
  if (c0_pad_en) ::dj_twin::fail("%s: c0_pad_en is not implemented on the twin", op);
  if (broadcast_en) ::dj_twin::fail("%s: broadcast_en is not implemented on the twin", op);
  if (quant_pre > 0xFF) ::dj_twin::fail("%s: quant_pre %llu is not a mode", op, (unsigned long long)quant_pre);
  asc_copy_l0c2ub(dst, src, n_size, m_size, loop_dst_stride, loop_src_stride, uint8_t(sub_blockid),
                  static_cast<asc_dual_dst_mode>(dual_dst_ctl), static_cast<asc_unit_flag_mode>(unit_flag_ctl),
                  static_cast<asc_quant_mode>(quant_pre), static_cast<asc_relu_pre_mode>(relu_pre), split_en,
                  nz2nd_en, nz2dn_en, clip_relu_pre);
}

// asc_set_l0c2gm_nz2nd (docs: C-API/cube_compute/asc_set_l0c2gm_nz2nd.md): the ND matrix count and strides
// of NZ2ND FixPipe copies, the register asc_set_l0c_copy_nz_para also sets (nd_num 1 is implemented).
inline void asc_set_l0c2gm_nz2nd(uint64_t nd_num, uint64_t src_nd_stride, uint64_t dst_nd_stride) {
  if (nd_num > 0xFFFF || src_nd_stride > 0xFFFF || dst_nd_stride > 0xFFFFFFFFull)
    ::dj_twin::fail("asc_set_l0c2gm_nz2nd: (%llu, %llu, %llu) out of range", (unsigned long long)nd_num,
                    (unsigned long long)src_nd_stride, (unsigned long long)dst_nd_stride);
  asc_set_l0c_copy_nz_para(uint16_t(nd_num), uint16_t(src_nd_stride), uint16_t(dst_nd_stride));
}

// asc_set_gm2ub_loop_size / asc_set_ub2gm_loop_size (docs: C-API/vector_datamove/*.md): the inner and
// outer loop counts of the MTE2 / MTE3 GM<->UB moves. The twin's moves run one iteration of each loop
// (the reset state), so only (1, 1) is accepted; other counts fail rather than being ignored.
inline void dj_twin_check_loop_size(const char* op, uint64_t loop1_size, uint64_t loop2_size) {
  if (loop1_size != 1 || loop2_size != 1)
    ::dj_twin::fail("%s(%llu, %llu): loop counts other than (1, 1) are not implemented on the twin", op,
                    (unsigned long long)loop1_size, (unsigned long long)loop2_size);
}
inline void asc_set_gm2ub_loop_size(uint64_t loop1_size, uint64_t loop2_size) {
  dj_twin_check_loop_size("asc_set_gm2ub_loop_size", loop1_size, loop2_size);
}
inline void asc_set_ub2gm_loop_size(uint32_t loop1_size, uint32_t loop2_size) {
  dj_twin_check_loop_size("asc_set_ub2gm_loop_size", loop1_size, loop2_size);
}

// asc_set_l3d_rpt_b (docs: C-API/sys_var/asc_set_l3d_rpt_b.md): repeat control of asc_copy_l12l0a/b's 2D
// moves: [15:0] repeat stride, [23:16] repeat count (reset 1), [24] repeat along K, [47:32] output K
// stride, [63:48] output M start. The twin's L1->L0 moves take every parameter from their arguments, i.e.
// one repeat; only that configuration (count 1, every other field 0) is accepted.
inline void asc_set_l3d_rpt_b(uint64_t config) {
  if (config != (uint64_t(1) << 16))
    ::dj_twin::fail("asc_set_l3d_rpt_b(0x%llx): only one repeat (0x10000) is implemented on the twin",
                    (unsigned long long)config);
}
