// Ascend twin: register loads from and stores to UB with their distribution modes (AscendC reg_load /
// reg_store docs). Offsets are in elements of the pointer's type; every access checks its UB range.
//  loads:  NORM (VL bytes), BRC_ELEM (one element to every lane), UPSAMPLE (VL/2 bytes, each element
//          twice), DOWNSAMPLE (2*VL bytes, every other element), UNPACK (VL/2 bytes, element k in lane
//          2k, odd lanes 0), UNPACK4 (VL/4 bytes, element k in lane 4k), BRC_DATABLOCK (one 32-byte block
//          to all 8), BRC_ELEM2DATABLOCK (8 elements, element j fills block j), DEINTLV (2*VL bytes, even
//          elements to dst0, odd to dst1), gather (index in elements), gather_datablock (index in bytes).
//  stores: NORM (active lanes only; inactive UB bytes are left alone), block-strided NORM (block j at
//          dst + j*block_stride*32 bytes; POST_UPDATE advances dst by repeat_stride*32 bytes), PACK (the low
//          half of each active lane, lane i at packed position i), PACK_QUARTER (low 8 bits of 32-bit
//          lanes), INTLV (2*VL bytes, mask ignored), 1ST (lane 0 only, mask ignored), scatter.
#pragma once

#include "c_api/reg_lane.h"

namespace dj_twin {
namespace vreg {

template <class T> inline const uint8_t* ub_read(const T* p, size_t bytes, const char* op) {
  check(Mem::UB, p, bytes, op);
  return reinterpret_cast<const uint8_t*>(p);
}
template <class T> inline uint8_t* ub_write(T* p, size_t bytes, const char* op) {
  check(Mem::UB, p, bytes, op);
  return reinterpret_cast<uint8_t*>(p);
}
// The NORM forms move a whole register between it and a 32-byte aligned UB address (AscendC StoreAlign's
// alignment table: DIST_NORM_B8 / B16 / B32, 32 bytes; the C API names the operand dst_align32b): an
// unaligned one fails naming the op and offset.
template <class T> inline void ub_aligned32(const T* p, const char* op) {
  const int64_t off = onchip_offset(Mem::UB, p);
  if (off % 32) fail("%s: UB offset %lld is not 32-byte aligned", op, (long long)off);
}

// Lane i of v <- the `width` bytes at q (little endian, zero- or sign-extended to the lane width).
template <class V> inline void set_raw(V& v, int i, const uint8_t* q, int width) {
  uint64_t u = 0;
  std::memcpy(&u, q, size_t(width));
  if (lane<V::kind>::is_signed && !lane<V::kind>::is_float && width < 8 && ((u >> (8 * width - 1)) & 1))
    u |= ~0ull << (8 * width);
  v.e[i] = typename V::bits_t(u);
}

template <class V> inline void store_active(uint8_t* q, const V& v, const mask& m) {
  for (int i = 0; i < V::lanes; ++i)
    if (active<V>(m, i)) std::memcpy(q + size_t(i) * V::width, &v.e[i], V::width);
}

}  // namespace vreg
}  // namespace dj_twin

#define DJ_TWIN_LOAD_TMPL template <class V, class T, class = djv::if_reg<V>>

