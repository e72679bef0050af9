// Ascend twin: element-wise register arithmetic, logic, shifts, compare/select, broadcast and index ops.
// Semantics from AscendC's reg compute docs: masked-off lanes of the result are zero ("mask未筛选的元素
// 在输出中置零"); max(-0, +0) = +0; shifts past the width give 0 (arithmetic: -1 for negatives);
// madd/axpy/vmula are fused multiply-adds.
#pragma once

#include "c_api/reg_lane.h"

namespace dj_twin {
namespace vreg {

template <class V, class F>
inline void unary(V& d, const V& a, const mask& m, F f, VecClass cls = VecClass::Simple) {
  each(d, m, [&](int i) { return f(get(a, i)); }, cls, a.step);
}
template <class V, class F>
inline void binary(V& d, const V& a, const V& b, const mask& m, F f, VecClass cls = VecClass::Simple) {
  each(d, m, [&](int i) { return f(get(a, i), get(b, i)); }, cls, step_of(a, b));
}
template <class V, class S, class F> inline void with_scalar(V& d, const V& a, S s, const mask& m, F f) {
  const calc_t<V> sv = scalar_as<V>(s);
  each(d, m, [&](int i) { return f(get(a, i), sv); }, VecClass::Simple, a.step);
}

template <class T> inline T add(T a, T b) { if constexpr (std::is_floating_point_v<T>) return a + b; else return wrap_add(a, b); }
template <class T> inline T sub(T a, T b) { if constexpr (std::is_floating_point_v<T>) return a - b; else return wrap_sub(a, b); }
template <class T> inline T mul(T a, T b) { if constexpr (std::is_floating_point_v<T>) return a * b; else return wrap_mul(a, b); }
template <class T> inline T div(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a / b;
  else return b == 0 ? T(0) : T(a / b);  // integer division by zero: undocumented, the twin gives 0
}
template <class T> inline T fma(T a, T b, T c) {
  if constexpr (std::is_floating_point_v<T>) return std::fma(a, b, c);
  else return wrap_add(wrap_mul(a, b), c);
}

template <class V> inline calc_t<V> shl(calc_t<V> a, int64_t n) {
  if (n < 0 || n >= 8 * V::width) return 0;
  return calc_t<V>(uint64_t(a) << n);
}
template <class V> inline calc_t<V> shr(calc_t<V> a, int64_t n) {
  const int bits = 8 * V::width;
  if constexpr (lane<V::kind>::is_signed) {
    if (n >= bits) return a < 0 ? -1 : 0;
    return a >> n;
  } else {
    if (n >= bits) return 0;
    return a >> n;
  }
}

// Bitwise ops work on the raw lane bits whatever the lane kind.
template <class V, class F> inline void bitwise(V& d, const V& a, const V& b, const mask& m, F f) {
  V out;
  for (int i = 0; i < V::lanes; ++i)
    if (active<V>(m, i)) out.e[i] = typename V::bits_t(f(a.e[i], b.e[i]));
  out.step = count_vector_ops(V::lanes, VecClass::Simple, step_of(a, b, m));
  d = out;
}

template <class V> inline void compare(mask& d, const V& a, const V& b, const mask& m, int op) {
  mask out;
  for (int i = 0; i < V::lanes; ++i) {
    if (!active<V>(m, i)) continue;
    const calc_t<V> x = get(a, i), y = get(b, i);
    bool r = false;
    switch (op) {
      case 0: r = x == y; break;
      case 1: r = x != y; break;
      case 2: r = x < y; break;
      case 3: r = x <= y; break;
      case 4: r = x > y; break;
      case 5: r = x >= y; break;
    }
    out.set_lane(i, V::width, r);
  }
  out.step = count_vector_ops(V::lanes, VecClass::Simple, step_of(a, b, m));
  d = out;
}

}  // namespace vreg
}  // namespace dj_twin

#define DJ_TWIN_TMPL template <class V, class = dj_twin::vreg::if_reg<V>>
namespace djv = dj_twin::vreg;

