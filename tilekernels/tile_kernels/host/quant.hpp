// Vector building blocks of the tile_kernels quantisation kernels: 16-lane loads of BF16/FP32
// rows as FP32, E4M3 / E2M1 encode-and-store, E2M1 decode, and the scale-factor rule
// (sf = max(amax, clamp_min) / fmt_max, optionally rounded up to a power of two).
#pragma once

#include <limits>

#include <tile_kernels/host/common.hpp>

namespace tk {

enum InDtype : int32_t { kInF32 = 0, kInBF16 = 1 };
enum OutFmt : int32_t { kE4M3 = 0, kE2M1 = 1 };

DJ_INLINE float fmt_max(int32_t fmt) { return fmt == kE4M3 ? 448.0f : 6.0f; }

DJ_INLINE float load1(const void* p, int32_t dt, int64_t i) {
    return dt == kInBF16 ? dj::bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// One step of an |x| maximum that keeps NaN as torch's amax does (it returns the canonical quiet
// NaN); std::max would drop a NaN in its second operand.
DJ_INLINE float amax_step(float acc, float v) {
    return (acc != acc || v != v) ? std::numeric_limits<float>::quiet_NaN() : std::max(acc, v);
}

// x times its block's multiplier with torch's NaN: a NaN multiplier (a NaN block maximum) wins
// over a NaN x, whatever operand order the compiler picks for the product.
DJ_INLINE float scaled(float x, float inv) { return inv != inv ? inv : x * inv; }

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
        return dj::ue8m0_to_f32(static_cast<const uint8_t*>(sf)[4 * (m * sm + (k / 4) * sk) + (k % 4)]);
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

// 16 BF16 bit patterns (u16 array) -> FP32.
DJ_INLINE __m512 bf16x16_bits_to_f32(const void* p) {
    return dj::bf16x16_to_f32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

DJ_INLINE __m512 abs16(__m512 v) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF))); }

// Round |v| to a small float grid with one FP32 add: for a value in binade 2^e, adding
// M = 1.5 * 2^(e + 23 - mbits) (the binade clamped below at the format's smallest normal, which
// also covers subnormals) leaves round(|v| / spacing) in M's low mantissa bits, rounded by the
// FP adder to nearest, ties to even. The format code is that count plus mbits-scaled exponent;
// `adj` ulps added to M make the low bits come out as the code directly (mod 2^8), and M's even
// low bits keep the tie-to-even rule on the code's last bit. About half the operations of the
// integer rounding with separate normal / subnormal / saturation lanes.
template <int MBITS, uint32_t MIN_EXP_BITS, uint32_t ADJ>
DJ_INLINE __m512i small_float_codes16(__m512 a) {
    const __m512i e = _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7F800000)),
                                       _mm512_set1_epi32(static_cast<int>(MIN_EXP_BITS)));
    const __m512i m = _mm512_add_epi32(e, _mm512_set1_epi32(static_cast<int>(((23u - MBITS) << 23) + 0x400000u + ADJ)));
    const __m512 s = _mm512_add_ps(a, _mm512_castsi512_ps(m));
    return _mm512_add_epi32(_mm512_castps_si512(s), _mm512_srli_epi32(e, 23 - MBITS));
}

// 16 values -> 16 E4M3 bytes in the low byte of int32 lanes, bit-exact with dj::f32_to_e4m3
// (saturating at +-448, NaN -> 0x7F with its sign). Code = k + 8 * (e_bits - 121); 56 = -968 mod 256.
// IN_RANGE: the caller knows |v| < 464 and v is not NaN (a multiplier derived from the block's
// finite |x| maximum), which skips the saturation and NaN lanes.
template <bool IN_RANGE = false>
DJ_INLINE __m512i e4m3_codes16(__m512 v) {
    // min(448, |v|) keeps NaN (x86 min returns the second operand when one is NaN).
    const __m512 a = IN_RANGE ? abs16(v) : _mm512_min_ps(_mm512_set1_ps(448.0f), abs16(v));
    __m512i c = small_float_codes16<3, 121u << 23, 56u>(a);
    if (!IN_RANGE) c = _mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7F));
    // code | (sign >> 24): the code's bit 7 is clear, so one bit-select merges the sign.
    return _mm512_ternarylogic_epi32(c, _mm512_srli_epi32(_mm512_castps_si512(v), 24), _mm512_set1_epi32(0x7F), 0xE4);
}

