// per_block_cast_lossless: packed E2M1 data with power-of-two block scales (exponent e_in) to
// E4M3 with larger blocks (exponent e_out, computed by the caller): out = e4m3(v * 2^(e_in - e_out)),
// the factor built from its exponent bits exactly as the reference builds it (int32 arithmetic).
#include <tile_kernels/host/cast_args.hpp>
#include <tile_kernels/host/quant.hpp>

namespace {

// The factor's bits keep the low 9 bits of e_in - e_out + 127 (sign and exponent): 512 factors.
DJ_INLINE uint32_t factor_key(int32_t e_in, int32_t e_out) { return static_cast<uint32_t>(e_in - e_out + 127) & 0x1FFu; }
DJ_INLINE float factor(int32_t e_in, int32_t e_out) { return dj::bits_f32(factor_key(e_in, e_out) << 23); }

#ifdef DJ_HAVE_AVX512
// For every factor, the E4M3 codes of the 16 E2M1 values times it: a block's byte table, with
// which each packed byte's two nibbles look their outputs up (vpshufb) in place.
struct Tables {
    alignas(64) uint8_t codes[512][16];
    Tables() {
        static const float kValues[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
        for (uint32_t k = 0; k < 512; ++k) {
            const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(kValues), _mm512_set1_ps(dj::bits_f32(k << 23)));
            _mm_store_si128(reinterpret_cast<__m128i*>(codes[k]), _mm512_cvtepi32_epi8(tk::e4m3_codes16(v)));
        }
    }
};
const Tables tables;
#endif

// The input-block exponent of row i, block b.
DJ_INLINE int32_t exponent_in(const void* sf, bool packed, int64_t sm, int64_t sk, int64_t ri, int64_t b) {
    return static_cast<int32_t>((dj::f32_bits(tk::load_sf(sf, packed, sm, sk, ri, b)) >> 23) & 0xFF);
}

// One row: every input block's values times its factor 2^(e_in - e_out), as E4M3.
void convert_row(uint8_t* dst, const uint8_t* src, const void* sf, bool packed, int64_t sm, int64_t sk, int64_t ri,
                 const int32_t* eo, int64_t K, int64_t IBK, int64_t OBK) {
    int64_t ob = 0, ob_end = OBK;  // the output block of column j0, counted along (no divisions)
    for (int64_t b = 0, j0 = 0; j0 < K; ++b, j0 += IBK) {
        const int64_t j1 = std::min(K, j0 + IBK);
        if (j0 >= ob_end) ++ob, ob_end += OBK;
        const int32_t e_in = exponent_in(sf, packed, sm, sk, ri, b);
        int64_t j = j0;
#ifdef DJ_HAVE_AVX512
        if (j1 - j0 >= 32) {
            const __m256i table = _mm256_broadcastsi128_si256(
                _mm_load_si128(reinterpret_cast<const __m128i*>(tables.codes[factor_key(e_in, eo[ob])])));
            for (; j + 32 <= j1; j += 32) {
                const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j / 2)));
                // u16 lane b -> bytes (b & 15, b >> 4): low nibble first, as the elements
                const __m256i idx = _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi16(0x0F)),
                                                    _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0xF0)), 4));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), _mm256_shuffle_epi8(table, idx));
            }
        }
        const float f = factor(e_in, eo[ob]);
        for (; j + 16 <= j1; j += 16)
            tk::store_e4m3x16(dst + j, _mm512_mul_ps(tk::e2m1x16_to_f32(src + j / 2), _mm512_set1_ps(f)));
#else
        const float f = factor(e_in, eo[ob]);
#endif
        for (; j < j1; ++j) dst[j] = dj::f32_to_e4m3(dj::e2m1_to_f32((src[j / 2] >> (4 * (j & 1))) & 0xF) * f);
    }
}

}  // namespace

// Work item = one output block row: its exponents e_out = max(0, max(e_in over the block) - 6)
// (written to e_out (Mb, kb_out) for the caller's scales), then its data rows.
DJ_KERNEL(tk_lossless, "ptr,i64")
void tk_lossless(const tk::LosslessArgs* args, int64_t threads) {
    const tk::LosslessArgs a = *args;
    uint8_t* out = a.out;
    int32_t* e_out = a.e_out;
    const uint8_t* q = a.q;
    const void* sf = a.sf;
    const int64_t M = a.M, K = a.K, IBM = a.IBM, IBK = a.IBK, OBM = a.OBM, OBK = a.OBK, sm = a.sm, sk = a.sk,
                  kb_out = a.kb_out;
    const int32_t packed = a.packed;
    const bool pk = packed != 0;
    const int64_t kb_in = (K + IBK - 1) / IBK, per_out = OBK / IBK;
    dj::parallel_for((M + OBM - 1) / OBM, threads, [&](int64_t rb) {
        int32_t* eo = e_out + rb * kb_out;
        const int64_t r0 = rb * OBM, r1 = std::min(M, r0 + OBM);
        std::fill(eo, eo + kb_out, 0);
        for (int64_t ri = r0 / IBM; ri <= (r1 - 1) / IBM; ++ri)  // each input scale row once
            for (int64_t k = 0; k < kb_out; ++k)
                for (int64_t b = k * per_out; b < std::min(kb_in, (k + 1) * per_out); ++b)
                    eo[k] = std::max(eo[k], exponent_in(sf, pk, sm, sk, ri, b));
        for (int64_t k = 0; k < kb_out; ++k) eo[k] = std::max(eo[k] - 6, 0);
        for (int64_t i = r0; i < r1; ++i) convert_row(out + i * K, q + i * (K / 2), sf, pk, sm, sk, i / IBM, eo, K, IBK, OBK);
    });
}