// ---- arithmetic ----
DJ_TWIN_TMPL inline void asc_add(V& d, V a, V b, vector_bool m) { djv::binary(d, a, b, m, [](auto x, auto y) { return djv::add(x, y); }); }
DJ_TWIN_TMPL inline void asc_sub(V& d, V a, V b, vector_bool m) { djv::binary(d, a, b, m, [](auto x, auto y) { return djv::sub(x, y); }); }
DJ_TWIN_TMPL inline void asc_mul(V& d, V a, V b, vector_bool m) { djv::binary(d, a, b, m, [](auto x, auto y) { return djv::mul(x, y); }); }
DJ_TWIN_TMPL inline void asc_div(V& d, V a, V b, vector_bool m) {
  djv::binary(d, a, b, m, [](auto x, auto y) { return djv::div(x, y); }, dj_twin::VecClass::Divide);
}
DJ_TWIN_TMPL inline void asc_max(V& d, V a, V b, vector_bool m) { djv::binary(d, a, b, m, [](auto x, auto y) { return djv::vmax(x, y); }); }
DJ_TWIN_TMPL inline void asc_min(V& d, V a, V b, vector_bool m) { djv::binary(d, a, b, m, [](auto x, auto y) { return djv::vmin(x, y); }); }
DJ_TWIN_TMPL inline void asc_abs_sub(V& d, V a, V b, vector_bool m) {
  djv::binary(d, a, b, m, [](auto x, auto y) {
    auto r = djv::sub(x, y);
    if constexpr (std::is_floating_point_v<decltype(r)>) return std::fabs(r);
    else if constexpr (std::is_signed_v<decltype(r)>) return r < 0 ? -r : r;
    else return x > y ? x - y : y - x;
  });
}
DJ_TWIN_TMPL inline void asc_prelu(V& d, V a, V b, vector_bool m) {
  djv::binary(d, a, b, m, [](auto x, auto y) { return x > 0 ? x : djv::mul(x, y); });
}
// exp(src0 - src1) (asc_exp_sub on FP32 operands; only its half overload is deprecated; TileLang's vexpdif).
DJ_TWIN_TMPL inline void asc_exp_sub(V& d, V a, V b, vector_bool m) {
  djv::binary(d, a, b, m, [](float x, float y) { return djv::ftz(std::exp(x - y)); }, dj_twin::VecClass::Special);
}

template <class V, class S, class = djv::if_reg<V>> inline void asc_add_scalar(V& d, V a, S s, vector_bool m) {
  djv::with_scalar(d, a, s, m, [](auto x, auto y) { return djv::add(x, y); });
}
template <class V, class S, class = djv::if_reg<V>> inline void asc_mul_scalar(V& d, V a, S s, vector_bool m) {
  djv::with_scalar(d, a, s, m, [](auto x, auto y) { return djv::mul(x, y); });
}
template <class V, class S, class = djv::if_reg<V>> inline void asc_muls(V& d, V a, S s, vector_bool m) {
  djv::with_scalar(d, a, s, m, [](auto x, auto y) { return djv::mul(x, y); });
}
template <class V, class S, class = djv::if_reg<V>> inline void asc_max_scalar(V& d, V a, S s, vector_bool m) {
  djv::with_scalar(d, a, s, m, [](auto x, auto y) { return djv::vmax(x, y); });
}
template <class V, class S, class = djv::if_reg<V>> inline void asc_min_scalar(V& d, V a, S s, vector_bool m) {
  djv::with_scalar(d, a, s, m, [](auto x, auto y) { return djv::vmin(x, y); });
}
template <class V, class S, class = djv::if_reg<V>> inline void asc_leakyrelu(V& d, V a, S s, vector_bool m) {
  djv::with_scalar(d, a, s, m, [](auto x, auto y) { return x > 0 ? x : djv::mul(x, y); });
}
// dst = src * value + dst.
template <class V, class S, class = djv::if_reg<V>> inline void asc_axpy(V& d, V a, S s, vector_bool m) {
  const V acc = d;
  const auto sv = djv::scalar_as<V>(s);
  djv::each(d, m, [&](int i) { return djv::fma(djv::get(a, i), sv, djv::get(acc, i)); }, dj_twin::VecClass::Simple,
            djv::step_of(a, acc));
}
// dst = dst * src0 + src1.
DJ_TWIN_TMPL inline void asc_madd(V& d, V a, V b, vector_bool m) {
  const V acc = d;
  djv::each(d, m, [&](int i) { return djv::fma(djv::get(acc, i), djv::get(a, i), djv::get(b, i)); },
            dj_twin::VecClass::Simple, djv::step_of(a, b, acc));
}

