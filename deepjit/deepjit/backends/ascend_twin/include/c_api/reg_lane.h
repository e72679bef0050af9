// Ascend twin: reading and writing one lane of a vector register as a computable value, and the
// lane-wise loop helpers every register op is built on (zeroing of masked-off lanes, op counting).
#pragma once

#include <cmath>
#include <limits>

#include "c_api/reg_types.h"

namespace dj_twin {
namespace vreg {

// E1M2 (two per byte like E2M1): 1 exponent bit, 2 mantissa bits, bias 1, no inf/NaN, max 1.75.
inline constexpr Format kE1M2{1, 2, 1, false, false, false, 0, false};

template <Kind K> constexpr const Format* format_of() {
  if constexpr (K == Kind::F16) return &kF16;
  else if constexpr (K == Kind::BF16) return &kBF16;
  else if constexpr (K == Kind::E4M3) return &kE4M3;
  else if constexpr (K == Kind::E5M2) return &kE5M2;
  else if constexpr (K == Kind::E2M1X2) return &kE2M1;
  else if constexpr (K == Kind::E1M2X2) return &kE1M2;
  else return nullptr;
}

// The type a lane computes in: float for float lanes, int64_t / uint64_t for integer lanes.
template <class V>
using calc_t = std::conditional_t<lane<V::kind>::is_float, float,
                                  std::conditional_t<lane<V::kind>::is_signed, int64_t, uint64_t>>;

template <class V> inline constexpr bool is_float_v = lane<V::kind>::is_float;

template <class V> inline calc_t<V> get(const V& v, int i) {
  constexpr Kind K = V::kind;
  if constexpr (K == Kind::F32) return bits_float(v.e[i]);
  else if constexpr (K == Kind::E8M0) return decode_e8m0(v.e[i]);
  else if constexpr (format_of<K>() != nullptr) return decode(v.e[i], *format_of<K>());
  else return calc_t<V>(v.e[i]);
}

// Float lanes round to nearest even (the result rounding of the vector ALU); integer lanes wrap.
template <class V> inline void put(V& v, int i, calc_t<V> x) {
  constexpr Kind K = V::kind;
  using B = typename V::bits_t;
  if constexpr (K == Kind::F32) v.e[i] = float_bits(x);
  else if constexpr (K == Kind::E8M0) v.e[i] = encode_e8m0(x);
  else if constexpr (format_of<K>() != nullptr) v.e[i] = B(encode(x, *format_of<K>()));
  else v.e[i] = B(std::make_unsigned_t<B>(uint64_t(x)));
}

// Rounds a float to the lane's precision (f16/bf16 intermediates of tree reductions).
template <class V> inline calc_t<V> round_to(calc_t<V> x) {
  V t;
  put(t, 0, x);
  return get(t, 0);
}

template <class V> inline bool active(const mask& m, int i) { return m.lane(i, V::width); }

// Converts a scalar operand (float, int, half, bfloat16_t, ...) to the lane's compute type.
template <class V, class S> inline calc_t<V> scalar_as(S s) {
  if constexpr (std::is_arithmetic_v<S>) return calc_t<V>(s);
  else if constexpr (std::is_convertible_v<S, float>) return calc_t<V>(static_cast<float>(s));
  else return calc_t<V>(s);
}

template <class V> inline calc_t<V> lowest() {
  if constexpr (is_float_v<V>) return -INFINITY;
  else return calc_t<V>(std::numeric_limits<typename V::bits_t>::lowest());
}
template <class V> inline calc_t<V> highest() {
  if constexpr (is_float_v<V>) return INFINITY;
  else return calc_t<V>(std::numeric_limits<typename V::bits_t>::max());
}

// The latest dataflow step of an instruction's source registers and masks (dj_twin/timeline.h).
template <class... R> inline uint64_t step_of(const R&... r) {
  uint64_t s = 0;
  ((s = r.step > s ? r.step : s), ...);
  return s;
}

// dst[i] = f(i) on active lanes, 0 on the others; cls: how the timeline costs the instruction; src_step:
// step_of(the registers f reads), taken before dst is written (dst may be one of them).
template <class V, class F>
inline void each(V& dst, const mask& m, F f, VecClass cls = VecClass::Simple, uint64_t src_step = 0) {
  V out;
  for (int i = 0; i < V::lanes; ++i)
    if (active<V>(m, i)) put(out, i, f(i));
  out.step = count_vector_ops(V::lanes, cls, src_step > m.step ? src_step : m.step);
  dst = out;
}

// Wrapping integer arithmetic (two's complement at 64 bits, truncated by put()).
template <class T> inline T wrap_add(T a, T b) { return T(uint64_t(a) + uint64_t(b)); }
template <class T> inline T wrap_sub(T a, T b) { return T(uint64_t(a) - uint64_t(b)); }
template <class T> inline T wrap_mul(T a, T b) { return T(uint64_t(a) * uint64_t(b)); }

// max/min with max(-0, +0) = +0 (min(-0, +0) = -0) and NaN propagation (NaN dropped under
// DJ_TWIN_MAX_DROPS_NAN, dj_twin/runtime.h).
template <class T> inline T vmax(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return !dj_twin::g_max_drops_nan ? T(NAN) : std::isnan(a) ? b : a;
    if (a == b) return std::signbit(a) ? b : a;
  }
  return a > b ? a : b;
}
template <class T> inline T vmin(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return !dj_twin::g_max_drops_nan ? T(NAN) : std::isnan(a) ? b : a;
    if (a == b) return std::signbit(a) ? a : b;
  }
  return a < b ? a : b;
}

// The special-function unit flushes subnormal inputs and outputs to zero (the reason TileLang's
// *_ftz_false wrappers exist: tl_templates/ascend/simd_inst.h).
inline float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

template <class V, class R = void> using if_reg = std::enable_if_t<is_reg<V>::value, R>;

}  // namespace vreg
}  // namespace dj_twin