DJ_INLINE void store_e4m3x16(uint8_t* dst, __m512 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(e4m3_codes16(v)));
}

// 16 values -> 16 E2M1 codes (round to nearest, ties to even code, saturating at 6, NaN -> 0 with
// its sign bit) as clean int32 lanes. Code = k + 2 * (e_bits - 127); 2 = -254 mod 16.
// IN_RANGE: |v| < 7 and not NaN.
template <bool IN_RANGE = false>
DJ_INLINE __m512i e2m1_codes16(__m512 v) {
    // max(|v|, 0) turns NaN into 0 (second operand), then saturate at 6.
    const __m512 a = IN_RANGE ? abs16(v) : _mm512_min_ps(_mm512_max_ps(abs16(v), _mm512_setzero_ps()), _mm512_set1_ps(6.0f));
    const __m512i c = small_float_codes16<1, 127u << 23, 2u>(a);
    // bits 0-2 from the code, bit 3 = sign (v >> 28 has nothing above bit 3).
    return _mm512_ternarylogic_epi32(_mm512_set1_epi32(0x7), c, _mm512_srli_epi32(_mm512_castps_si512(v), 28), 0xCA);
}

// |x| maxima as integers: the absolute-value bits of BF16 (u16 lanes) or FP32 (u32 lanes) order
// like the magnitudes, NaN above infinity, so an integer max is a NaN-propagating |x| max (as
// torch's amax) and BF16 data is reduced 32 values per instruction without widening.
template <int32_t DT>
DJ_INLINE __m512i absmax_bits(__m512i acc, const void* p, int64_t i, bool half = false) {
    if (DT == kInBF16) {
        const uint16_t* s = static_cast<const uint16_t*>(p) + i;
        const __m512i v = half ? _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)))
                               : _mm512_loadu_si512(s);
        return _mm512_max_epu16(acc, _mm512_and_si512(v, _mm512_set1_epi16(0x7FFF)));
    }
    return _mm512_max_epu32(acc, _mm512_and_si512(_mm512_loadu_si512(static_cast<const float*>(p) + i),
                                                  _mm512_set1_epi32(0x7FFFFFFF)));
}

// The |x| maximum bits of `n` (a multiple of 16) values starting at element i.
template <int32_t DT>
DJ_INLINE __m512i absmax_bits_span(__m512i acc, const void* p, int64_t i, int64_t n) {
    const int64_t step = DT == kInBF16 ? 32 : 16;
    int64_t j = 0;
    for (; j + step <= n; j += step) acc = absmax_bits<DT>(acc, p, i + j);
    if (j < n) acc = absmax_bits<DT>(acc, p, i + j, true);
    return acc;
}

// torch's amax returns its own NaN whatever the payload of the NaN it met: the canonical quiet
// NaN along a contiguous row, all ones across rows (its vertical vector max ORs in the NaN mask).
DJ_INLINE __m512 canonical_nan(__m512 v, uint32_t nan = 0x7FC00000u) {
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(nan))));
}