DJ_TWIN_LOAD_TMPL inline void asc_loadalign(V& d, __ubuf__ T* src, int32_t offset = 0) {
  const uint8_t* q = djv::ub_read(src + offset, djv::VL, "asc_loadalign");
  djv::ub_aligned32(src + offset, "asc_loadalign");
  std::memcpy(d.e, q, djv::VL);
  d.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);
}
DJ_TWIN_LOAD_TMPL inline void asc_loadalign_brc_elem(V& d, __ubuf__ T* src, int32_t offset = 0) {
  const uint8_t* q = djv::ub_read(src + offset, V::width, "asc_loadalign_brc_elem");
  V out;
  for (int i = 0; i < V::lanes; ++i) std::memcpy(&out.e[i], q, V::width);
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);
  d = out;
}
DJ_TWIN_LOAD_TMPL inline void asc_loadalign_upsample(V& d, __ubuf__ T* src, int32_t offset = 0) {
  const uint8_t* q = djv::ub_read(src + offset, djv::VL / 2, "asc_loadalign_upsample");
  V out;
  for (int i = 0; i < V::lanes; ++i) std::memcpy(&out.e[i], q + size_t(i / 2) * V::width, V::width);
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);
  d = out;
}
DJ_TWIN_LOAD_TMPL inline void asc_loadalign_downsample(V& d, __ubuf__ T* src, int32_t offset = 0) {
  const uint8_t* q = djv::ub_read(src + offset, 2 * djv::VL, "asc_loadalign_downsample");
  V out;
  for (int i = 0; i < V::lanes; ++i) std::memcpy(&out.e[i], q + size_t(2 * i) * V::width, V::width);
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);
  d = out;
}
DJ_TWIN_LOAD_TMPL inline void asc_loadalign_unpack(V& d, __ubuf__ T* src, int32_t offset = 0) {
  const uint8_t* q = djv::ub_read(src + offset, djv::VL / 2, "asc_loadalign_unpack");
  V out;
  for (int k = 0; k < V::lanes / 2; ++k) std::memcpy(&out.e[2 * k], q + size_t(k) * V::width, V::width);
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);
  d = out;
}
DJ_TWIN_LOAD_TMPL inline void asc_loadalign_unpack4(V& d, __ubuf__ T* src, int32_t offset = 0) {
  const uint8_t* q = djv::ub_read(src + offset, djv::VL / 4, "asc_loadalign_unpack4");
  V out;
  for (int k = 0; k < V::lanes / 4; ++k) std::memcpy(&out.e[4 * k], q + size_t(k) * V::width, V::width);
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);
  d = out;
}
DJ_TWIN_LOAD_TMPL inline void asc_loadalign_brc_datablock(V& d, __ubuf__ T* src, int32_t offset = 0) {
  const uint8_t* q = djv::ub_read(src + offset, 32, "asc_loadalign_brc_datablock");
  uint8_t* out = reinterpret_cast<uint8_t*>(d.e);
  for (int b = 0; b < djv::VL / 32; ++b) std::memcpy(out + 32 * b, q, 32);
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);
}
DJ_TWIN_LOAD_TMPL inline void asc_loadalign_brc_elem2datablock(V& d, __ubuf__ T* src, int32_t offset = 0) {
  constexpr int blocks = djv::VL / 32, per = 32 / V::width;
  const uint8_t* q = djv::ub_read(src + offset, size_t(blocks) * V::width, "asc_loadalign_brc_elem2datablock");
  V out;
  for (int i = 0; i < V::lanes; ++i) std::memcpy(&out.e[i], q + size_t(i / per) * V::width, V::width);
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);
  d = out;
}
DJ_TWIN_LOAD_TMPL inline void asc_loadalign_deintlv(V& d0, V& d1, __ubuf__ T* src, int32_t offset = 0) {
  const uint8_t* q = djv::ub_read(src + offset, 2 * djv::VL, "asc_loadalign_deintlv");
  V out[2];
  for (int g = 0; g < 2 * V::lanes; ++g) std::memcpy(&out[g & 1].e[g / 2], q + size_t(g) * V::width, V::width);
  d0 = out[0];
  d1 = out[1];
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);  // two registers: two moves
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Load);
}

// Post-update loads: load at src, then src += offset elements.
#define DJ_TWIN_LOAD_POST(NAME)                                                             \
  DJ_TWIN_LOAD_TMPL inline void NAME##_postupdate(V& d, __ubuf__ T*& src, int32_t offset) { \
    NAME(d, src, 0);                                                                        \
    src += offset;                                                                          \
  }
DJ_TWIN_LOAD_POST(asc_loadalign)
DJ_TWIN_LOAD_POST(asc_loadalign_brc_elem)
DJ_TWIN_LOAD_POST(asc_loadalign_upsample)
DJ_TWIN_LOAD_POST(asc_loadalign_downsample)
DJ_TWIN_LOAD_POST(asc_loadalign_unpack)
DJ_TWIN_LOAD_POST(asc_loadalign_unpack4)
DJ_TWIN_LOAD_POST(asc_loadalign_brc_datablock)
DJ_TWIN_LOAD_POST(asc_loadalign_brc_elem2datablock)
#undef DJ_TWIN_LOAD_POST
DJ_TWIN_LOAD_TMPL inline void asc_loadalign_deintlv_postupdate(V& d0, V& d1, __ubuf__ T*& src, int32_t offset) {
  asc_loadalign_deintlv(d0, d1, src, 0);
  src += offset;
}
template <class P> inline void asc_loadalign_postupdate(vector_bool& d, __ubuf__ P*& src, int32_t offset) {
  asc_loadalign(d, src, 0);
  src = reinterpret_cast<P*>(reinterpret_cast<uint8_t*>(src) + offset);  // mask offsets are in bytes
}

