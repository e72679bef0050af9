// One token of a quantised paged KV cache -> bf16 K row, exactly as kv_cache.py defines the formats:
// value = bf16(float(code) * float(scale)); NaN becomes 0 so that an unreferenced, NaN-filled slot
// can never poison the matmuls (the FP32 reference zeroes NaN in the gathered tokens the same way).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include <deepjit/host/convert.hpp>

namespace fmla {

enum Format : int { V32_FP8 = 0, MODEL1_FP8 = 1, V41_FP8 = 2, V41_FP4 = 3 };

struct CacheDesc {
    const uint8_t* base;     // k_cache data pointer
    int64_t block_stride;    // k_cache.stride(0), bytes
    int64_t page;            // page_block_size
    int format;
    int block_split;         // 1: all data rows of a page block, then all its scale rows
    int bytes_per_token, data_bytes;
};

inline CacheDesc make_cache(const void* base, int64_t block_stride, int64_t page, int format, int block_split) {
    static constexpr int kBpt[4] = {656, 584, 528, 288}, kData[4] = {640, 576, 512, 256};
    return {static_cast<const uint8_t*>(base), block_stride, page, format, block_split, kBpt[format], kData[format]};
}

// Data and scale addresses of physical token `t`.
DJ_INLINE void token_address(const CacheDesc& c, int64_t t, const uint8_t** data, const uint8_t** scales) {
    // ids and pages are below 2^31: a 32-bit division (the 64-bit one cost 5 % of a V4.1 token)
    const uint32_t id = static_cast<uint32_t>(t), page = static_cast<uint32_t>(c.page);
    const int64_t blk = id / page, slot = id % page;
    const uint8_t* bb = c.base + blk * c.block_stride;
    if (c.block_split) {
        *data = bb + slot * c.data_bytes;
        *scales = bb + c.page * c.data_bytes + slot * (c.bytes_per_token - c.data_bytes);
    } else {
        *data = bb + slot * c.bytes_per_token;
        *scales = *data + (c.format == V32_FP8 ? 512 : c.data_bytes);
    }
}

// Asks for token `t`'s cache lines ahead of use. Gathered tokens sit on random pages, and a software
// prefetch that misses the TLB may be dropped (measured on a virtualised Xeon: prefetches alone hid
// none of the misses), so the first and last line are real loads, which walk the token's page(s);
// the lines between are prefetched.
DJ_INLINE void prefetch_token(const CacheDesc& c, int64_t t) {
    const uint8_t *data, *scales;
    token_address(c, t, &data, &scales);
    const int bytes = c.block_split ? c.data_bytes : c.bytes_per_token;
    (void)*reinterpret_cast<const volatile uint8_t*>(data);
    for (int off = 64; off < bytes - 1; off += 64) __builtin_prefetch(data + off);
    (void)*reinterpret_cast<const volatile uint8_t*>(data + bytes - 1);
    if (c.block_split) (void)*reinterpret_cast<const volatile uint8_t*>(scales);
}

DJ_INLINE uint16_t bf16_sanitize(uint16_t h) { return (h & 0x7FFFu) > 0x7F80u ? 0 : h; }

#if defined(DJ_HAVE_AVX512)
// NaN -> 0, then round to bf16. The one-instruction conversion treats FP32 subnormals as zero, so it
// is used only when the scale keeps every product normal (|code| >= 2^-9 for E4M3, 2^-1 for E2M1).
DJ_INLINE void store_bf16x16(uint16_t* dst, __m512 v, float scale) {
    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
#if defined(DJ_HAVE_AVX512_BF16)
    if (std::fabs(scale) >= 0x1p-110f) {
        _mm256_storeu_si256((__m256i*)dst, (__m256i)_mm512_cvtneps_pbh(v));
        return;
    }
#endif
    (void)scale;
    _mm256_storeu_si256((__m256i*)dst, dj::f32x16_to_bf16(v));
}

DJ_INLINE void e4m3_chunk(uint16_t* dst, const uint8_t* src, float scale) {
    store_bf16x16(dst, _mm512_mul_ps(dj::e4m3x16_to_f32(_mm_loadu_si128((const __m128i*)src)), _mm512_set1_ps(scale)),
                  scale);
}

// 16 E2M1 codes from 8 bytes (even index in the low nibble) times one scale.
DJ_INLINE void e2m1_chunk(uint16_t* dst, const uint8_t* src, float scale) {
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const __m128i bytes = _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i*)src),
                                           _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    const __m512i codes = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(bytes), shift), _mm512_set1_epi32(15));
    store_bf16x16(dst, _mm512_mul_ps(_mm512_permutexvar_ps(codes, table), _mm512_set1_ps(scale)), scale);
}
#if defined(DJ_HAVE_AVX512_BF16)
// A V4.1 FP4 token's 512 E2M1 codes times its 32 E4M3 scales (one per 16 codes), the values of
// e2m1_chunk, unless a scale is NaN (false: the caller takes e2m1_chunk). Without NaN scales every
// product is a normal number (>= 2^-10) or zero and exact in BF16, so there is nothing to sanitise
// or round specially: the scales are converted together, two runs are rounded by one instruction
// (2.1x e2m1_chunk's rate).
DJ_INLINE bool e2m1_token(uint16_t* dst, const uint8_t* src, const uint8_t* scales) {
    const __m128i s0 = _mm_loadu_si128((const __m128i*)scales), s1 = _mm_loadu_si128((const __m128i*)(scales + 16));
    const __m128i low7 = _mm_set1_epi8(0x7F);
    if (_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(_mm_and_si128(s0, low7), low7),
                                       _mm_cmpeq_epi8(_mm_and_si128(s1, low7), low7))))
        return false;
    alignas(64) float sc[32];
    _mm512_store_ps(sc, dj::e4m3x16_to_f32(s0));
    _mm512_store_ps(sc + 16, dj::e4m3x16_to_f32(s1));
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    // run i's 16 values; the table permute reads only the index's low 4 bits, the nibble
    const auto run = [&](int i) {
        const __m128i bytes = _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i*)(src + 8 * i)), twice);
        const __m512i codes = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(bytes), shift);
        return _mm512_mul_ps(_mm512_permutexvar_ps(codes, table), _mm512_set1_ps(sc[i]));
    };
    for (int i = 0; i < 32; i += 2)
        _mm512_storeu_si512(dst + 16 * i, (__m512i)_mm512_cvtne2ps_pbh(run(i + 1), run(i)));
    return true;
}