DJ_TWIN_TMPL inline void asc_abs(V& d, V a, vector_bool m) {
  djv::unary(d, a, m, [](auto x) {
    if constexpr (std::is_floating_point_v<decltype(x)>) return std::fabs(x);
    else if constexpr (std::is_signed_v<decltype(x)>) return x < 0 ? djv::wrap_sub(decltype(x)(0), x) : x;
    else return x;
  });
}
DJ_TWIN_TMPL inline void asc_neg(V& d, V a, vector_bool m) {
  djv::unary(d, a, m, [](auto x) {
    if constexpr (std::is_floating_point_v<decltype(x)>) return -x;
    else return djv::wrap_sub(decltype(x)(0), x);
  });
}
DJ_TWIN_TMPL inline void asc_relu(V& d, V a, vector_bool m) {
  djv::unary(d, a, m, [](auto x) { return x >= 0 ? x : decltype(x)(0); });
}
DJ_TWIN_TMPL inline void asc_exp(V& d, V a, vector_bool m) {
  djv::unary(d, a, m, [](float x) { return djv::ftz(std::exp(djv::ftz(x))); }, dj_twin::VecClass::Special);
}
DJ_TWIN_TMPL inline void asc_ln(V& d, V a, vector_bool m) {
  djv::unary(d, a, m, [](float x) { return djv::ftz(std::log(djv::ftz(x))); }, dj_twin::VecClass::Special);
}
DJ_TWIN_TMPL inline void asc_sqrt(V& d, V a, vector_bool m) {
  djv::unary(d, a, m, [](float x) { return std::sqrt(djv::ftz(x)); }, dj_twin::VecClass::Special);
}

// Carry forms on 32-bit lanes: carry lane = 1 when the unsigned sum overflows (add) / when there is no
// borrow (sub), as asc_add/asc_addc/asc_sub/asc_subc document ("加法进位或者减法无借位").
template <class V, class = djv::if_reg<V>>
inline void asc_add(vector_bool& carry, V& d, V a, V b, vector_bool m) {
  vector_bool c;
  V out;
  for (int i = 0; i < V::lanes; ++i) {
    if (!djv::active<V>(m, i)) continue;
    const uint64_t s = uint64_t(std::make_unsigned_t<typename V::bits_t>(a.e[i])) +
                       uint64_t(std::make_unsigned_t<typename V::bits_t>(b.e[i]));
    out.e[i] = typename V::bits_t(s);
    c.set_lane(i, V::width, (s >> (8 * V::width)) & 1);
  }
  d = out;
  carry = c;
  dj_twin::count_vector_ops(V::lanes);
}
template <class V, class = djv::if_reg<V>>
inline void asc_addc(vector_bool& carry, V& d, V a, V b, vector_bool carry_src, vector_bool m) {
  vector_bool c;
  V out;
  for (int i = 0; i < V::lanes; ++i) {
    if (!djv::active<V>(m, i)) continue;
    const uint64_t s = uint64_t(std::make_unsigned_t<typename V::bits_t>(a.e[i])) +
                       uint64_t(std::make_unsigned_t<typename V::bits_t>(b.e[i])) +
                       (carry_src.lane(i, V::width) ? 1 : 0);
    out.e[i] = typename V::bits_t(s);
    c.set_lane(i, V::width, (s >> (8 * V::width)) & 1);
  }
  d = out;
  carry = c;
  dj_twin::count_vector_ops(V::lanes);
}
template <class V, class = djv::if_reg<V>>
inline void asc_sub(vector_bool& carry, V& d, V a, V b, vector_bool m) {
  vector_bool c;
  V out;
  for (int i = 0; i < V::lanes; ++i) {
    if (!djv::active<V>(m, i)) continue;
    const uint64_t x = std::make_unsigned_t<typename V::bits_t>(a.e[i]), y = std::make_unsigned_t<typename V::bits_t>(b.e[i]);
    out.e[i] = typename V::bits_t(x - y);
    c.set_lane(i, V::width, x >= y);
  }
  d = out;
  carry = c;
  dj_twin::count_vector_ops(V::lanes);
}
template <class V, class = djv::if_reg<V>>
inline void asc_subc(vector_bool& carry, V& d, V a, V b, vector_bool carry_src, vector_bool m) {
  vector_bool c;
  V out;
  for (int i = 0; i < V::lanes; ++i) {
    if (!djv::active<V>(m, i)) continue;
    const uint64_t x = std::make_unsigned_t<typename V::bits_t>(a.e[i]), y = std::make_unsigned_t<typename V::bits_t>(b.e[i]);
    const uint64_t borrow_in = carry_src.lane(i, V::width) ? 0 : 1;
    out.e[i] = typename V::bits_t(x - y - borrow_in);
    c.set_lane(i, V::width, x >= y + borrow_in);
  }
  d = out;
  carry = c;
  dj_twin::count_vector_ops(V::lanes);
}
// Low and high halves of the full product (unsigned or signed by lane kind).
template <class V, class = djv::if_reg<V>>
inline void asc_mull(V& lo, V& hi, V a, V b, vector_bool m) {
  V l, h;
  const int bits = 8 * V::width;
  for (int i = 0; i < V::lanes; ++i) {
    if (!djv::active<V>(m, i)) continue;
    if constexpr (djv::lane<V::kind>::is_signed) {
      const __int128 p = __int128(a.e[i]) * __int128(b.e[i]);
      l.e[i] = typename V::bits_t(p);
      h.e[i] = typename V::bits_t(p >> bits);
    } else {
      const unsigned __int128 p = (unsigned __int128)a.e[i] * b.e[i];
      l.e[i] = typename V::bits_t(p);
      h.e[i] = typename V::bits_t(p >> bits);
    }
  }
  lo = l;
  hi = h;
  dj_twin::count_vector_ops(V::lanes);
}

