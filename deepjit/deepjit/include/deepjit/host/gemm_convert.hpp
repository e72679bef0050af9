// Exact FP8 E4M3 / FP4 E2M1 -> BF16 conversion of contiguous runs, for feeding the BF16
// micro-kernel of gemm_bf16.hpp. Every E4M3 and E2M1 value (subnormals included) is a BF16
// value, and so is its product with a power of two in BF16's normal range; `add_exponent`
// applies such a scale by adding to the exponent field, so folding UE8M0 scale factors into the
// conversion is exact.
#pragma once

#include <cstdint>
#include <cstring>

#include <deepjit/host/convert.hpp>
#include <deepjit/host/kernel.hpp>

namespace dj {
namespace gemm {

enum ElemType : int { kBF16 = 0, kE4M3 = 1, kE2M1 = 2 };

DJ_INLINE uint16_t e4m3_to_bf16(uint8_t v) {
    if ((v & 0x7F) == 0x7F) return static_cast<uint16_t>(0x7FC0 | ((v & 0x80) << 8));
    return static_cast<uint16_t>(f32_bits(e4m3_to_f32(v)) >> 16);   // exact: no rounding needed
}
DJ_INLINE uint16_t e2m1_to_bf16(uint8_t nibble) { return static_cast<uint16_t>(f32_bits(e2m1_to_f32(nibble)) >> 16); }

// Unbiased exponent of a power-of-two FP32 scale.
DJ_INLINE int scale_exponent(float s) { return static_cast<int>((f32_bits(s) >> 23) & 0xFF) - 127; }

#ifdef DJ_HAVE_AVX512
struct ConvertTables {
    __m512i e4m3_small;   // E4M3 magnitudes 0..7 (zero and subnormals) as BF16
    __m512i e2m1;         // the 16 E2M1 codes as BF16
    ConvertTables() {
        alignas(64) uint16_t a[32] = {}, b[32] = {};
        for (int i = 0; i < 8; ++i) a[i] = e4m3_to_bf16(static_cast<uint8_t>(i));
        for (int i = 0; i < 16; ++i) b[i] = e2m1_to_bf16(static_cast<uint8_t>(i));
        e4m3_small = _mm512_load_si512(a);
        e2m1 = _mm512_load_si512(b);
    }
};
inline const ConvertTables& tables() {
    static const ConvertTables t;
    return t;
}

// 32 E4M3 bytes -> 32 BF16 times 2^e, with bias = (120 + e) << 7 and small = the table of
// magnitudes 0..7 times 2^e (scaled_small). Normal values only need their exponent re-biased.
DJ_INLINE __m512i e4m3x32_to_bf16(__m256i bytes, __m512i bias, __m512i small) {
    const __m512i w = _mm512_cvtepu8_epi16(bytes);
    const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7F));
    __m512i r = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), bias);
    r = _mm512_mask_permutexvar_epi16(r, _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8)), mag, small);
    r = _mm512_mask_mov_epi16(r, _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7F)), _mm512_set1_epi16(0x7FC0));
    // r | (w << 8 & 0x8000): the sign, bit 7 of the byte
    return _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(w, 8), _mm512_set1_epi16(static_cast<short>(0x8000)), 0xF8);
}
DJ_INLINE __m512i e4m3x32_to_bf16(__m256i bytes, const ConvertTables& t) {
    return e4m3x32_to_bf16(bytes, _mm512_set1_epi16(120 << 7), t.e4m3_small);
}
// The subnormal table times 2^e (zero stays zero).
DJ_INLINE __m512i scaled_small(const ConvertTables& t, int e) {
    const __m512i nz = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        1, 1, 1, 1, 1, 1, 1, 0);
    return _mm512_add_epi16(t.e4m3_small, _mm512_mullo_epi16(nz, _mm512_set1_epi16(static_cast<short>(e * 128))));
}

// 32 bytes of E2M1 pairs (low nibble first) -> 64 BF16 in element order.
DJ_INLINE void e2m1x64_to_bf16(__m256i bytes, const ConvertTables& t, __m512i& out0, __m512i& out1) {
    const __m512i w = _mm512_cvtepu8_epi16(bytes);
    const __m512i lo = _mm512_permutexvar_epi16(_mm512_and_si512(w, _mm512_set1_epi16(0xF)), t.e2m1);
    const __m512i hi = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), t.e2m1);
    const __m512i i0 = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                        39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    out0 = _mm512_permutex2var_epi16(lo, i0, hi);
    out1 = _mm512_permutex2var_epi16(lo, _mm512_add_epi16(i0, _mm512_set1_epi16(16)), hi);
}
#endif