// 32 E4M3 codes times a finite FP32 scale whose products are normal (|scale| >= 2^-110), the values of
// e4m3_chunk: each code's exact value is formed as BF16 bits (a table for the 7 subnormal codes), widened
// to FP32 two lanes of 16 at a time (in the order of unpacking within 128-bit lanes), multiplied and
// rounded back, one permute restoring the order (V3.2's dequantisation; the FP32 bit formation of each
// half cost 1.8x).
DJ_INLINE void e4m3_scaled_chunk32(uint16_t* dst, const uint8_t* src, __m512 scale) {
    // BF16 bits of m * 2^-9 for the subnormal codes m = 1..7 (16-bit lanes; m = 0 stays 0)
    const __m512i subnormal = _mm512_setr_epi32(0x3B000000, 0x3BC03B80, 0x3C203C00, 0x3C603C40, 0, 0, 0, 0, 0, 0,
                                                0, 0, 0, 0, 0, 0);
    // element e came out of the low unpack (e % 8 < 4) or the high one, 4 per 128-bit lane
    const __m512i order = _mm512_set_epi16(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8, 23, 22, 21,
                                           20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i low7 = _mm512_set1_epi16(0x7F);
    const __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)src));
    const __m512i mag = _mm512_and_si512(c, low7);
    // normal codes: the exponent rebased by 127 - 7, the 3 mantissa bits on top of BF16's 7; the sign
    __m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), _mm512_set1_epi16(120 << 7));
    v = _mm512_mask_permutexvar_epi16(v, _mm512_cmplt_epu16_mask(mag, _mm512_set1_epi16(8)), mag, subnormal);
    v = _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(c, 8), _mm512_set1_epi16((int16_t)0x8000), 0xF8);  // a | (b & c)
    const __m512 lo = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), v)), scale);
    const __m512 hi = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), v)), scale);
    const __m512i out = _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    // NaN codes -> +0, as the FP32 path sanitises them
    _mm512_storeu_si512(dst, _mm512_maskz_mov_epi16(_mm512_cmpneq_epi16_mask(mag, low7), out));
}
#endif