// CCE intrinsics TileLang calls directly: vmula (dst += src0 * src1) and vmadd (dst = dst * src0 + src1),
// fused, with merging (inactive lanes keep dst) or zeroing.
template <class V, class Mode, class = djv::if_reg<V>>
inline void vmula(V& d, V a, V b, vector_bool m, Mode mode) {
  const V acc = d;
  djv::each(d, m, [&](int i) { return djv::fma(djv::get(a, i), djv::get(b, i), djv::get(acc, i)); },
            dj_twin::VecClass::Simple, djv::step_of(a, b, acc));
  if (int(mode) == int(MODE_MERGING))
    for (int i = 0; i < V::lanes; ++i)
      if (!djv::active<V>(m, i)) d.e[i] = acc.e[i];
}
template <class V, class Mode, class = djv::if_reg<V>>
inline void vmadd(V& d, V a, V b, vector_bool m, Mode mode) {
  const V acc = d;
  djv::each(d, m, [&](int i) { return djv::fma(djv::get(acc, i), djv::get(a, i), djv::get(b, i)); },
            dj_twin::VecClass::Simple, djv::step_of(a, b, acc));
  if (int(mode) == int(MODE_MERGING))
    for (int i = 0; i < V::lanes; ++i)
      if (!djv::active<V>(m, i)) d.e[i] = acc.e[i];
}

// asc_mula: dst += src0 * src1, fused; asc-devkit's reg API implements it as vmula(dst, src0, src1, mask,
// MODE_ZEROING) (include/c_api/reg_compute: "asc_mula"), so lanes the mask leaves out become 0. Its
// overloads: int16 / uint16 / half / bfloat16 / int32 / uint32 / float.
DJ_TWIN_TMPL inline void asc_mula(V& d, V a, V b, vector_bool m) {
  using K = dj_twin::vreg::Kind;
  static_assert(V::kind == K::S16 || V::kind == K::U16 || V::kind == K::F16 || V::kind == K::BF16 ||
                    V::kind == K::S32 || V::kind == K::U32 || V::kind == K::F32,
                "asc_mula takes int16 / uint16 / half / bfloat16 / int32 / uint32 / float registers");
  vmula(d, a, b, m, MODE_ZEROING);
}

// ---- logic and shifts ----
DJ_TWIN_TMPL inline void asc_and(V& d, V a, V b, vector_bool m) { djv::bitwise(d, a, b, m, [](auto x, auto y) { return x & y; }); }
DJ_TWIN_TMPL inline void asc_or(V& d, V a, V b, vector_bool m) { djv::bitwise(d, a, b, m, [](auto x, auto y) { return x | y; }); }
DJ_TWIN_TMPL inline void asc_xor(V& d, V a, V b, vector_bool m) { djv::bitwise(d, a, b, m, [](auto x, auto y) { return x ^ y; }); }
DJ_TWIN_TMPL inline void asc_not(V& d, V a, vector_bool m) { djv::bitwise(d, a, a, m, [](auto x, auto) { return ~x; }); }

