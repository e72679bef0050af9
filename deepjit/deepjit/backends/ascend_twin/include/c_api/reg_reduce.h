// Ascend twin: register reductions (AscendC reg reduce_compute docs).
//  - asc_reduce_sum: binary-tree sum of the active lanes (adjacent pairs, level by level, each partial
//    rounded to the lane precision; inactive lanes count as 0) into lane 0, other lanes 0; 16-bit (and
//    TileLang's 8-bit) integer sources accumulate in the wider destination type.
//  - asc_reduce_max/min: the extreme value in lane 0 and its index (smallest on ties, the first NaN if
//    any; NaN lanes skipped under DJ_TWIN_MAX_DROPS_NAN, dj_twin/runtime.h) in lane 1 stored as the
//    destination's raw bits; inactive lanes count as -inf/+inf (the type's
//    lowest/highest for integers); all inactive -> lane 0 = -inf/+inf, index 0.
//  - *_datablock: the same per 32-byte block, result j in lane j (no index).
//  - asc_pair_reduce_sum: lane i = src[2i] + src[2i+1] (inactive as 0) for the low half, high half 0.
#pragma once

#include <utility>

#include "c_api/reg_ops.h"

namespace dj_twin {
namespace vreg {

// Tree sum of vals[0..n) in D's precision.
template <class D> inline calc_t<D> tree_sum(calc_t<D>* vals, int n) {
  for (; n > 1; n /= 2)
    for (int i = 0; i < n / 2; ++i) {
      calc_t<D> s = vals[2 * i] + vals[2 * i + 1];
      if constexpr (is_float_v<D>) s = round_to<D>(s);
      vals[i] = s;
    }
  return vals[0];
}

template <class D, class S> inline void reduce_sum_range(D& out, int slot, const S& src, const mask& m, int lo, int n) {
  calc_t<D> vals[S::lanes];
  for (int i = 0; i < n; ++i) vals[i] = active<S>(m, lo + i) ? calc_t<D>(get(src, lo + i)) : calc_t<D>(0);
  calc_t<D> s = tree_sum<D>(vals, n);
  if constexpr (is_float_v<D>) s = s == 0 ? 0.0f : s;  // an all-zero sum is +0
  put(out, slot, s);
}

// Extreme of lanes [lo, lo+n): value and index within the range.
template <class V> inline std::pair<calc_t<V>, int> extreme(const V& src, const mask& m, int lo, int n, bool want_max) {
  calc_t<V> best = want_max ? lowest<V>() : highest<V>();
  int idx = 0;
  bool found = false;
  for (int i = 0; i < n; ++i) {
    if (!active<V>(m, lo + i)) continue;
    const calc_t<V> x = get(src, lo + i);
    if constexpr (is_float_v<V>) {
      if (std::isnan(x)) {
        if (dj_twin::g_max_drops_nan) continue;  // DJ_TWIN_MAX_DROPS_NAN (dj_twin/runtime.h)
        return {x, i};
      }
    }
    bool better = !found || (want_max ? x > best : x < best);
    if (found && x == best && is_float_v<V>) {
      // max(-0, +0) = +0, min(-0, +0) = -0; keep the first index.
      if (want_max ? (std::signbit(best) && !std::signbit(x)) : (!std::signbit(best) && std::signbit(x))) {
        best = x;
      }
      better = false;
    }
    if (better) {
      best = x;
      idx = i;
      found = true;
    }
  }
  return {best, idx};
}

template <class V> inline void reduce_extreme(V& d, const V& src, const mask& m, bool want_max) {
  auto [v, i] = extreme(src, m, 0, V::lanes, want_max);
  V out;
  put(out, 0, v);
  out.e[1] = typename V::bits_t(i);
  out.step = count_vector_ops(V::lanes, VecClass::Simple, step_of(src, m));
  d = out;
}

template <class V> inline void reduce_extreme_blocks(V& d, const V& src, const mask& m, bool want_max) {
  constexpr int per = 32 / V::width;
  V out;
  for (int b = 0; b < V::lanes / per; ++b) put(out, b, extreme(src, m, b * per, per, want_max).first);
  out.step = count_vector_ops(V::lanes, VecClass::Simple, step_of(src, m));
  d = out;
}

}  // namespace vreg
}  // namespace dj_twin

template <class D, class S, class = djv::if_reg<D>, class = djv::if_reg<S>>
inline void asc_reduce_sum(D& d, S src, vector_bool m) {
  D out;
  djv::reduce_sum_range(out, 0, src, m, 0, S::lanes);
  out.step = dj_twin::count_vector_ops(S::lanes, dj_twin::VecClass::Simple, djv::step_of(src, m));
  d = out;
}
template <class D, class S, class = djv::if_reg<D>, class = djv::if_reg<S>>
inline void asc_reduce_sum_datablock(D& d, S src, vector_bool m) {
  constexpr int per = 32 / S::width;
  D out;
  for (int b = 0; b < S::lanes / per; ++b) djv::reduce_sum_range(out, b, src, m, b * per, per);
  out.step = dj_twin::count_vector_ops(S::lanes, dj_twin::VecClass::Simple, djv::step_of(src, m));
  d = out;
}
template <class V, class = djv::if_reg<V>> inline void asc_reduce_max(V& d, V src, vector_bool m) {
  djv::reduce_extreme(d, src, m, true);
}
template <class V, class = djv::if_reg<V>> inline void asc_reduce_min(V& d, V src, vector_bool m) {
  djv::reduce_extreme(d, src, m, false);
}
template <class V, class = djv::if_reg<V>> inline void asc_reduce_max_datablock(V& d, V src, vector_bool m) {
  djv::reduce_extreme_blocks(d, src, m, true);
}
template <class V, class = djv::if_reg<V>> inline void asc_reduce_min_datablock(V& d, V src, vector_bool m) {
  djv::reduce_extreme_blocks(d, src, m, false);
}
template <class V, class = djv::if_reg<V>> inline void asc_pair_reduce_sum(V& d, V src, vector_bool m) {
  V out;
  for (int i = 0; i < V::lanes / 2; ++i) {
    const auto a = djv::active<V>(m, 2 * i) ? djv::get(src, 2 * i) : djv::calc_t<V>(0);
    const auto b = djv::active<V>(m, 2 * i + 1) ? djv::get(src, 2 * i + 1) : djv::calc_t<V>(0);
    djv::put(out, i, djv::add(a, b));
  }
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Simple, djv::step_of(src, m));
  d = out;
}
