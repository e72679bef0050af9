// simt_api/math.h — the SIMT math functions TileLang's SIMT code calls (max/min on scalars, the C math
// functions, rsqrt), with IEEE float semantics. exp/log/sqrt/fabs/floor/ceil/round/erf/tanh... come from
// <cmath>'s global-namespace float overloads.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "dj_twin/runtime.h"

// max/min of two numbers of the same arithmetic type (TileLang emits `max(a.x, b.x)`); the float
// forms follow fmaxf/fminf: a NaN operand loses to a number (device behaviour not documented).
// Each call counts one SIMT op (dj_twin::count_simt_ops); <cmath>'s own functions count nothing.
template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>> inline T max(T a, T b) {
  ::dj_twin::count_simt_ops(1);
  if constexpr (std::is_floating_point_v<T>) return std::fmax(a, b);
  else return a > b ? a : b;
}
template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>> inline T min(T a, T b) {
  ::dj_twin::count_simt_ops(1);
  if constexpr (std::is_floating_point_v<T>) return std::fmin(a, b);
  else return a < b ? a : b;
}
inline float rsqrtf(float x) { ::dj_twin::count_simt_ops(1); return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { ::dj_twin::count_simt_ops(1); return 1.0 / std::sqrt(x); }
inline float rsqrt(float x) { ::dj_twin::count_simt_ops(1); return 1.0f / std::sqrt(x); }
