// E5M6 (12-bit floats, 8 codes in 3 little-endian uint32 words, MSB first).
//   op 0, cast: one scale per row (amax clamped at 1e-4, max 65024); each scaled value becomes
//         the top 12 bits of its round-toward-zero half, rounded half-to-even on the 17 dropped
//         FP32 bits.
//   op 1, cast back: code << 4 read as a half, times the block scale, to FP32 or BF16.
#include <cfloat>

#include <tile_kernels/host/cast_args.hpp>
#include <tile_kernels/host/quant.hpp>

namespace {

inline uint32_t half_bits_toward_zero(uint32_t bits) {
    const uint32_t sign = (bits >> 16) & 0x8000u, exp = (bits >> 23) & 0xFFu, mant = bits & 0x7FFFFFu;
    if (exp == 255) return sign | (mant == 0 ? 0x7C00u : 0x7FFFu);
    if (exp > 142) return sign | 0x7C00u;
    if (exp >= 113) return sign | ((exp - 112) << 10) | (mant >> 13);
    if (exp >= 103) return sign | ((mant | 0x800000u) >> (126 - exp));
    return sign;
}

inline uint32_t e5m6_code(float v) {
    const uint32_t bits = dj::f32_bits(v);
    const uint32_t code = half_bits_toward_zero(bits) >> 4;
    return (code + (((code & 1u) + (bits & 0x1FFFFu)) > 0x10000u ? 1u : 0u)) & 0xFFFu;
}

inline float half_to_f32(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0) {
        const float m = static_cast<float>(mant) * 0x1p-24f;  // subnormal (exact)
        return sign ? -m : m;
    }
    if (exp == 31) return dj::bits_f32(sign | 0x7F800000u | (mant << 13));
    return dj::bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

inline void pack8(uint32_t* words, const uint32_t* c) {
    words[0] = c[0] << 20 | c[1] << 8 | c[2] >> 4;
    words[1] = (c[2] & 0xFu) << 28 | c[3] << 16 | c[4] << 4 | c[5] >> 8;
    words[2] = (c[5] & 0xFFu) << 24 | c[6] << 12 | c[7];
}

#ifdef DJ_HAVE_AVX512
// e5m6_code of 16 lanes whose exponent is at most 142 (|v| < 65536, no NaN / inf).
DJ_INLINE __m512i e5m6_codes16_in_range(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i a = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
    const __m512i exp = _mm512_srli_epi32(a, 23);
    const __m512i normal = _mm512_srli_epi32(_mm512_sub_epi32(a, _mm512_set1_epi32(112 << 23)), 13);
    // (mant | 1 << 23) >> (126 - exp): shift counts of 24 and more (exp < 103) give 0, as wanted
    const __m512i sub = _mm512_srlv_epi32(
        _mm512_ternarylogic_epi32(a, _mm512_set1_epi32(0x7FFFFF), _mm512_set1_epi32(0x800000), 0xEA),
        _mm512_sub_epi32(_mm512_set1_epi32(126), exp));
    const __m512i h = _mm512_mask_mov_epi32(sub, _mm512_cmpge_epu32_mask(exp, _mm512_set1_epi32(113)), normal);
    // (sign << 15 | h) >> 4
    __m512i code = _mm512_ternarylogic_epi32(_mm512_srli_epi32(h, 4), _mm512_srli_epi32(bits, 20), _mm512_set1_epi32(0x800), 0xF8);
    const __m512i up = _mm512_add_epi32(_mm512_and_si512(code, _mm512_set1_epi32(1)), _mm512_and_si512(bits, _mm512_set1_epi32(0x1FFFF)));
    code = _mm512_mask_add_epi32(code, _mm512_cmpgt_epi32_mask(up, _mm512_set1_epi32(0x10000)), code, _mm512_set1_epi32(1));
    return _mm512_and_si512(code, _mm512_set1_epi32(0xFFF));
}

// 16 codes (natural order) -> 8 pairs (c_even << 12 | c_odd), one per 64-bit lane.
DJ_INLINE __m512i e5m6_pairs(__m512i c) {
    return _mm512_ternarylogic_epi64(_mm512_slli_epi64(c, 12), _mm512_srli_epi64(c, 32), _mm512_set1_epi64(0xFFF000), 0xEC);
}

// Byte order of 4 pairs (12 bytes of an MSB-first 96-bit stream) as 3 little-endian words:
// output byte t of a group takes stream byte sigma(t); stream byte m is byte 2 - m % 3 of pair m / 3.
inline __m512i e5m6_pack_index() {
    alignas(64) uint8_t idx[64] = {};
    static const int sigma[12] = {3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8};
    for (int t = 0; t < 48; ++t) {
        const int m = sigma[t % 12], j = 4 * (t / 12) + m / 3;
        idx[t] = static_cast<uint8_t>(8 * j + 2 - m % 3);
    }
    return _mm512_load_si512(idx);
}
#endif

// One row of the cast: the row's |x| maximum, its scale, then 32 values (48 bytes) at a time
// when every scaled value stays below 65536 (exact integer forms of e5m6_code), else per value.
void cast_row(uint8_t* out, void* sf, const void* x, int32_t dt, int64_t t, int64_t H, bool round_sf, bool packed,
              int64_t sm, int64_t sk) {
    const char* row = static_cast<const char*>(x) + t * H * (dt == tk::kInBF16 ? 2 : 4);
    float amax = 0.0f;
    int64_t g0 = 0;
#ifdef DJ_HAVE_AVX512
    if (H % 16 == 0) {
        __m512i part[16] = {};
        part[0] = dt == tk::kInBF16 ? tk::absmax_bits_span<tk::kInBF16>(part[0], row, 0, H)
                                    : tk::absmax_bits_span<tk::kInF32>(part[0], row, 0, H);
        amax = _mm512_cvtss_f32(dt == tk::kInBF16 ? tk::reduce_absmax16<tk::kInBF16>(part) : tk::reduce_absmax16<tk::kInF32>(part));
    } else
#endif
        for (int64_t h = 0; h < H; ++h) amax = tk::amax_step(amax, std::fabs(tk::load1(row, dt, h)));
    const tk::Scale s = tk::block_scale(amax, 1e-4f, 65024.0f, round_sf);
    tk::store_sf(sf, packed, sm, sk, t, 0, s.sf);
    uint32_t* words = reinterpret_cast<uint32_t*>(out) + t * (H / 8) * 3;
#ifdef DJ_HAVE_AVX512
    // a finite maximum and multiplier keep |x * inv| <= 65024 * (1 + 2^-22)
    if (amax <= FLT_MAX && s.inv <= FLT_MAX) {
        const __m512i index = e5m6_pack_index();
        const __m512 vinv = _mm512_set1_ps(s.inv);
        for (; g0 + 4 <= H / 8; g0 += 4) {
            const __m512i c0 = e5m6_codes16_in_range(_mm512_mul_ps(tk::load16(row, dt, 8 * g0), vinv));
            const __m512i c1 = e5m6_codes16_in_range(_mm512_mul_ps(tk::load16(row, dt, 8 * g0 + 16), vinv));
            const __m512i bytes = _mm512_permutex2var_epi8(e5m6_pairs(c0), index, e5m6_pairs(c1));
            _mm512_mask_storeu_epi8(words + 3 * g0, 0xFFFFFFFFFFFFull, bytes);
        }
    }
#endif
    for (int64_t g = g0; g < H / 8; ++g) {
        uint32_t c[8];
        for (int i = 0; i < 8; ++i) c[i] = e5m6_code(tk::load1(row, dt, g * 8 + i) * s.inv);
        pack8(words + 3 * g, c);
    }
}

}  // namespace

