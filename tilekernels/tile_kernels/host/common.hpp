// Included by every tile_kernels host source: the library exponential and the guard against
// floating-point contraction.
#pragma once

#include <deepjit/host/convert.hpp>
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tk {

// The references round every FP32 multiply and add separately (and call fma() where a fused
// operation is meant), but GCC contracts a*b+c into an FMA by default, even across intrinsics.
// Passing a product through rounded() hides it from that optimisation at no cost. (A per-file
// "#pragma GCC optimize" would also stop it, but it blocks inlining of std:: helpers.)
template <typename T>
DJ_INLINE T rounded(T v) {
#if defined(__x86_64__) || defined(__i386__)
    asm("" : "+x"(v));
#elif defined(__aarch64__)
    asm("" : "+w"(v));
#endif
    return v;
}

// The library's FP32 exponential (see tile_kernels/reference/numerics.py: exp_f32).
constexpr float kExpLog2e = static_cast<float>(1.4426950408889634);
constexpr float kExpLn2Hi = static_cast<float>(0.693359375);
constexpr float kExpLn2Lo = static_cast<float>(-2.12194440e-4);
constexpr float kExpPoly[8] = {static_cast<float>(1.0 / 5040.0), static_cast<float>(1.0 / 720.0),
                               static_cast<float>(1.0 / 120.0), static_cast<float>(1.0 / 24.0),
                               static_cast<float>(1.0 / 6.0), 0.5f, 1.0f, 1.0f};
constexpr float kExpMin = -87.0f, kExpMax = 88.0f;

inline float exp_f32(float x) {
    if (std::isnan(x)) return x;
    if (x > kExpMax) return INFINITY;
    if (x < kExpMin) return 0.0f;
    const float n = std::nearbyint(x * kExpLog2e);
    float r = x - rounded(n * kExpLn2Hi);
    r = r - rounded(n * kExpLn2Lo);
    float p = kExpPoly[0];
    for (int i = 1; i < 8; ++i) p = rounded(p * r) + kExpPoly[i];
    return rounded(p * dj::bits_f32(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23));
}

#ifdef DJ_HAVE_AVX512
inline __m512 exp_f32x16(__m512 x) {
    const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kExpMin)), _mm512_set1_ps(kExpMax));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(kExpLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_sub_ps(xc, rounded(_mm512_mul_ps(n, _mm512_set1_ps(kExpLn2Hi))));
    r = _mm512_sub_ps(r, rounded(_mm512_mul_ps(n, _mm512_set1_ps(kExpLn2Lo))));
    __m512 p = _mm512_set1_ps(kExpPoly[0]);
    for (int i = 1; i < 8; ++i) p = _mm512_add_ps(rounded(_mm512_mul_ps(p, r)), _mm512_set1_ps(kExpPoly[i]));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 y = rounded(_mm512_mul_ps(p, _mm512_castsi512_ps(e)));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMax), _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMin), _CMP_LT_OQ), _mm512_setzero_ps());
    // NaN lanes: min/max above returned the bound; restore the NaN.
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
#endif

// The descending order of torch's sort and topk: NaN above every number.
DJ_INLINE bool ranks_above(float a, float b) { return a > b || (std::isnan(a) && !std::isnan(b)); }

// Inserts (v, e) into the descending list val/id of n <= cap entries (n grows up to cap). Equal
// values keep their arrival order, so ids fed in ascending order come out as a stable sort's.
DJ_INLINE void insert_ranked(float* val, int64_t* id, int64_t& n, int64_t cap, float v, int64_t e) {
    if (n == cap && !ranks_above(v, val[cap - 1])) return;
    int64_t i = n < cap ? n++ : cap - 1;
    for (; i > 0 && ranks_above(v, val[i - 1]); --i) { val[i] = val[i - 1]; id[i] = id[i - 1]; }
    val[i] = v;
    id[i] = e;
}

}  // namespace tk