// dst[i] = base[idx[i]] (elements of T), widened (sign/zero-extended) when dst lanes are wider than T.
template <class D, class T, class I, class = djv::if_reg<D>, class = djv::if_reg<I>>
inline void asc_gather(D& d, __ubuf__ T* base, I idx, vector_bool m) {
  D out;
  for (int i = 0; i < D::lanes; ++i) {
    if (!djv::active<D>(m, i)) continue;
    const uint8_t* q = djv::ub_read(base + uint64_t(idx.e[i % I::lanes]), sizeof(T), "asc_gather");
    djv::set_raw(out, i, q, int(sizeof(T)));
  }
  out.step = dj_twin::count_vector_ops(D::lanes, dj_twin::VecClass::Load);
  d = out;
}
// Block j of dst <- the 32 bytes at base + idx[j] bytes; inactive lanes are 0.
template <class D, class T, class I, class = djv::if_reg<D>, class = djv::if_reg<I>>
inline void asc_gather_datablock(D& d, __ubuf__ T* base, I idx, vector_bool m) {
  D out;
  constexpr int per = 32 / D::width;
  for (int b = 0; b < djv::VL / 32; ++b) {
    const uint8_t* q = djv::ub_read(reinterpret_cast<const uint8_t*>(base) + uint64_t(idx.e[b]), 32,
                                    "asc_gather_datablock");
    for (int k = 0; k < per; ++k)
      if (djv::active<D>(m, b * per + k)) std::memcpy(&out.e[b * per + k], q + k * D::width, D::width);
  }
  out.step = dj_twin::count_vector_ops(D::lanes, dj_twin::VecClass::Load);
  d = out;
}
template <class D, class T, class I, class = djv::if_reg<D>, class = djv::if_reg<I>>
inline void asc_gather_datablock(D& d, __ubuf__ T* base, I idx) {
  asc_gather_datablock(d, base, idx, djv::make_mask(djv::P_ALL, D::width));
}