DJ_KERNEL(tk_e5m6, "ptr,i64")
void tk_e5m6(const tk::E5M6Args* args, int64_t threads) {
    const tk::E5M6Args a = *args;
    void *out = a.out, *sf = a.sf;
    const void* x = a.x;
    const int32_t op = a.op, dt = a.dt, round_sf = a.round_sf, packed = a.packed;
    const int64_t T = a.T, H = a.H, BM = a.BM, BK = a.BK, sm = a.sm, sk = a.sk;
    dj::parallel_for(T, threads, [&](int64_t t) {
        if (op == 0) {
            cast_row(static_cast<uint8_t*>(out), sf, x, dt, t, H, round_sf != 0, packed != 0, sm, sk);
        } else {
            const uint32_t* words = static_cast<const uint32_t*>(x) + t * (H / 8) * 3;
            for (int64_t g = 0; g < H / 8; ++g) {
                const uint32_t w0 = words[3 * g], w1 = words[3 * g + 1], w2 = words[3 * g + 2];
                const uint32_t c[8] = {w0 >> 20, (w0 >> 8) & 0xFFFu, ((w0 << 4) | (w1 >> 28)) & 0xFFFu, (w1 >> 16) & 0xFFFu,
                                       (w1 >> 4) & 0xFFFu, ((w1 << 8) | (w2 >> 24)) & 0xFFFu, (w2 >> 12) & 0xFFFu, w2 & 0xFFFu};
                for (int i = 0; i < 8; ++i) {
                    const int64_t h = g * 8 + i;
                    const float v = half_to_f32(c[i] << 4) * tk::load_sf(sf, packed != 0, sm, sk, t / BM, h / BK);
                    if (dt == tk::kInBF16) static_cast<uint16_t*>(out)[t * H + h] = dj::f32_to_bf16(v);
                    else static_cast<float*>(out)[t * H + h] = v;
                }
            }
        }
    });
}