// n contiguous elements starting at element `first` of `base` -> BF16. For E2M1 `first` counts
// nibbles and must be even (runs start on a byte).
inline void to_bf16(const uint8_t* base, int type, int64_t first, int64_t n, uint16_t* DJ_RESTRICT dst) {
    if (n <= 0) return;
    if (type == kBF16) {   // short runs: a vector loop beats memcpy's start-up cost
        const uint16_t* src = reinterpret_cast<const uint16_t*>(base) + first;
        int64_t i = 0;
#ifdef DJ_HAVE_AVX512
        for (; i + 32 <= n; i += 32) _mm512_storeu_si512(dst + i, _mm512_loadu_si512(src + i));
        if (i < n) {
            const __mmask32 m = static_cast<__mmask32>((1ull << (n - i)) - 1);
            _mm512_mask_storeu_epi16(dst + i, m, _mm512_maskz_loadu_epi16(m, src + i));
        }
#else
        std::memcpy(dst, src, 2 * n);
#endif
        return;
    }
    int64_t i = 0;
    if (type == kE4M3) {
        const uint8_t* src = base + first;
#ifdef DJ_HAVE_AVX512
        const ConvertTables& t = tables();
        for (; i + 32 <= n; i += 32)
            _mm512_storeu_si512(dst + i, e4m3x32_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)), t));
        if (i < n) {
            const __mmask32 m = (n - i) >= 32 ? ~0u : ((1u << (n - i)) - 1);
            _mm512_mask_storeu_epi16(dst + i, m, e4m3x32_to_bf16(_mm256_maskz_loadu_epi8(m, src + i), t));
            return;
        }
#endif
        for (; i < n; ++i) dst[i] = e4m3_to_bf16(src[i]);
        return;
    }
    const uint8_t* src = base + first / 2;
#ifdef DJ_HAVE_AVX512
    const ConvertTables& t = tables();
    for (; i + 64 <= n; i += 64) {
        __m512i a, b;
        e2m1x64_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i / 2)), t, a, b);
        _mm512_storeu_si512(dst + i, a);
        _mm512_storeu_si512(dst + i + 32, b);
    }
#endif
    for (; i < n; ++i) dst[i] = e2m1_to_bf16(static_cast<uint8_t>((src[i / 2] >> ((i & 1) * 4)) & 0xF));
}

// to_bf16 times 2^e (exact; the caller keeps results in BF16's normal range). E4M3 applies the
// scale inside the conversion; other types add it afterwards.
inline void add_exponent(uint16_t* DJ_RESTRICT v, int64_t n, int e);
inline void to_bf16_scaled(const uint8_t* base, int type, int64_t first, int64_t n, int e, uint16_t* DJ_RESTRICT dst) {
#ifdef DJ_HAVE_AVX512
    if (type == kE4M3 && n > 0) {
        const ConvertTables& t = tables();
        const __m512i bias = _mm512_set1_epi16(static_cast<short>((120 + e) << 7)), small = scaled_small(t, e);
        const uint8_t* src = base + first;
        int64_t i = 0;
        for (; i + 32 <= n; i += 32)
            _mm512_storeu_si512(dst + i, e4m3x32_to_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)), bias, small));
        if (i < n) {
            const __mmask32 m = static_cast<__mmask32>((1ull << (n - i)) - 1);
            _mm512_mask_storeu_epi16(dst + i, m, e4m3x32_to_bf16(_mm256_maskz_loadu_epi8(m, src + i), bias, small));
        }
        return;
    }
#endif
    to_bf16(base, type, first, n, dst);
    add_exponent(dst, n, e);
}

// dst[i] *= 2^e exactly (non-zero BF16 values; the caller keeps results in the normal range).
inline void add_exponent(uint16_t* DJ_RESTRICT v, int64_t n, int e) {
    if (e == 0) return;
    const uint16_t delta = static_cast<uint16_t>(e * 128);
    int64_t i = 0;
#ifdef DJ_HAVE_AVX512
    const __m512i d = _mm512_set1_epi16(static_cast<short>(delta)), mask = _mm512_set1_epi16(0x7FFF);
    for (; i + 32 <= n; i += 32) {
        const __m512i x = _mm512_loadu_si512(v + i);
        const __mmask32 nz = _mm512_test_epi16_mask(x, mask);
        _mm512_storeu_si512(v + i, _mm512_mask_add_epi16(x, nz, x, d));
    }
#endif
    for (; i < n; ++i)
        if (v[i] & 0x7FFF) v[i] = static_cast<uint16_t>(v[i] + delta);
}

// dst[i] *= 2^e[i] for per-element exponents (int16, same length).
inline void add_exponents(uint16_t* DJ_RESTRICT v, const int16_t* DJ_RESTRICT e, int64_t n) {
    int64_t i = 0;
#ifdef DJ_HAVE_AVX512
    const __m512i mask = _mm512_set1_epi16(0x7FFF);
    for (; i + 32 <= n; i += 32) {
        const __m512i x = _mm512_loadu_si512(v + i);
        const __m512i d = _mm512_slli_epi16(_mm512_loadu_si512(e + i), 7);
        _mm512_storeu_si512(v + i, _mm512_mask_add_epi16(x, _mm512_test_epi16_mask(x, mask), x, d));
    }
#endif
    for (; i < n; ++i)
        if (v[i] & 0x7FFF) v[i] = static_cast<uint16_t>(v[i] + e[i] * 128);
}

}  // namespace gemm
}  // namespace dj
