// Vector building blocks of the tile_kernels quantisation kernels: 16-lane loads of BF16/FP32
// rows as FP32, E4M3 / E2M1 encode-and-store, E2M1 decode, and the scale-factor rule
// (sf = max(amax, clamp_min) / fmt_max, optionally rounded up to a power of two).
#pragma once

#include <tile_kernels/host/common.hpp>

namespace tk {

enum InDtype : int32_t { kInF32 = 0, kInBF16 = 1 };
enum OutFmt : int32_t { kE4M3 = 0, kE2M1 = 1 };

DJ_INLINE float fmt_max(int32_t fmt) { return fmt == kE4M3 ? 448.0f : 6.0f; }

DJ_INLINE float load1(const void* p, int32_t dt, int64_t i) {
    return dt == kInBF16 ? dj::bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

struct Scale {
    float sf, inv;
};

// The dequant scale and the quantising multiplier of one block with absolute maximum `amax`.
DJ_INLINE Scale block_scale(float amax, float clamp_min, float fmax, bool round_sf) {
    const float a = std::max(amax, clamp_min);
    float sf = a / fmax;
    if (round_sf) {
        sf = dj::bits_f32((dj::f32_bits(sf) + 0x7FFFFFu) & 0x7F800000u);
        return {sf, sf == 0.0f ? 0.0f : 1.0f / sf};
    }
    return {sf, sf == 0.0f ? 0.0f : fmax / a};
}

// Where block (m, k)'s scale goes: FP32 at sf[m*sm + k*sk], or, packed UE8M0, the byte k%4 of
// the int32 word at (m, k/4) with word strides (sm, sk).
DJ_INLINE void store_sf(void* sf, bool packed, int64_t sm, int64_t sk, int64_t m, int64_t k, float value) {
    if (packed)
        static_cast<uint8_t*>(sf)[4 * (m * sm + (k / 4) * sk) + (k % 4)] =
            static_cast<uint8_t>((dj::f32_bits(value) >> 23) & 0xFFu);
    else
        static_cast<float*>(sf)[m * sm + k * sk] = value;
}

DJ_INLINE float load_sf(const void* sf, bool packed, int64_t sm, int64_t sk, int64_t m, int64_t k) {
    if (packed)
        return dj::bits_f32(static_cast<uint32_t>(static_cast<const uint8_t*>(sf)[4 * (m * sm + (k / 4) * sk) + (k % 4)]) << 23);
    return static_cast<const float*>(sf)[m * sm + k * sk];
}

// ---- scalar encoders -------------------------------------------------------------------------
DJ_INLINE uint8_t enc_e4m3(float v) { return dj::f32_to_e4m3(std::min(std::max(v, -448.0f), 448.0f)); }

#ifdef DJ_HAVE_AVX512
DJ_INLINE __m512 load16(const void* p, int32_t dt, int64_t i) {
    if (dt == kInBF16)
        return dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i)));
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
}

DJ_INLINE __m512 abs16(__m512 v) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF))); }

// The conversion saturates at +-448 by itself, which equals clamping first; an explicit clamp
// with min/max would also turn NaN into -448 (x86 min/max return the second operand on NaN).
DJ_INLINE void store_e4m3x16(uint8_t* dst, __m512 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), dj::f32x16_to_e4m3(v));
}

// 16 values -> 16 E2M1 codes (round to nearest, ties to even code, saturating) as int32 lanes.
DJ_INLINE __m512i e2m1_codes16(__m512 v) {
    const __m512 a = abs16(v);
    const __m512i one = _mm512_set1_epi32(1);
    __m512i c = _mm512_setzero_si512();
    c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.25f), _CMP_GT_OQ), c, one);
    c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.75f), _CMP_GE_OQ), c, one);
    c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.25f), _CMP_GT_OQ), c, one);
    c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.75f), _CMP_GE_OQ), c, one);
    c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.5f), _CMP_GT_OQ), c, one);
    c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(3.5f), _CMP_GE_OQ), c, one);
    c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_set1_ps(5.0f), _CMP_GT_OQ), c, one);
    const __m512i sign = _mm512_srli_epi32(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u))), 28);
    return _mm512_or_si512(c, sign);
}

// 16 values -> 8 packed bytes (even element in the low nibble).
DJ_INLINE void store_e2m1x16(uint8_t* dst, __m512 v) {
    const __m512i c = e2m1_codes16(v);
    const __m512i packed = _mm512_or_si512(c, _mm512_srli_epi64(c, 28));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi64_epi8(packed));
}

// 8 packed bytes -> 16 FP32 values.
DJ_INLINE __m512 e2m1x16_to_f32(const uint8_t* src) {
    static const float kTable[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const __m512i w = _mm512_cvtepu8_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
    const __m512i lo = _mm512_and_si512(w, _mm512_set1_epi64(0xF));
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi64(w, 4), _mm512_set1_epi64(0xF));
    const __m512i idx = _mm512_or_si512(lo, _mm512_slli_epi64(hi, 32));
    return _mm512_permutexvar_ps(idx, _mm512_loadu_ps(kTable));
}
#endif

}  // namespace tk