template <class V, class N, class = djv::if_reg<V>> inline void asc_shiftleft(V& d, V a, N n, vector_bool m) {
  if constexpr (djv::is_reg<N>::value)
    djv::each(d, m, [&](int i) { return djv::shl<V>(djv::get(a, i), int64_t(djv::get(n, i))); },
              dj_twin::VecClass::Simple, djv::step_of(a, n));
  else
    djv::each(d, m, [&](int i) { return djv::shl<V>(djv::get(a, i), int64_t(n)); }, dj_twin::VecClass::Simple, a.step);
}
template <class V, class N, class = djv::if_reg<V>> inline void asc_shiftright(V& d, V a, N n, vector_bool m) {
  if constexpr (djv::is_reg<N>::value)
    djv::each(d, m, [&](int i) { return djv::shr<V>(djv::get(a, i), int64_t(djv::get(n, i))); },
              dj_twin::VecClass::Simple, djv::step_of(a, n));
  else
    djv::each(d, m, [&](int i) { return djv::shr<V>(djv::get(a, i), int64_t(n)); }, dj_twin::VecClass::Simple, a.step);
}
template <class V, class N, class = djv::if_reg<V>> inline void asc_shiftleft_scalar(V& d, V a, N n, vector_bool m) {
  djv::each(d, m, [&](int i) { return djv::shl<V>(djv::get(a, i), int64_t(n)); }, dj_twin::VecClass::Simple, a.step);
}
template <class V, class N, class = djv::if_reg<V>> inline void asc_shiftright_scalar(V& d, V a, N n, vector_bool m) {
  djv::each(d, m, [&](int i) { return djv::shr<V>(djv::get(a, i), int64_t(n)); }, dj_twin::VecClass::Simple, a.step);
}

// ---- compare / select ----
#define DJ_TWIN_CMP(NAME, OP)                                                                          \
  DJ_TWIN_TMPL inline void asc_##NAME(vector_bool& d, V a, V b, vector_bool m) { djv::compare(d, a, b, m, OP); } \
  template <class V, class S, class = djv::if_reg<V>>                                                  \
  inline void asc_##NAME##_scalar(vector_bool& d, V a, S s, vector_bool m) {                          \
    V b;                                                                                               \
    const auto sv = djv::scalar_as<V>(s);                                                              \
    for (int i = 0; i < V::lanes; ++i) djv::put(b, i, sv);                                            \
    djv::compare(d, a, b, m, OP);                                                                      \
  }
DJ_TWIN_CMP(eq, 0)
DJ_TWIN_CMP(ne, 1)
DJ_TWIN_CMP(lt, 2)
DJ_TWIN_CMP(le, 3)
DJ_TWIN_CMP(gt, 4)
DJ_TWIN_CMP(ge, 5)
#undef DJ_TWIN_CMP

// dst = mask ? src0 : src1, per lane.
DJ_TWIN_TMPL inline void asc_select(V& d, V a, V b, vector_bool m) {
  V out;
  for (int i = 0; i < V::lanes; ++i) out.e[i] = djv::active<V>(m, i) ? a.e[i] : b.e[i];
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Simple, djv::step_of(a, b, m));
  d = out;
}

// ---- broadcast, index ----
template <class V, class S, class = djv::if_reg<V>> inline void asc_duplicate_scalar(V& d, S s, vector_bool m) {
  const auto sv = djv::scalar_as<V>(s);
  djv::each(d, m, [&](int) { return sv; });
}
template <class V, class S, class = djv::if_reg<V>> inline void asc_duplicate_scalar(V& d, S s) {
  asc_duplicate_scalar(d, s, djv::make_mask(djv::P_ALL, V::width));
}
// Broadcast the lowest (asc_duplicate) or highest (asc_duplicate_highest) lane of src.
DJ_TWIN_TMPL inline void asc_duplicate(V& d, V a, vector_bool m) {
  V out;
  for (int i = 0; i < V::lanes; ++i)
    if (djv::active<V>(m, i)) out.e[i] = a.e[0];
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Simple, djv::step_of(a, m));
  d = out;
}
DJ_TWIN_TMPL inline void asc_duplicate_highest(V& d, V a, vector_bool m) {
  V out;
  for (int i = 0; i < V::lanes; ++i)
    if (djv::active<V>(m, i)) out.e[i] = a.e[V::lanes - 1];
  out.step = dj_twin::count_vector_ops(V::lanes, dj_twin::VecClass::Simple, djv::step_of(a, m));
  d = out;
}
// {v, v+1, ..., v+VL_T-1} and {v+VL_T-1, ..., v+1, v}; integer lanes wrap.
template <class V, class S, class = djv::if_reg<V>> inline void asc_arange(V& d, S v) {
  const auto sv = djv::scalar_as<V>(v);
  djv::each(d, djv::make_mask(djv::P_ALL, V::width), [&](int i) { return djv::add(sv, djv::calc_t<V>(i)); });
}
template <class V, class S, class = djv::if_reg<V>> inline void asc_arange_descend(V& d, S v) {
  const auto sv = djv::scalar_as<V>(v);
  djv::each(d, djv::make_mask(djv::P_ALL, V::width),
            [&](int i) { return djv::add(sv, djv::calc_t<V>(V::lanes - 1 - i)); });
}