#if defined(__AVX512VBMI__)
// BF16 bits of the E4M3 magnitudes 0..127 (unscaled; NaN 0x7F as 0), split into high and low bytes.
struct E4m3Bytes {
    alignas(64) uint8_t hi[128];
    alignas(64) uint8_t lo[128];
};
constexpr E4m3Bytes make_e4m3_bytes() {
    constexpr uint16_t subnormal[8] = {0, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60};  // m * 2^-9
    E4m3Bytes t{};
    for (int m = 0; m < 127; ++m) {
        const uint16_t b = m < 8 ? subnormal[m] : static_cast<uint16_t>((((m >> 3) + 120) << 7) | ((m & 7) << 4));
        t.hi[m] = static_cast<uint8_t>(b >> 8);
        t.lo[m] = static_cast<uint8_t>(b & 0xFF);
    }
    return t;
}
inline constexpr E4m3Bytes kE4m3Bf16 = make_e4m3_bytes();
#endif

// `chunks` runs of 32 E4M3 codes, run i times the power of two 2^(e - 127) of UE8M0 scale byte
// e = scales[i / per_scale]. Where every product is a normal BF16 (10 <= e <= 246 for all the
// token's scales) it is exact, so it is formed on the bits: the BF16 bits of the code's value (its
// exponent rebased, a table for the 7 subnormal codes) plus (e - 127) << 7, the offsets set up once
// per token (the per-run form was most of the decode's dequantisation; adding the offset after the
// table, masked, took 1.2x fewer instructions than offsetting the table per run). Zero and NaN codes
// give +0 (the FP32 path: -0 for code 0x80, a sign that no product's sum carries). Other scales take
// the FP32 path above (the same values there).
DJ_INLINE void e4m3_ue8m0_runs(uint16_t* dst, const uint8_t* src, const uint8_t* scales, int chunks, int per_scale) {
    const int nscales = chunks / per_scale;
    bool normal = true;
    int16_t off[16];   // the scales' exponent offsets, (e - 127) << 7
    for (int i = 0; i < nscales; ++i) {
        normal &= scales[i] >= 10 && scales[i] <= 246;
        off[i] = static_cast<int16_t>((static_cast<int>(scales[i]) - 127) * 128);
    }
    if (!normal) {
        for (int i = 0; i < chunks; ++i) {
            const float sc = dj::ue8m0_to_f32(scales[i / per_scale]);
            e4m3_chunk(dst + 32 * i, src + 32 * i, sc);
            e4m3_chunk(dst + 32 * i + 16, src + 32 * i + 16, sc);
        }
        return;
    }
    int i = 0;
#if defined(__AVX512VBMI__)
    // two runs at a time: the BF16 bits of 64 codes' magnitudes looked up as bytes (a high and a low
    // table of 128 bytes), the sign ORed into the high bytes, bytes paired into words by unpacking (in
    // 128-bit lanes, put back in order by two qword permutes); 2x the rate of the words' arithmetic
    const __m512i hi0 = _mm512_load_si512(kE4m3Bf16.hi), hi1 = _mm512_load_si512(kE4m3Bf16.hi + 64);
    const __m512i lo0 = _mm512_load_si512(kE4m3Bf16.lo), lo1 = _mm512_load_si512(kE4m3Bf16.lo + 64);
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    for (; i + 2 <= chunks; i += 2) {
        const __m512i c = _mm512_loadu_si512(src + 32 * i);
        const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi8(0x7F));
        const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, mag, hi1), c,
                                                     _mm512_set1_epi8((char)0x80), 0xF8);   // | (c & sign)
        const __m512i lo = _mm512_permutex2var_epi8(lo0, mag, lo1);
        const __m512i a = _mm512_unpacklo_epi8(lo, hi), b = _mm512_unpackhi_epi8(lo, hi);
        // times the scales; magnitudes 0 and 0x7F (NaN) -> +0
        const __mmask64 live = _mm512_cmplt_epu8_mask(_mm512_sub_epi8(mag, _mm512_set1_epi8(1)), _mm512_set1_epi8(0x7E));
        _mm512_storeu_si512(dst + 32 * i, _mm512_maskz_add_epi16((__mmask32)live, _mm512_permutex2var_epi64(a, first, b),
                                                                 _mm512_set1_epi16(off[i / per_scale])));
        _mm512_storeu_si512(dst + 32 * i + 32,
                            _mm512_maskz_add_epi16((__mmask32)(live >> 32), _mm512_permutex2var_epi64(a, second, b),
                                                   _mm512_set1_epi16(off[(i + 1) / per_scale])));
    }
