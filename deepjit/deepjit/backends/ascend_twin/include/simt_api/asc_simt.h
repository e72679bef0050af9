// simt_api/asc_simt.h — SIMT regions on the twin: asc_vf_call<f>(cce::dim3(n), args...) runs f once
// per lane on the calling vector core, threadIdx / blockIdx / blockDim / gridDim, the small vector
// structs (float2, int4, ...) with element-wise arithmetic, make_*, and the lane barrier
// asc_syncthreads and warp shuffles.
//
// Lanes run as a plain loop (lane 0, 1, ... in order) unless the toolchain defines
// DJ_TWIN_SIMT_FIBERS (it does when the source names a barrier, shuffle or warp reduce): then each lane
// is a ucontext fiber that runs until it reaches a barrier or a warp collective. A block barrier
// (asc_syncthreads) releases when every live lane of the call has reached it; one some lanes never reach
// (they returned) is a launch error. A warp collective (asc_shfl*, asc_reduce_*) involves only the
// active lanes of its own 32-lane warp (those waiting at it once no lane of the warp can run on), so
// `if (tx < 32) { asc_reduce_add(...) }` between two asc_syncthreads works as on the chip.
// GM / UB atomics (asc_atomic_*) are real atomic read-modify-writes: cores run as concurrent threads.
//
// Counters (dj_twin::count_simt_ops, Route::SIMT_GM_*): lanes are plain host code, so only the
// operations the twin itself implements are counted: each element of a vector-struct operator,
// max/min/rsqrt (simt_api/math.h) and each lane's shuffle or warp reduction (one op each), all only
// inside asc_vf_call, and the GM bytes of asc_ldcg / asc_ldca / asc_stcg / asc_stwt. Built-in scalar arithmetic (a + b on floats / ints)
// and plain dereferences of __gm__ pointers are not seen by the twin and count nothing.
// Timeline (dj_twin/timeline.h Ev::Simt): every asc_ldcg / asc_ldca / asc_stcg / asc_stwt is also one lane
// memory instruction; a lane's plain arithmetic and __ubuf__ dereferences are charged only where the
// kernel declares them with DJ_SIMT_WORK(alu, ub_loads, ub_stores) (a twin extension: a kernel meant for
// bisheng too defines it empty when undefined, `#ifndef DJ_SIMT_WORK`).
#pragma once

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <vector>

#include "dj_twin/runtime.h"
#include "dj_twin/types.h"

namespace cce {
struct dim3 {
  uint32_t x, y, z;
  constexpr dim3(uint32_t x_ = 1, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}  // NOLINT
};
}  // namespace cce
using cce::dim3;

namespace dj_twin {
struct Index3 { uint32_t x = 0, y = 0, z = 0; };
}  // namespace dj_twin

#define DJ_SIMT_WORK(alu, ub_loads, ub_stores) ::dj_twin::count_simt_work((alu), (ub_loads), (ub_stores))

inline thread_local ::dj_twin::Index3 threadIdx;
inline thread_local ::dj_twin::Index3 blockDim;
inline thread_local ::dj_twin::Index3 blockIdx;
inline thread_local ::dj_twin::Index3 gridDim;

// ---- vector structs (aligned like the device's, so a float2 access is one 8-byte access) ---- --------------------------------------------------------------------------------
// Integer-only element-wise operators (templates, so float structs never instantiate them).
#define DJ_TWIN_VEC_INT_OP(NAME, OP, ...)                                                            \
  template <typename U = NAME>                                                                      \
  inline U operator OP(U a, NAME b) { ::dj_twin::count_simt_ops(sizeof(NAME) / sizeof(a.x)); return U{__VA_ARGS__}; }
#define DJ_TWIN_VEC1(NAME, T)                                                                       \
  struct NAME { T x; };                                                                             \
  inline NAME make_##NAME(T x) { return NAME{x}; }                                                   \
  inline NAME operator+(NAME a, NAME b) { ::dj_twin::count_simt_ops(1); return NAME{T(a.x + b.x)}; }                               \
  inline NAME operator-(NAME a, NAME b) { ::dj_twin::count_simt_ops(1); return NAME{T(a.x - b.x)}; }                               \
  inline NAME operator*(NAME a, NAME b) { ::dj_twin::count_simt_ops(1); return NAME{T(a.x * b.x)}; }                               \
  inline NAME operator/(NAME a, NAME b) { ::dj_twin::count_simt_ops(1); return NAME{T(a.x / b.x)}; }