// ---- stores ----
template <class T, class V, class = djv::if_reg<V>>
inline void asc_storealign(__ubuf__ T* dst, V src, int32_t offset, vector_bool m) {
  uint8_t* q = djv::ub_write(dst + offset, djv::VL, "asc_storealign");
  djv::ub_aligned32(dst + offset, "asc_storealign");
  djv::store_active(q, src, m);
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Store, djv::step_of(src, m));
}
template <class T, class V, class = djv::if_reg<V>> inline void asc_storealign(__ubuf__ T* dst, V src, vector_bool m) {
  asc_storealign(dst, src, 0, m);
}
// 8 blocks of 32 bytes; block j at dst + j * block_stride * 32 bytes.
template <class T, class V, class = djv::if_reg<V>>
inline void asc_storealign(__ubuf__ T* dst, V src, uint16_t block_stride, uint16_t repeat_stride, vector_bool m) {
  (void)repeat_stride;
  constexpr int per = 32 / V::width;
  djv::ub_aligned32(dst, "asc_storealign(block stride)");
  uint8_t* base = reinterpret_cast<uint8_t*>(dst);
  for (int b = 0; b < djv::VL / 32; ++b) {
    bool any = false;
    for (int k = 0; k < per; ++k) any = any || djv::active<V>(m, b * per + k);
    if (!any) continue;
    uint8_t* q = djv::ub_write(base + size_t(b) * block_stride * 32, 32, "asc_storealign(block stride)");
    for (int k = 0; k < per; ++k)
      if (djv::active<V>(m, b * per + k)) std::memcpy(q + k * V::width, &src.e[b * per + k], V::width);
  }
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Store, djv::step_of(src, m));
}
template <class T, class V, class = djv::if_reg<V>>
inline void asc_storealign_postupdate(__ubuf__ T*& dst, V src, uint16_t block_stride, uint16_t repeat_stride,
                                      vector_bool m) {
  asc_storealign(dst, src, block_stride, repeat_stride, m);
  dst = reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(dst) + size_t(repeat_stride) * 32);
}
template <class T, class V, class = djv::if_reg<V>>
inline void asc_storealign_postupdate(__ubuf__ T*& dst, V src, int32_t offset, vector_bool m) {
  asc_storealign(dst, src, 0, m);
  dst += offset;
}
// Low half (pack) / low quarter (pack_quarter) of each active lane, lane i at packed position i.
template <class T, class V, class = djv::if_reg<V>>
inline void asc_storealign_pack(__ubuf__ T* dst, V src, int32_t offset, vector_bool m) {
  constexpr int w = V::width / 2;
  uint8_t* q = djv::ub_write(dst + offset, djv::VL / 2, "asc_storealign_pack");
  for (int i = 0; i < V::lanes; ++i)
    if (djv::active<V>(m, i)) std::memcpy(q + size_t(i) * w, &src.e[i], w);
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Store, djv::step_of(src, m));
}
template <class T, class V, class = djv::if_reg<V>> inline void asc_storealign_pack(__ubuf__ T* dst, V src, vector_bool m) {
  asc_storealign_pack(dst, src, 0, m);
}
template <class T, class V, class = djv::if_reg<V>>
inline void asc_storealign_pack_quarter(__ubuf__ T* dst, V src, int32_t offset, vector_bool m) {
  static_assert(V::width == 4, "asc_storealign_pack_quarter stores 32-bit lanes");
  uint8_t* q = djv::ub_write(dst + offset, djv::VL / 4, "asc_storealign_pack_quarter");
  for (int i = 0; i < V::lanes; ++i)
    if (djv::active<V>(m, i)) q[i] = uint8_t(src.e[i]);
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Store, djv::step_of(src, m));
}
template <class T, class V, class = djv::if_reg<V>>
inline void asc_storealign_intlv(__ubuf__ T* dst, V a, V b, int32_t offset = 0) {
  uint8_t* q = djv::ub_write(dst + offset, 2 * djv::VL, "asc_storealign_intlv");
  for (int i = 0; i < V::lanes; ++i) {
    std::memcpy(q + size_t(2 * i) * V::width, &a.e[i], V::width);
    std::memcpy(q + size_t(2 * i + 1) * V::width, &b.e[i], V::width);
  }
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Store, djv::step_of(a, b));  // two registers: two moves
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Store, djv::step_of(a, b));
}
template <class T, class V, class = djv::if_reg<V>>
inline void asc_storealign_1st(__ubuf__ T* dst, V src, int32_t offset = 0) {
  uint8_t* q = djv::ub_write(dst + offset, V::width, "asc_storealign_1st");
  std::memcpy(q, &src.e[0], V::width);
  dj_twin::count_vector_ops(1, dj_twin::VecClass::Store, djv::step_of(src));
}
// base[idx[i]] = src[i] for active lanes; with 8-bit data only the even lanes are scattered, and an
// index register with fewer lanes than the data pairs index lane k with data lane k * ratio.
template <class T, class V, class I, class = djv::if_reg<V>, class = djv::if_reg<I>>
inline void asc_scatter(__ubuf__ T* base, V src, I idx, vector_bool m) {
  for (int i = 0; i < V::lanes; ++i) {
    if (!djv::active<V>(m, i)) continue;
    if (V::width == 1 && (i & 1)) continue;
    const uint64_t k = uint64_t(idx.e[int64_t(i) * I::lanes / V::lanes]);
    uint8_t* q = djv::ub_write(base + k, sizeof(T), "asc_scatter");
    std::memcpy(q, &src.e[i], sizeof(T));
  }
  dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Store, djv::step_of(src, m));
}

// TileLang's vsstb with POST_UPDATE reaches asc_storealign_postupdate through simd_inst.h; memory
// barriers order nothing on the twin (each core runs its instructions in program order).
template <class M> inline void asc_mem_bar(M) {}
#undef DJ_TWIN_LOAD_TMPL
