// Per-token FP8 cast of one BF16 row, 128 channels per scale block: each block is scaled so its
// absolute maximum (at least 1e-4) maps to 448: scale = amax / 448, q = x / scale, rounded to E4M3
// (the same FP32 operations as utils/math.py's reference). With round_scale the scale is first
// rounded up to a power of two (exponent + 1 when any mantissa bit is set).
#pragma once

#include <deepjit/host/convert.hpp>
#include <deepjit/host/kernel.hpp>

#include <cmath>
#include <cstdint>

namespace ep {

DJ_INLINE float round_scale_up(float s) {
    const uint32_t bits = dj::f32_bits(s);
    return dj::bits_f32((((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0 ? 1 : 0)) << 23);
}

// One 128-channel block: src[128] -> dst[128], returns the scale.
DJ_INLINE float cast_block_fp8(const uint16_t* src, uint8_t* dst, bool round_scale) {
#if defined(DJ_HAVE_AVX512)
    __m512 v[8];
    __m512 m = _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
        v[j] = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 16 * j)));
        m = _mm512_max_ps(m, _mm512_abs_ps(v[j]));
    }
    float s = std::fmax(_mm512_reduce_max_ps(m), 1e-4f) / 448.0f;
    if (round_scale) s = round_scale_up(s);
    const __m512 sv = _mm512_set1_ps(s);
    for (int j = 0; j < 8; ++j)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * j), dj::f32x16_to_e4m3(_mm512_div_ps(v[j], sv)));
    return s;
#else
    float v[128], amax = 0.0f;
    for (int h = 0; h < 128; ++h) {
        v[h] = dj::bf16_to_f32(src[h]);
        amax = std::fmax(amax, std::fabs(v[h]));
    }
    float s = std::fmax(amax, 1e-4f) / 448.0f;
    if (round_scale) s = round_scale_up(s);
    for (int h = 0; h < 128; ++h) dst[h] = dj::f32_to_e4m3(v[h] / s);
    return s;
#endif
}

}  // namespace ep