#define DJ_TWIN_VEC2(NAME, T)                                                                       \
  struct alignas(2 * sizeof(T)) NAME { T x, y; };                                                                          \
  inline NAME make_##NAME(T x, T y) { return NAME{x, y}; }                                           \
  inline NAME operator+(NAME a, NAME b) { ::dj_twin::count_simt_ops(2); return NAME{T(a.x + b.x), T(a.y + b.y)}; }                 \
  inline NAME operator-(NAME a, NAME b) { ::dj_twin::count_simt_ops(2); return NAME{T(a.x - b.x), T(a.y - b.y)}; }                 \
  inline NAME operator*(NAME a, NAME b) { ::dj_twin::count_simt_ops(2); return NAME{T(a.x * b.x), T(a.y * b.y)}; }                 \
  inline NAME operator/(NAME a, NAME b) { ::dj_twin::count_simt_ops(2); return NAME{T(a.x / b.x), T(a.y / b.y)}; }
#define DJ_TWIN_VEC4(NAME, T)                                                                       \
  struct alignas(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16) NAME { T x, y, z, w; };                                                                    \
  inline NAME make_##NAME(T x, T y, T z, T w) { return NAME{x, y, z, w}; }                           \
  inline NAME operator+(NAME a, NAME b) { ::dj_twin::count_simt_ops(4); return NAME{T(a.x + b.x), T(a.y + b.y), T(a.z + b.z), T(a.w + b.w)}; } \
  inline NAME operator-(NAME a, NAME b) { ::dj_twin::count_simt_ops(4); return NAME{T(a.x - b.x), T(a.y - b.y), T(a.z - b.z), T(a.w - b.w)}; } \
  inline NAME operator*(NAME a, NAME b) { ::dj_twin::count_simt_ops(4); return NAME{T(a.x * b.x), T(a.y * b.y), T(a.z * b.z), T(a.w * b.w)}; } \
  inline NAME operator/(NAME a, NAME b) { ::dj_twin::count_simt_ops(4); return NAME{T(a.x / b.x), T(a.y / b.y), T(a.z / b.z), T(a.w / b.w)}; }