#endif
    // BF16 bits of m * 2^-9 for the subnormal codes m = 1..7 (16-bit lanes; m = 0 stays 0)
    const __m512i subnormal = _mm512_setr_epi32(0x3B000000, 0x3BC03B80, 0x3C203C00, 0x3C603C40, 0, 0, 0, 0, 0, 0,
                                                0, 0, 0, 0, 0, 0);
    const __m512i low7 = _mm512_set1_epi16(0x7F), one = _mm512_set1_epi16(1), eight = _mm512_set1_epi16(8);
    const __m512i bias = _mm512_set1_epi16(120 << 7), sign_bit = _mm512_set1_epi16((int16_t)0x8000);
    for (; i < chunks; ++i) {
        const __m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(src + 32 * i)));
        const __m512i mag = _mm512_and_si512(c, low7);
        // the code's value: normal codes with the exponent rebased by 127 - 7 and the 3 mantissa bits
        // on top of BF16's 7, subnormal ones from the table, then the sign
        __m512i v = _mm512_add_epi16(_mm512_slli_epi16(mag, 4), bias);
        v = _mm512_mask_permutexvar_epi16(v, _mm512_cmplt_epu16_mask(mag, eight), mag, subnormal);
        v = _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(c, 8), sign_bit, 0xF8);   // v | (c << 8 & sign)
        // times the scale; magnitudes 0 and 0x7F (NaN) -> +0
        const __mmask32 live = _mm512_cmplt_epu16_mask(_mm512_sub_epi16(mag, one), _mm512_set1_epi16(0x7E));
        _mm512_storeu_si512(dst + 32 * i, _mm512_maskz_add_epi16(live, v, _mm512_set1_epi16(off[i / per_scale])));
    }
}
#else
DJ_INLINE void e4m3_chunk(uint16_t* dst, const uint8_t* src, float scale) {
    for (int i = 0; i < 16; ++i) {
        const float v = dj::e4m3_to_f32(src[i]) * scale;
        dst[i] = v == v ? dj::f32_to_bf16(v) : 0;
    }
}

DJ_INLINE void e2m1_chunk(uint16_t* dst, const uint8_t* src, float scale) {
    for (int i = 0; i < 16; ++i) {
        const float v = dj::e2m1_to_f32((src[i / 2] >> (4 * (i & 1))) & 0xF) * scale;
        dst[i] = v == v ? dj::f32_to_bf16(v) : 0;
    }
}
DJ_INLINE void e4m3_ue8m0_runs(uint16_t* dst, const uint8_t* src, const uint8_t* scales, int chunks, int per_scale) {
    for (int i = 0; i < chunks; ++i) {
        const float sc = dj::ue8m0_to_f32(scales[i / per_scale]);
        e4m3_chunk(dst + 32 * i, src + 32 * i, sc);
        e4m3_chunk(dst + 32 * i + 16, src + 32 * i + 16, sc);
    }
}
#endif

DJ_INLINE void copy_bf16(uint16_t* dst, const uint8_t* src, int n) {
    std::memcpy(dst, src, 2 * n);
    for (int i = 0; i < n; ++i) dst[i] = bf16_sanitize(dst[i]);
}

// Dequantises physical token `t` of cache `c` into `dst` (d_qk bf16 values).
inline void dequant_token(const CacheDesc& c, int64_t t, uint16_t* dst) {
    const uint8_t *data, *scales;
    token_address(c, t, &data, &scales);
    switch (c.format) {
    case V32_FP8: {
        float s[4];
        std::memcpy(s, scales, 16);
#if defined(DJ_HAVE_AVX512_BF16)
        bool fast = true;   // finite scales whose products are normal
        for (const float x : s) fast &= std::fabs(x) >= 0x1p-110f && std::fabs(x) <= std::numeric_limits<float>::max();
        if (fast) {
            for (int i = 0; i < 16; ++i) e4m3_scaled_chunk32(dst + 32 * i, data + 32 * i, _mm512_set1_ps(s[i / 4]));
        } else
#endif
        for (int i = 0; i < 32; ++i) e4m3_chunk(dst + 16 * i, data + 16 * i, s[i / 8]);
        copy_bf16(dst + 512, data + 528, 64);  // the RoPE part follows the scales in the record
        break;
    }
    case MODEL1_FP8:
        e4m3_ue8m0_runs(dst, data, scales, 14, 2);
        copy_bf16(dst + 448, data + 448, 64);
        break;
    case V41_FP8:
        e4m3_ue8m0_runs(dst, data, scales, 16, 1);
        break;
    default:  // V41_FP4
#if defined(DJ_HAVE_AVX512_BF16)
        if (e2m1_token(dst, data, scales)) break;
#endif
        for (int i = 0; i < 32; ++i) e2m1_chunk(dst + 16 * i, data + 8 * i, dj::e4m3_to_f32(scales[i]));
        break;
    }
}

}  // namespace fmla
