// Number-format conversions shared by every library's host kernels, bit-exact with PyTorch's
// CPU casts: BF16 (round to nearest even, NaN -> 0xFFFF), FP8 E4M3FN (round to nearest even,
// saturating at +-448 as torch does, NaN -> 0x7F with its sign), FP4 E2M1 (low nibble first), UE8M0 bytes. Scalar forms everywhere;
// AVX-512 forms for 16 lanes when the compiler targets AVX-512F/BW (selected at compile time).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <deepjit/host/kernel.hpp>
#include <deepjit/host/matrix_engine.hpp>   // DJ_HAVE_AVX512, and DJ_HAVE_AVX512_BF16 on that engine

namespace dj {

DJ_INLINE uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
DJ_INLINE float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// ---- BF16 ---------------------------------------------------------------------------------
DJ_INLINE float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

DJ_INLINE uint16_t f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if (std::isnan(f)) return 0xFFFF;
    return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// ---- FP8 E4M3FN ---------------------------------------------------------------------------
DJ_INLINE float e4m3_to_f32(uint8_t v) {
    const uint32_t mag = v & 0x7Fu;
    if (mag == 0x7Fu) return bits_f32(0x7FF00000u | (static_cast<uint32_t>(v & 0x80u) << 24));  // torch's NaN
    // Shifting E4M3 into an FP32 bit pattern and scaling by 2^120 rebiases the exponent and
    // turns E4M3 subnormals into exact FP32 values in one multiply.
    const float m = bits_f32(mag << 20) * 0x1p120f;
    return (v & 0x80u) ? -m : m;
}

DJ_INLINE uint8_t f32_to_e4m3(float f) {
    uint32_t u = f32_bits(f);
    const uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint8_t r;
    if (u > 0x7F800000u) {              // NaN keeps its sign
        r = 0x7F;
    } else if (u >= 0x43E00000u) {      // >= 448 and inf saturate
        r = 0x7E;
    } else if (u < (121u << 23)) {      // below the smallest normal 2^-6: round in the subnormal grid
        const uint32_t denorm = 141u << 23;
        r = static_cast<uint8_t>(f32_bits(bits_f32(u) + bits_f32(denorm)) - denorm);
    } else {
        const uint32_t odd = (u >> 20) & 1u;
        u += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu + odd;
        r = static_cast<uint8_t>(u >> 20);
    }
    return static_cast<uint8_t>(r | (sign >> 24));
}

// ---- FP4 E2M1 -----------------------------------------------------------------------------
DJ_INLINE float e2m1_to_f32(uint8_t nibble) {
    static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float m = kValues[nibble & 7u];
    return (nibble & 8u) ? -m : m;
}

// Round to nearest even on the E2M1 grid, saturating at +-6 (NaN maps to 0).
DJ_INLINE uint8_t f32_to_e2m1(float f) {
    const uint8_t sign = std::signbit(f) ? 8 : 0;
    const float a = std::fabs(f);
    uint8_t code;
    if (!(a > 0.25f)) code = 0;          // also NaN
    else if (a < 0.75f) code = 1;
    else if (a <= 1.25f) code = 2;
    else if (a < 1.75f) code = 3;
    else if (a <= 2.5f) code = 4;
    else if (a < 3.5f) code = 5;
    else if (a <= 5.0f) code = 6;
    else code = 7;
    return static_cast<uint8_t>(sign | code);
}

// ---- UE8M0 scale bytes (2^(e-127); 0xFF is NaN) ------------------------------------------
DJ_INLINE float ue8m0_to_f32(uint8_t e) {
    if (e == 0xFF) return bits_f32(0x7FC00000u);
    if (e == 0) return 0x1p-127f;
    return bits_f32(static_cast<uint32_t>(e) << 23);
}

// The exponent byte of a positive FP32 scale rounded up to a power of two.
DJ_INLINE uint8_t f32_to_ue8m0_ceil(float s) {
    const uint32_t u = f32_bits(s);
    uint32_t e = (u >> 23) & 0xFFu;
    if ((u & 0x7FFFFFu) != 0 && e != 0xFFu) ++e;
    return static_cast<uint8_t>(e > 0xFEu ? 0xFEu : e);
}

#ifdef DJ_HAVE_AVX512
// 16 x FP32 -> 16 x BF16, round to nearest even, NaN -> 0xFFFF (matches torch, keeps subnormals).
DJ_INLINE __m256i f32x16_to_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0xFFFF));
    return _mm512_cvtepi32_epi16(r);
}

DJ_INLINE __m512 bf16x16_to_f32(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// 16 x E4M3 bytes -> 16 x FP32, exact (NaN codes widen to torch's 0x7FF00000 with the sign).
DJ_INLINE __m512 e4m3x16_to_f32(__m128i b) {
    const __m512i v = _mm512_cvtepu8_epi32(b);
    const __m512i mag = _mm512_and_si512(v, _mm512_set1_epi32(0x7F));
    // Normal codes: the bits (mag << 20) are 2^(e - 127) (1 + m / 8), times 2^120. Subnormal codes
    // (e = 0) are m * 2^-9, converted from the integer: as shifted bits they would be FP32
    // denormals, and a multiply with a denormal operand takes a microcode assist (~100 cycles) on
    // Intel cores.
    const __mmask16 normal = _mm512_cmpge_epu32_mask(mag, _mm512_set1_epi32(8));
    __m512 m = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_maskz_mov_epi32(normal, _mm512_slli_epi32(mag, 20))),
                             _mm512_set1_ps(0x1p120f));
    m = _mm512_mask_mul_ps(m, static_cast<__mmask16>(~normal), _mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f));
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F));
    m = _mm512_mask_mov_ps(m, nan, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FF00000)));  // torch's NaN
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(m), sign));
}

// 16 x FP32 -> 16 x E4M3 bytes, bit-exact with f32_to_e4m3.
DJ_INLINE __m128i f32x16_to_e4m3(__m512 f) {
    const __m512i u0 = _mm512_castps_si512(f);
    const __m512i sign = _mm512_and_si512(u0, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
    const __m512i u = _mm512_xor_si512(u0, sign);
    const __m512i denorm = _mm512_set1_epi32(141 << 23);
    const __m512i sub = _mm512_sub_epi32(
        _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(u), _mm512_castsi512_ps(denorm))), denorm);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 20), _mm512_set1_epi32(1));
    const __m512i norm = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(static_cast<int>((uint32_t)(7 - 127) << 23) + 0x7FFFF)), odd), 20);
    const __mmask16 is_sub = _mm512_cmplt_epu32_mask(u, _mm512_set1_epi32(121 << 23));
    const __mmask16 is_sat = _mm512_cmpge_epu32_mask(u, _mm512_set1_epi32(0x43E00000));
    const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(u, _mm512_set1_epi32(0x7F800000));
    __m512i r = _mm512_mask_mov_epi32(norm, is_sub, sub);
    r = _mm512_mask_mov_epi32(r, is_sat, _mm512_set1_epi32(0x7E));
    r = _mm512_mask_mov_epi32(r, is_nan, _mm512_set1_epi32(0x7F));
    r = _mm512_or_si512(_mm512_and_si512(r, _mm512_set1_epi32(0xFF)), _mm512_srli_epi32(sign, 24));
    return _mm512_cvtepi32_epi8(r);
}
#endif

}  // namespace dj