DJ_TWIN_VEC1(char1, int8_t)
DJ_TWIN_VEC1(uchar1, uint8_t)
DJ_TWIN_VEC1(short1, int16_t)
DJ_TWIN_VEC1(ushort1, uint16_t)
DJ_TWIN_VEC1(int1, int32_t)
DJ_TWIN_VEC1(uint1, uint32_t)
DJ_TWIN_VEC1(long1, int64_t)
DJ_TWIN_VEC1(ulong1, uint64_t)
DJ_TWIN_VEC1(longlong1, int64_t)
DJ_TWIN_VEC1(ulonglong1, uint64_t)
DJ_TWIN_VEC1(float1, float)
DJ_TWIN_VEC2(char2, int8_t)
DJ_TWIN_VEC2(uchar2, uint8_t)
DJ_TWIN_VEC2(short2, int16_t)
DJ_TWIN_VEC2(ushort2, uint16_t)
DJ_TWIN_VEC2(int2, int32_t)
DJ_TWIN_VEC2(uint2, uint32_t)
DJ_TWIN_VEC2(long2, int64_t)
DJ_TWIN_VEC2(ulong2, uint64_t)
DJ_TWIN_VEC2(longlong2, int64_t)
DJ_TWIN_VEC2(ulonglong2, uint64_t)
DJ_TWIN_VEC2(float2, float)
DJ_TWIN_VEC4(char4, int8_t)
DJ_TWIN_VEC4(uchar4, uint8_t)
DJ_TWIN_VEC4(short4, int16_t)
DJ_TWIN_VEC4(ushort4, uint16_t)
DJ_TWIN_VEC4(int4, int32_t)
DJ_TWIN_VEC4(uint4, uint32_t)
DJ_TWIN_VEC4(longlong4, int64_t)
DJ_TWIN_VEC4(ulonglong4, uint64_t)
DJ_TWIN_VEC4(float4, float)
DJ_TWIN_VEC_INT_OP(char1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(char1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(char1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(char1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(char1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(char1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(uchar1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(uchar1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(uchar1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(uchar1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(uchar1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(uchar1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(short1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(short1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(short1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(short1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(short1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(short1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(ushort1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(ushort1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(ushort1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(ushort1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(ushort1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(ushort1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(int1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(int1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(int1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(int1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(int1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(int1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(uint1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(uint1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(uint1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(uint1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(uint1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(uint1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(long1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(long1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(long1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(long1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(long1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(long1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(ulong1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(ulong1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(ulong1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(ulong1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(ulong1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(ulong1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(longlong1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(longlong1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(longlong1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(longlong1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(longlong1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(longlong1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(ulonglong1, %, decltype(a.x)(a.x % b.x))
DJ_TWIN_VEC_INT_OP(ulonglong1, &, decltype(a.x)(a.x & b.x))
DJ_TWIN_VEC_INT_OP(ulonglong1, |, decltype(a.x)(a.x | b.x))
DJ_TWIN_VEC_INT_OP(ulonglong1, ^, decltype(a.x)(a.x ^ b.x))
DJ_TWIN_VEC_INT_OP(ulonglong1, <<, decltype(a.x)(a.x << b.x))
DJ_TWIN_VEC_INT_OP(ulonglong1, >>, decltype(a.x)(a.x >> b.x))
DJ_TWIN_VEC_INT_OP(char2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(char2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(char2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(char2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(char2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(char2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(uchar2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(uchar2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(uchar2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(uchar2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(uchar2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(uchar2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(short2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(short2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(short2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(short2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(short2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(short2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(ushort2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(ushort2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(ushort2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(ushort2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(ushort2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(ushort2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(int2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(int2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(int2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(int2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(int2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(int2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(uint2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(uint2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(uint2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(uint2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(uint2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(uint2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(long2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(long2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(long2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(long2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(long2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(long2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(ulong2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(ulong2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(ulong2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(ulong2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(ulong2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(ulong2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(longlong2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(longlong2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(longlong2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(longlong2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(longlong2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(longlong2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(ulonglong2, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y))
DJ_TWIN_VEC_INT_OP(ulonglong2, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y))
DJ_TWIN_VEC_INT_OP(ulonglong2, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y))
DJ_TWIN_VEC_INT_OP(ulonglong2, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y))
DJ_TWIN_VEC_INT_OP(ulonglong2, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y))
DJ_TWIN_VEC_INT_OP(ulonglong2, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y))
DJ_TWIN_VEC_INT_OP(char4, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y), decltype(a.z)(a.z % b.z), decltype(a.w)(a.w % b.w))
DJ_TWIN_VEC_INT_OP(char4, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y), decltype(a.z)(a.z & b.z), decltype(a.w)(a.w & b.w))
DJ_TWIN_VEC_INT_OP(char4, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y), decltype(a.z)(a.z | b.z), decltype(a.w)(a.w | b.w))
DJ_TWIN_VEC_INT_OP(char4, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y), decltype(a.z)(a.z ^ b.z), decltype(a.w)(a.w ^ b.w))
DJ_TWIN_VEC_INT_OP(char4, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y), decltype(a.z)(a.z << b.z), decltype(a.w)(a.w << b.w))
DJ_TWIN_VEC_INT_OP(char4, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y), decltype(a.z)(a.z >> b.z), decltype(a.w)(a.w >> b.w))
DJ_TWIN_VEC_INT_OP(uchar4, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y), decltype(a.z)(a.z % b.z), decltype(a.w)(a.w % b.w))
DJ_TWIN_VEC_INT_OP(uchar4, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y), decltype(a.z)(a.z & b.z), decltype(a.w)(a.w & b.w))
DJ_TWIN_VEC_INT_OP(uchar4, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y), decltype(a.z)(a.z | b.z), decltype(a.w)(a.w | b.w))
DJ_TWIN_VEC_INT_OP(uchar4, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y), decltype(a.z)(a.z ^ b.z), decltype(a.w)(a.w ^ b.w))
DJ_TWIN_VEC_INT_OP(uchar4, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y), decltype(a.z)(a.z << b.z), decltype(a.w)(a.w << b.w))
DJ_TWIN_VEC_INT_OP(uchar4, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y), decltype(a.z)(a.z >> b.z), decltype(a.w)(a.w >> b.w))
DJ_TWIN_VEC_INT_OP(short4, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y), decltype(a.z)(a.z % b.z), decltype(a.w)(a.w % b.w))
DJ_TWIN_VEC_INT_OP(short4, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y), decltype(a.z)(a.z & b.z), decltype(a.w)(a.w & b.w))
DJ_TWIN_VEC_INT_OP(short4, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y), decltype(a.z)(a.z | b.z), decltype(a.w)(a.w | b.w))
DJ_TWIN_VEC_INT_OP(short4, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y), decltype(a.z)(a.z ^ b.z), decltype(a.w)(a.w ^ b.w))
DJ_TWIN_VEC_INT_OP(short4, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y), decltype(a.z)(a.z << b.z), decltype(a.w)(a.w << b.w))
DJ_TWIN_VEC_INT_OP(short4, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y), decltype(a.z)(a.z >> b.z), decltype(a.w)(a.w >> b.w))
DJ_TWIN_VEC_INT_OP(ushort4, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y), decltype(a.z)(a.z % b.z), decltype(a.w)(a.w % b.w))
DJ_TWIN_VEC_INT_OP(ushort4, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y), decltype(a.z)(a.z & b.z), decltype(a.w)(a.w & b.w))
DJ_TWIN_VEC_INT_OP(ushort4, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y), decltype(a.z)(a.z | b.z), decltype(a.w)(a.w | b.w))
DJ_TWIN_VEC_INT_OP(ushort4, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y), decltype(a.z)(a.z ^ b.z), decltype(a.w)(a.w ^ b.w))
DJ_TWIN_VEC_INT_OP(ushort4, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y), decltype(a.z)(a.z << b.z), decltype(a.w)(a.w << b.w))
DJ_TWIN_VEC_INT_OP(ushort4, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y), decltype(a.z)(a.z >> b.z), decltype(a.w)(a.w >> b.w))
DJ_TWIN_VEC_INT_OP(int4, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y), decltype(a.z)(a.z % b.z), decltype(a.w)(a.w % b.w))
DJ_TWIN_VEC_INT_OP(int4, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y), decltype(a.z)(a.z & b.z), decltype(a.w)(a.w & b.w))
DJ_TWIN_VEC_INT_OP(int4, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y), decltype(a.z)(a.z | b.z), decltype(a.w)(a.w | b.w))
DJ_TWIN_VEC_INT_OP(int4, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y), decltype(a.z)(a.z ^ b.z), decltype(a.w)(a.w ^ b.w))
DJ_TWIN_VEC_INT_OP(int4, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y), decltype(a.z)(a.z << b.z), decltype(a.w)(a.w << b.w))
DJ_TWIN_VEC_INT_OP(int4, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y), decltype(a.z)(a.z >> b.z), decltype(a.w)(a.w >> b.w))
DJ_TWIN_VEC_INT_OP(uint4, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y), decltype(a.z)(a.z % b.z), decltype(a.w)(a.w % b.w))
DJ_TWIN_VEC_INT_OP(uint4, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y), decltype(a.z)(a.z & b.z), decltype(a.w)(a.w & b.w))
DJ_TWIN_VEC_INT_OP(uint4, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y), decltype(a.z)(a.z | b.z), decltype(a.w)(a.w | b.w))
DJ_TWIN_VEC_INT_OP(uint4, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y), decltype(a.z)(a.z ^ b.z), decltype(a.w)(a.w ^ b.w))
DJ_TWIN_VEC_INT_OP(uint4, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y), decltype(a.z)(a.z << b.z), decltype(a.w)(a.w << b.w))
DJ_TWIN_VEC_INT_OP(uint4, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y), decltype(a.z)(a.z >> b.z), decltype(a.w)(a.w >> b.w))
DJ_TWIN_VEC_INT_OP(longlong4, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y), decltype(a.z)(a.z % b.z), decltype(a.w)(a.w % b.w))
DJ_TWIN_VEC_INT_OP(longlong4, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y), decltype(a.z)(a.z & b.z), decltype(a.w)(a.w & b.w))
DJ_TWIN_VEC_INT_OP(longlong4, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y), decltype(a.z)(a.z | b.z), decltype(a.w)(a.w | b.w))
DJ_TWIN_VEC_INT_OP(longlong4, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y), decltype(a.z)(a.z ^ b.z), decltype(a.w)(a.w ^ b.w))
DJ_TWIN_VEC_INT_OP(longlong4, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y), decltype(a.z)(a.z << b.z), decltype(a.w)(a.w << b.w))
DJ_TWIN_VEC_INT_OP(longlong4, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y), decltype(a.z)(a.z >> b.z), decltype(a.w)(a.w >> b.w))
DJ_TWIN_VEC_INT_OP(ulonglong4, %, decltype(a.x)(a.x % b.x), decltype(a.y)(a.y % b.y), decltype(a.z)(a.z % b.z), decltype(a.w)(a.w % b.w))
DJ_TWIN_VEC_INT_OP(ulonglong4, &, decltype(a.x)(a.x & b.x), decltype(a.y)(a.y & b.y), decltype(a.z)(a.z & b.z), decltype(a.w)(a.w & b.w))
DJ_TWIN_VEC_INT_OP(ulonglong4, |, decltype(a.x)(a.x | b.x), decltype(a.y)(a.y | b.y), decltype(a.z)(a.z | b.z), decltype(a.w)(a.w | b.w))
DJ_TWIN_VEC_INT_OP(ulonglong4, ^, decltype(a.x)(a.x ^ b.x), decltype(a.y)(a.y ^ b.y), decltype(a.z)(a.z ^ b.z), decltype(a.w)(a.w ^ b.w))
DJ_TWIN_VEC_INT_OP(ulonglong4, <<, decltype(a.x)(a.x << b.x), decltype(a.y)(a.y << b.y), decltype(a.z)(a.z << b.z), decltype(a.w)(a.w << b.w))
DJ_TWIN_VEC_INT_OP(ulonglong4, >>, decltype(a.x)(a.x >> b.x), decltype(a.y)(a.y >> b.y), decltype(a.z)(a.z >> b.z), decltype(a.w)(a.w >> b.w))
#undef DJ_TWIN_VEC_INT_OP
#undef DJ_TWIN_VEC1
#undef DJ_TWIN_VEC2
#undef DJ_TWIN_VEC4

// ---- lanes -----------------------------------------------------------------------------------------
namespace dj_twin {

inline constexpr uint32_t kWarpSize = 32;
inline constexpr size_t kLaneStack = 128 * 1024;

// Where a fiber lane stands: running, at a block barrier (asc_syncthreads) or at a warp collective
// (shuffle / warp reduce), which involves only the active lanes of its own 32-lane warp.
enum class LaneWait : uint8_t { None, Block, Warp };

struct Lane {
  ucontext_t ctx;
  uint8_t* stack = nullptr;
  bool done = false;
  LaneWait wait = LaneWait::None;
  const char* op = nullptr;      // the collective or barrier the lane waits at
  uint32_t x, y, z;
  alignas(16) uint8_t slot[16];  // the value a lane brings to a warp collective
};

// A warp collective's published values: the lanes that took part (the active lanes) and their values,
// stable until every one of them has read it (the warp's next collective cannot release before).
struct WarpExchange {
  uint32_t active = 0;
  alignas(16) uint8_t slots[32][16];
};

struct Lanes {
  std::vector<Lane> lanes;
  std::vector<WarpExchange> warps;
  ucontext_t scheduler;
  Lane* current = nullptr;
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
  ~Lanes() {
    for (Lane& l : lanes)
      if (l.stack) munmap(l.stack - 4096, kLaneStack + 4096);
  }
};

inline thread_local Lanes* tls_lanes = nullptr;

inline void lane_entry() {
  Lanes& ls = *tls_lanes;
  ls.body(ls.arg);
  ls.current->done = true;
  swapcontext(&ls.current->ctx, &ls.scheduler);
}

inline void set_lane_index(const Lane& l) {
  threadIdx.x = l.x;
  threadIdx.y = l.y;
  threadIdx.z = l.z;
}

// Releases one warp collective of warp w if some of its lanes wait at one: the lanes waiting at the
// same collective as the warp's lowest waiting lane are its active lanes (lanes of the warp that
// finished, wait at a block barrier or at another collective are inactive for it, as a divergent
// branch leaves them on the chip: asc_reduce_add.md "Warp内所有活跃线程"). Returns whether one released.
inline bool release_warp_collective(Lanes& ls, size_t w, size_t n) {
  const char* op = nullptr;
  uint32_t active = 0;
  WarpExchange& ex = ls.warps[w];
  for (size_t lane = 0; lane < kWarpSize && w * kWarpSize + lane < n; ++lane) {
    Lane& l = ls.lanes[w * kWarpSize + lane];
    if (l.done || l.wait != LaneWait::Warp) continue;
    if (!op) op = l.op;
    if (std::strcmp(op, l.op) != 0) continue;  // another collective: released in a later round
    active |= 1u << lane;
    std::memcpy(ex.slots[lane], l.slot, sizeof l.slot);
    l.wait = LaneWait::None;
  }
  ex.active = active;
  return active != 0;
}

// Runs body(arg) for every lane of dims as fibers, switching at barriers and warp collectives.
inline void run_lanes_as_fibers(const cce::dim3& dims, void (*body)(void*), void* arg) {
  static thread_local Lanes pool;
  Lanes& ls = pool;
  size_t n = size_t(dims.x) * dims.y * dims.z;
  if (ls.lanes.size() < n) ls.lanes.resize(n);
  const size_t num_warps = (n + kWarpSize - 1) / kWarpSize;
  if (ls.warps.size() < num_warps) ls.warps.resize(num_warps);
  ls.body = body;
  ls.arg = arg;
  tls_lanes = &ls;
  for (size_t i = 0; i < n; ++i) {
    Lane& l = ls.lanes[i];
    if (!l.stack) {
      void* mem = mmap(nullptr, kLaneStack + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem == MAP_FAILED) fail("asc_vf_call: cannot map a stack for SIMT lane %zu", i);
      mprotect(mem, 4096, PROT_NONE);  // overflow guard
      l.stack = static_cast<uint8_t*>(mem) + 4096;
    }
    l.done = false;
    l.wait = LaneWait::None;
    l.x = uint32_t(i % dims.x);
    l.y = uint32_t(i / dims.x % dims.y);
    l.z = uint32_t(i / (size_t(dims.x) * dims.y));
    getcontext(&l.ctx);
    l.ctx.uc_stack.ss_sp = l.stack;
    l.ctx.uc_stack.ss_size = kLaneStack;
    l.ctx.uc_link = nullptr;
    makecontext(&l.ctx, lane_entry, 0);
  }
  for (;;) {
    // Every runnable lane runs until it finishes or waits.
    for (size_t i = 0; i < n; ++i) {
      Lane& l = ls.lanes[i];
      if (!l.done && l.wait == LaneWait::None) {
        ls.current = &l;
        set_lane_index(l);
        swapcontext(&ls.scheduler, &l.ctx);
      }
    }
    // Warp collectives first: they never wait for lanes outside their warp.
    bool released = false;
    for (size_t w = 0; w < num_warps; ++w) released |= release_warp_collective(ls, w, n);
    if (released) continue;
    size_t finished = 0, waiting = 0;
    for (size_t i = 0; i < n; ++i) {
      finished += ls.lanes[i].done;
      waiting += !ls.lanes[i].done && ls.lanes[i].wait == LaneWait::Block;
    }
    if (finished == n) break;
    if (finished)
      fail("asc_vf_call: %zu of %zu SIMT lanes wait at a block barrier (asc_syncthreads) that %zu finished lanes "
           "never reach", waiting, n, finished);
    for (size_t i = 0; i < n; ++i) ls.lanes[i].wait = LaneWait::None;
  }
  tls_lanes = nullptr;
}

inline Lanes& barrier_lanes(const char* op) {
  if (!tls_lanes)
    fail("%s: SIMT lanes run as a loop here; the twin toolchain runs them as fibers when the kernel source names "
         "asc_syncthreads / __syncthreads / asc_shfl* / asc_reduce_*", op);
  return *tls_lanes;
}

inline void lane_wait(LaneWait kind, const char* op) {
  Lanes& ls = barrier_lanes(op);
  Lane* me = ls.current;
  me->wait = kind;
  me->op = op;
  swapcontext(&me->ctx, &ls.scheduler);
  set_lane_index(*me);
}

inline void lane_barrier(const char* op) { lane_wait(LaneWait::Block, op); }

// Brings `value` to a warp collective; returns the warp's published values and sets *lane to the
// caller's lane within its warp.
template <typename T>
inline const WarpExchange& warp_exchange(const T& value, const char* op, int* lane) {
  static_assert(sizeof(T) <= 16, "warp collectives exchange values of at most 16 bytes");
  Lanes& ls = barrier_lanes(op);
  Lane* me = ls.current;
  size_t index = size_t(me - ls.lanes.data());
  std::memcpy(me->slot, &value, sizeof(T));
  lane_wait(LaneWait::Warp, op);
  *lane = int(index % kWarpSize);
  return ls.warps[index / kWarpSize];
}

// A shuffle reads the value of source lane source_of(lane) of the caller's warp; an inactive source
// gives "the uninitialised register value" (asc_shfl.md 约束说明): the twin returns all-ones bytes (NaN
// for floats), so a kernel that relies on one shows it.
template <typename T>
inline T shfl(T value, int (*source_of)(int lane, int arg, int width), int arg, int width, const char* op) {
  count_simt_ops(1);
  if (width <= 0 || width > int(kWarpSize) || (width & (width - 1))) fail("%s: width %d is not a power of two <= 32",
                                                                          op, width);
  int lane = 0;
  const WarpExchange& ex = warp_exchange(value, op, &lane);
  int src = source_of(lane, arg, width);
  T out;
  if (src >= 0 && src < int(kWarpSize) && (ex.active >> src) & 1) std::memcpy(&out, ex.slots[src], sizeof(T));
  else std::memset(static_cast<void*>(&out), 0xFF, sizeof(T));
  return out;
}

}  // namespace dj_twin

template <auto F, typename... Args>
inline void asc_vf_call(cce::dim3 dims, Args... args) {
  using namespace dj_twin;
  poll();
  blockDim.x = dims.x;
  blockDim.y = dims.y;
  blockDim.z = dims.z;
  blockIdx.x = uint32_t(core().block_idx);
  gridDim.x = uint32_t(core().num_blocks);
  const uint64_t lanes = uint64_t(dims.x) * dims.y * dims.z;
  if (lanes == 0 || lanes > 2048) fail("asc_vf_call: %llu lanes (the chip allows 1..2048)", (unsigned long long)lanes);
  tls_in_simt = true;
#ifdef DJ_TWIN_SIMT_FIBERS
  struct Call {
    std::tuple<Args...> args;
    static void run(void* self) { std::apply(F, static_cast<Call*>(self)->args); }
  } call{std::tuple<Args...>(args...)};
  run_lanes_as_fibers(dims, &Call::run, &call);
#else
  for (uint32_t z = 0; z < dims.z; ++z)
    for (uint32_t y = 0; y < dims.y; ++y)
      for (uint32_t x = 0; x < dims.x; ++x) {
        threadIdx.x = x;
        threadIdx.y = y;
        threadIdx.z = z;
        F(args...);
      }
#endif
  tls_in_simt = false;
  threadIdx = {};
}

// ---- SIMT global-memory access helpers (asc_ldcg.md / asc_ldca.md / asc_stcg.md / asc_stwt.md): each
// access is range-checked and counted as GM bytes; the cache policy matters only to the L2 model
// (asc_ldca through the core's data cache, the others streamed: dj_twin/runtime.h touch_gm).
namespace dj_twin {
template <typename T>
inline T simt_gm_load(const T* address, const char* op, GmAccess how) {
  check_gm(address, sizeof(T), op);
  const uint64_t l2 = touch_gm(address, sizeof(T), false, how);
  count_move(Route::SIMT_GM_LOAD, sizeof(T), l2);
  return *address;
}
template <typename T>
inline void simt_gm_store(T* address, T value, const char* op) {
  check_gm(address, sizeof(T), op);
  touch_gm(address, sizeof(T), true, GmAccess::SimtStream);
  count_move(Route::SIMT_GM_STORE, sizeof(T));
  *address = value;
}
}  // namespace dj_twin

// ---- SIMT atomics (asc-devkit docs/zh/api/SIMT-API/原子操作/asc_atomic_*.md): one read-modify-write of
// a UB or GM element, atomic across every lane and core; each returns the element's value before it.
// Types: int32 / uint32 / float / half / bfloat16_t / half2 / bfloat16x2_t (UB or GM), int64 / uint64 (GM
// only). Narrow floats combine in float, rounded once to the element type (nearest-even). ----------------
namespace dj_twin {
template <typename T>
inline void check_simt_atomic(T* address, const char* op) {
  Core& c = core();
  if (c.has_mem[int(Mem::UB)] && onchip_offset(Mem::UB, address) >= 0 &&
      uint64_t(onchip_offset(Mem::UB, address)) < kMemSize[int(Mem::UB)]) {
    if constexpr (sizeof(T) == 8) fail("%s: 64-bit atomics act on global memory only", op);
    check(Mem::UB, address, sizeof(T), op);
    return;
  }
  check_gm(address, sizeof(T), op);
  touch_gm(address, sizeof(T), true, GmAccess::SimtStream);
  count_move(Route::SIMT_GM_STORE, sizeof(T));
}
template <typename T, typename F>
inline T simt_atomic(T* address, T value, F combine, const char* op) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "SIMT atomics act on 2-, 4- or 8-byte elements");
  count_simt_ops(1);
  check_simt_atomic(address, op);
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  auto* word = reinterpret_cast<Bits*>(address);
  Bits expected = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    T old_value;
    std::memcpy(&old_value, &expected, sizeof(T));
    T next = combine(old_value, value);
    Bits desired;
    std::memcpy(&desired, &next, sizeof(T));
    if (__atomic_compare_exchange_n(word, &expected, desired, true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
      return old_value;
  }
}
// Element-wise on the pair types (half2, bfloat16x2_t: members x, y), else on the value.
template <typename T, typename F>
inline T simt_combine(T a, T b, F f) {
  if constexpr (std::is_arithmetic_v<T>) return f(a, b);
  else if constexpr (sizeof(T) == 2) return T(f(float(a), float(b)));
  else return T{decltype(a.x)(f(float(a.x), float(b.x))), decltype(a.y)(f(float(a.y), float(b.y)))};
}
}  // namespace dj_twin

template <typename T>
inline T asc_atomic_add(T* address, T value) {
  return ::dj_twin::simt_atomic(address, value, [](T a, T b) {
    return ::dj_twin::simt_combine(a, b, [](auto x, auto y) { return x + y; }); }, "asc_atomic_add");
}
template <typename T>
inline T asc_atomic_sub(T* address, T value) {
  return ::dj_twin::simt_atomic(address, value, [](T a, T b) {
    return ::dj_twin::simt_combine(a, b, [](auto x, auto y) { return x - y; }); }, "asc_atomic_sub");
}
template <typename T>
inline T asc_atomic_max(T* address, T value) {
  return ::dj_twin::simt_atomic(address, value, [](T a, T b) {
    return ::dj_twin::simt_combine(a, b, [](auto x, auto y) { return x < y ? y : x; }); }, "asc_atomic_max");
}
template <typename T>
inline T asc_atomic_min(T* address, T value) {
  return ::dj_twin::simt_atomic(address, value, [](T a, T b) {
    return ::dj_twin::simt_combine(a, b, [](auto x, auto y) { return y < x ? y : x; }); }, "asc_atomic_min");
}
template <typename T>
inline T asc_atomic_exch(T* address, T value) {
  return ::dj_twin::simt_atomic(address, value, [](T, T b) { return b; }, "asc_atomic_exch");
}

template <typename T>
inline T asc_ldcg(T* address) { return ::dj_twin::simt_gm_load(address, "asc_ldcg", ::dj_twin::GmAccess::SimtStream); }
template <typename T>
inline T asc_ldca(T* address) { return ::dj_twin::simt_gm_load(address, "asc_ldca", ::dj_twin::GmAccess::SimtCached); }
template <typename T>
inline void asc_stcg(T* address, T value) { ::dj_twin::simt_gm_store(address, value, "asc_stcg"); }
template <typename T>
inline void asc_stwt(T* address, T value) { ::dj_twin::simt_gm_store(address, value, "asc_stwt"); }

inline void asc_syncthreads() { ::dj_twin::lane_barrier("asc_syncthreads"); }
inline void __syncthreads() { ::dj_twin::lane_barrier("__syncthreads"); }
inline void asc_threadfence() {}

template <typename T>
inline T asc_shfl_xor(T value, int lane_mask, int width = 32) {
  return ::dj_twin::shfl(value, [](int lane, int arg, int w) { return (lane & ~(w - 1)) | ((lane ^ arg) & (w - 1)); },
                         lane_mask, width, "asc_shfl_xor");
}
template <typename T>
inline T asc_shfl(T value, int src_lane, int width = 32) {
  return ::dj_twin::shfl(value, [](int lane, int arg, int w) { return (lane & ~(w - 1)) + (arg & (w - 1)); },
                         src_lane, width, "asc_shfl");
}
template <typename T>
inline T asc_shfl_down(T value, int delta, int width = 32) {
  return ::dj_twin::shfl(value, [](int lane, int arg, int w) {
    return ((lane & (w - 1)) + arg < w) ? lane + arg : lane; }, delta, width, "asc_shfl_down");
}
template <typename T>
inline T asc_shfl_up(T value, int delta, int width = 32) {
  return ::dj_twin::shfl(value, [](int lane, int arg, int w) {
    return ((lane & (w - 1)) - arg >= 0) ? lane - arg : lane; }, delta, width, "asc_shfl_up");
}

#include "simt_api/math.h"

// ---- warp reductions: every active lane of a warp gets the reduction of the active lanes' values, combined
// pairwise (asc_reduce_add.md: "对Warp内所有活跃线程输入的val求和", "底层实现使用二分算法": lane i with
// lane i + 16, then + 8, ... + 1; an inactive partner leaves the value as it is). ----------------------
namespace dj_twin {
template <typename T, typename Op>
inline T warp_reduce(T value, Op op, const char* name) {
  count_simt_ops(1);
  int lane = 0;
  const WarpExchange& ex = warp_exchange(value, name, &lane);
  T v[kWarpSize];
  uint32_t active = ex.active;
  for (uint32_t i = 0; i < kWarpSize; ++i)
    if ((active >> i) & 1) std::memcpy(&v[i], ex.slots[i], sizeof(T));
  for (uint32_t half = kWarpSize / 2; half; half /= 2)
    for (uint32_t i = 0; i < half; ++i) {
      const bool a = (active >> i) & 1, b = (active >> (i + half)) & 1;
      if (a && b) v[i] = op(v[i], v[i + half]);
      else if (b) v[i] = v[i + half];
      if (b) active |= 1u << i;
    }
  return v[0];
}
}  // namespace dj_twin

// ---- warp votes (asc-devkit docs/zh/api/SIMT-API/Warp函数/Warp-Vote类函数/asc_ballot.md,
// asc_activemask.md): bit i of the result is lane i of the caller's warp; every active lane gets the same
// value. Active lanes are those taking part in the collective (see release_warp_collective).
inline uint32_t asc_ballot(int32_t predicate) {
  ::dj_twin::count_simt_ops(1);
  int lane = 0;
  const ::dj_twin::WarpExchange& ex = ::dj_twin::warp_exchange(predicate, "asc_ballot", &lane);
  uint32_t bits = 0;
  for (uint32_t i = 0; i < ::dj_twin::kWarpSize; ++i) {
    int32_t p;
    std::memcpy(&p, ex.slots[i], sizeof p);
    if ((ex.active >> i) & 1 && p != 0) bits |= 1u << i;
  }
  return bits;
}
inline uint32_t asc_activemask() {
  ::dj_twin::count_simt_ops(1);
  int lane = 0;
  return ::dj_twin::warp_exchange(int32_t(0), "asc_activemask", &lane).active;
}

#define DJ_TWIN_WARP_REDUCE(T)                                                                               \
  inline T asc_reduce_add(T v) { return ::dj_twin::warp_reduce(v, [](T a, T b) { return T(a + b); }, "asc_reduce_add"); } \
  inline T asc_reduce_max(T v) { return ::dj_twin::warp_reduce(v, [](T a, T b) { return a < b ? b : a; }, "asc_reduce_max"); } \
  inline T asc_reduce_min(T v) { return ::dj_twin::warp_reduce(v, [](T a, T b) { return b < a ? b : a; }, "asc_reduce_min"); }
DJ_TWIN_WARP_REDUCE(float)
DJ_TWIN_WARP_REDUCE(int32_t)
DJ_TWIN_WARP_REDUCE(uint32_t)
#undef DJ_TWIN_WARP_REDUCE
