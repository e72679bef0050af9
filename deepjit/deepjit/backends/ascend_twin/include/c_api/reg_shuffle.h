// Ascend twin: lane rearrangement — interleave/deinterleave, pack/unpack (narrow/widen halves),
// squeeze/unsqueeze and the register-indexed gather (AscendC reg data_rearrange / data_compress docs).
#pragma once

#include "c_api/reg_lane.h"

// dst0/dst1 = the low/high halves of a0 b0 a1 b1 ... (element granularity).
template <class V, class = djv::if_reg<V>> inline void asc_intlv(V& d0, V& d1, V a, V b) {
  V out[2];
  for (int i = 0; i < V::lanes; ++i) {
    const int g0 = 2 * i, g1 = 2 * i + 1;
    out[g0 / V::lanes].e[g0 % V::lanes] = a.e[i];
    out[g1 / V::lanes].e[g1 % V::lanes] = b.e[i];
  }
  d0 = out[0];
  d1 = out[1];
  dj_twin::count_vector_ops(2 * V::lanes);
}
// dst0 = even elements, dst1 = odd elements of the concatenation src0 src1.
template <class V, class = djv::if_reg<V>> inline void asc_deintlv(V& d0, V& d1, V a, V b) {
  V out[2];
  for (int g = 0; g < 2 * V::lanes; ++g) out[g & 1].e[g / 2] = (g < V::lanes ? a : b).e[g % V::lanes];
  d0 = out[0];
  d1 = out[1];
  dj_twin::count_vector_ops(2 * V::lanes);
}

// Narrow each element of src to its low half-width bits into the low (to_low) / high (to_high) half
// of dst; the other half is 0.
template <class D, class S, class = djv::if_reg<D>, class = djv::if_reg<S>>
inline void asc_pack_to_low(D& d, S src) {
  static_assert(D::width * 2 == S::width, "asc_pack_to_low narrows to half the element width");
  D out;
  for (int i = 0; i < S::lanes; ++i) out.e[i] = typename D::bits_t(src.e[i]);
  out.step = dj_twin::count_vector_ops(S::lanes, dj_twin::VecClass::Simple, djv::step_of(src));
  d = out;
}
template <class D, class S, class = djv::if_reg<D>, class = djv::if_reg<S>>
inline void asc_pack_to_high(D& d, S src) {
  static_assert(D::width * 2 == S::width, "asc_pack_to_high narrows to half the element width");
  D out;
  for (int i = 0; i < S::lanes; ++i) out.e[S::lanes + i] = typename D::bits_t(src.e[i]);
  out.step = dj_twin::count_vector_ops(S::lanes, dj_twin::VecClass::Simple, djv::step_of(src));
  d = out;
}
// Widen the low (lower) / high (upper) half of src: zero-extension for unsigned, sign-extension for
// signed lanes.
template <class D, class S, class = djv::if_reg<D>, class = djv::if_reg<S>>
inline void asc_unpack_lower(D& d, S src) {
  static_assert(D::width == 2 * S::width, "asc_unpack_lower widens to twice the element width");
  D out;
  for (int i = 0; i < D::lanes; ++i) out.e[i] = typename D::bits_t(src.e[i]);
  out.step = dj_twin::count_vector_ops(D::lanes, dj_twin::VecClass::Simple, djv::step_of(src));
  d = out;
}
template <class D, class S, class = djv::if_reg<D>, class = djv::if_reg<S>>
inline void asc_unpack_upper(D& d, S src) {
  static_assert(D::width == 2 * S::width, "asc_unpack_upper widens to twice the element width");
  D out;
  for (int i = 0; i < D::lanes; ++i) out.e[i] = typename D::bits_t(src.e[D::lanes + i]);
  out.step = dj_twin::count_vector_ops(D::lanes, dj_twin::VecClass::Simple, djv::step_of(src));
  d = out;
}

// Active lanes of src packed toward lane 0 in order, the rest 0.
template <class V, class = djv::if_reg<V>> inline void asc_squeeze(V& d, V src, vector_bool m) {
  V out;
  int k = 0;
  for (int i = 0; i < V::lanes; ++i)
    if (djv::active<V>(m, i)) out.e[k++] = src.e[i];
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Simple, djv::step_of(src, m));
  d = out;
}
// dst[0] = 0, dst[i] = number of active mask lanes among 0..i-1 (the top lane is never counted).
template <class V, class = djv::if_reg<V>> inline void asc_unsqueeze(V& d, vector_bool m) {
  V out;
  uint64_t n = 0;
  for (int i = 0; i < V::lanes; ++i) {
    out.e[i] = typename V::bits_t(n);
    if (djv::active<V>(m, i)) ++n;
  }
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Simple, djv::step_of(m));
  d = out;
}

// Register gather (TileLang vselr): dst[i] = src[idx[i]]; an index past the register wraps modulo lanes.
template <class V, class I, class = djv::if_reg<V>, class = djv::if_reg<I>>
inline void asc_gather(V& d, V src, I idx) {
  static_assert(!djv::lane<I::kind>::is_float, "asc_gather indices are integers");
  V out;
  for (int i = 0; i < V::lanes; ++i) out.e[i] = src.e[uint64_t(idx.e[i % I::lanes]) % V::lanes];
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Simple, djv::step_of(src, idx));
  d = out;
}