// Horizontal max of 16 partial-maximum vectors at once (a transposing tree: each level halves the
// lanes per block and pairs two vectors), returned as the 16 blocks' FP32 |x| maxima in order.
template <int32_t DT>
DJ_INLINE __m512 reduce_absmax16(const __m512i* v) {
    auto mx = [](__m512i a, __m512i b) { return DT == kInBF16 ? _mm512_max_epu16(a, b) : _mm512_max_epu32(a, b); };
    __m512i a[8], b[4], c[2];
    for (int i = 0; i < 8; ++i)  // 256-bit halves: [v(2i) | v(2i+1)]
        a[i] = mx(_mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i)  // 128-bit chunks: blocks 4i .. 4i+3
        b[i] = mx(_mm512_shuffle_i64x2(a[2 * i], a[2 * i + 1], 0x88), _mm512_shuffle_i64x2(a[2 * i], a[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; ++i)  // 64 bits per block: lane L = [block 8i+L | block 8i+4+L]
        c[i] = mx(_mm512_unpacklo_epi64(b[2 * i], b[2 * i + 1]), _mm512_unpackhi_epi64(b[2 * i], b[2 * i + 1]));
    // 32 bits per block: lane L, dword j = block 4j + L
    const __m512 c0 = _mm512_castsi512_ps(c[0]), c1 = _mm512_castsi512_ps(c[1]);
    __m512i d = mx(_mm512_castps_si512(_mm512_shuffle_ps(c0, c1, 0x88)), _mm512_castps_si512(_mm512_shuffle_ps(c0, c1, 0xDD)));
    if (DT == kInBF16) d = _mm512_slli_epi32(_mm512_max_epu16(d, _mm512_srli_epi32(d, 16)), 16);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return canonical_nan(_mm512_castsi512_ps(_mm512_permutexvar_epi32(order, d)));
}

// store_sf for the `n` (<= 16) blocks k0 .. k0+n-1 of row m: one masked store
// for row-major FP32, four-byte words for packed UE8M0, else one by one.
DJ_INLINE void store_sf16(void* sf, bool packed, int64_t sm, int64_t sk, int64_t m, int64_t k0, int n, __m512 v) {
    if (!packed && sk == 1) {
        _mm512_mask_storeu_ps(static_cast<float*>(sf) + m * sm + k0, static_cast<__mmask16>((1u << n) - 1), v);
    } else if (packed && k0 % 4 == 0) {
        alignas(16) uint8_t e[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(e), _mm512_cvtepi32_epi8(_mm512_srli_epi32(_mm512_castps_si512(v), 23)));
        for (int w = 0; 4 * w < n; ++w)
            std::memcpy(static_cast<uint8_t*>(sf) + 4 * (m * sm + (k0 / 4 + w) * sk), e + 4 * w, std::min(4, n - 4 * w));
    } else {
        alignas(64) float s[16];
        _mm512_store_ps(s, v);
        for (int j = 0; j < n; ++j) store_sf(sf, packed, sm, sk, m, k0 + j, s[j]);
    }
}

// block_scale for 16 blocks; bit-identical to the scalar form.
DJ_INLINE void block_scale16(__m512 amax, float clamp_min, float fmax, bool round_sf, __m512& sf, __m512& inv) {
    const __m512 a = _mm512_max_ps(_mm512_set1_ps(clamp_min), amax);  // keeps a NaN amax, as std::max(amax, c)
    const __m512 vmax = _mm512_set1_ps(fmax);
    sf = _mm512_div_ps(a, vmax);
    __m512 num = vmax, den = a;
    if (round_sf) {
        sf = _mm512_castsi512_ps(_mm512_and_si512(_mm512_add_epi32(_mm512_castps_si512(sf), _mm512_set1_epi32(0x7FFFFF)),
                                                  _mm512_set1_epi32(0x7F800000)));
        num = _mm512_set1_ps(1.0f), den = sf;
    }
    inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(sf, _mm512_setzero_ps(), _CMP_NEQ_UQ), num, den);
}

// 16 values -> 8 packed bytes (even element in the low nibble).
DJ_INLINE void store_e2m1x16(uint8_t* dst, __m512 v) {
    const __m512i c = e2m1_codes16(v);
    const __m512i packed = _mm512_or_si512(c, _mm512_srli_epi64(c, 28));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi64_epi8(packed));
}

// 32 BF16 values times their multipliers, quantised and stored: 32 E4M3 bytes or 16 packed E2M1
// bytes. The even elements are the low halves of the 32-bit lanes and the odd ones the high
// halves, so both widen in place (no cross-lane shuffles) and their codes merge lane-wise into
// output pairs; `even_scale` / `odd_scale` hold the multipliers of elements 0, 2, .. / 1, 3, ..
template <int32_t FMT, bool IN_RANGE>
DJ_INLINE void quantize_bf16x32(uint8_t* dst, const uint16_t* src, __m512 even_scale, __m512 odd_scale) {
    const __m512i w = _mm512_loadu_si512(src);
    const __m512 even = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), even_scale);
    const __m512 odd = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)))), odd_scale);
    if (FMT == kE4M3) {  // codes are clean bytes: one 16-bit lane per pair
        const __m512i pair = _mm512_or_si512(e4m3_codes16<IN_RANGE>(even), _mm512_slli_epi32(e4m3_codes16<IN_RANGE>(odd), 8));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(pair));
    } else {  // clean nibbles: one byte per pair, even element low
        const __m512i pair = _mm512_or_si512(e2m1_codes16<IN_RANGE>(even), _mm512_slli_epi32(e2m1_codes16<IN_RANGE>(odd), 4));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(pair));
    }
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
