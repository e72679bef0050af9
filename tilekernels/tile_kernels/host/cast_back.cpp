// Dequantisation of E4M3 or packed E2M1 data with block scales (FP32 with strides, or packed
// UE8M0) to FP32 or BF16: out = decode(q) * sf(block). Work item = (row, column chunk).
#include <vector>

#include <tile_kernels/host/cast_args.hpp>
#include <tile_kernels/host/quant.hpp>

namespace {

#ifdef DJ_HAVE_AVX512_BF16
// A block scale with which every decoded value times the scale is a normal FP32 number or zero
// (|code value| in [2^-9, 448]) and finite: then the hardware BF16 conversion (which flushes
// subnormal inputs) rounds exactly like dj::f32x16_to_bf16.
DJ_INLINE bool plain_scale(float s) {
    const float a = std::fabs(s);
    return a == 0.0f || (a >= 0x1p-117f && a <= 0x1p119f);
}

// 32 codes -> 32 BF16 values (scale plain_scale()); false (nothing stored) when an E4M3 NaN code
// is among them. E4M3: the code's bits moved into an FP16 pattern are the value / 2^8 exactly
// (subnormals included), widened by the FP16 conversion and scaled by sf * 2^8 (exact).
// E2M1: the 16 bytes' low / high nibbles index a value table for the even / odd elements.
template <int32_t FMT>
DJ_INLINE bool decode32_bf16(uint16_t* dst, const uint8_t* src, float sf) {
    __m512 lo, hi;
    if (FMT == tk::kE4M3) {
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
        if (_mm256_cmpeq_epi8_mask(_mm256_and_si256(b, _mm256_set1_epi8(0x7F)), _mm256_set1_epi8(0x7F))) return false;
        const __m512i w = _mm512_cvtepu8_epi16(b);
        // code << 7 puts the magnitude in bits 7-13 and the sign in bit 14; adding bit 14 to itself
        // carries the sign into bit 15
        const __m512i x = _mm512_slli_epi16(w, 7);
        const __m512i h = _mm512_add_epi16(x, _mm512_and_si512(x, _mm512_set1_epi16(0x4000)));
        const __m512 scale = _mm512_set1_ps(sf * 256.0f);
        lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), scale);
        hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), scale);
    } else {
        static const float kTable[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
        const __m512 table = _mm512_loadu_ps(kTable), scale = _mm512_set1_ps(sf);
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
        const __m512 even = _mm512_mul_ps(_mm512_permutexvar_ps(b, table), scale);
        const __m512 odd = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table), scale);
        // interleave even / odd elements back into order
        const __m512i e = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        lo = _mm512_permutex2var_ps(even, e, odd);
        hi = _mm512_permutex2var_ps(even, _mm512_add_epi32(e, _mm512_set1_epi32(8)), odd);
    }
    _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    return true;
}
#endif

template <int32_t FMT, bool BF16_OUT>
void run(void* out, const uint8_t* q, const void* sf, int64_t M, int64_t K, int64_t BM, int64_t BK, bool packed,
         int64_t sm, int64_t sk, int64_t threads) {
    const int64_t chunk = BK >= 1024 ? BK : (1024 / BK) * BK;
    const int64_t nchunks = (K + chunk - 1) / chunk;
    dj::parallel_threads(dj::thread_count(threads, M * nchunks), [&](int64_t t, int64_t nt) {
        std::vector<float> scale(chunk);
        const dj::Range rg = dj::split_range(M * nchunks, nt, t);
        for (int64_t item = rg.begin; item < rg.end; ++item) {
            const int64_t i = item / nchunks, c0 = (item % nchunks) * chunk, c1 = std::min(K, c0 + chunk), w = c1 - c0;
            const uint8_t* src = FMT == tk::kE4M3 ? q + i * K + c0 : q + i * (K / 2) + c0 / 2;
            float* of = static_cast<float*>(out) + i * K + c0;
            uint16_t* ob = static_cast<uint16_t*>(out) + i * K + c0;
#ifdef DJ_HAVE_AVX512
            if (BK % 16 == 0 && w % 16 == 0) {  // one broadcast scale per block, no scale buffer
                for (int64_t j = 0; j < w; j += BK) {
                    const float s = tk::load_sf(sf, packed, sm, sk, i / BM, (c0 + j) / BK);
                    const __m512 vs = _mm512_set1_ps(s);
                    int64_t jj = j;
#ifdef DJ_HAVE_AVX512_BF16
                    if (BF16_OUT && plain_scale(s))
                        for (; jj + 32 <= std::min(w, j + BK); jj += 32)
                            if (!decode32_bf16<FMT>(ob + jj, FMT == tk::kE4M3 ? src + jj : src + jj / 2, s)) break;
#endif
                    for (; jj < std::min(w, j + BK); jj += 16) {
                        const __m512 v = FMT == tk::kE4M3
                            ? dj::e4m3x16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + jj)))
                            : tk::e2m1x16_to_f32(src + jj / 2);
                        const __m512 r = _mm512_mul_ps(v, vs);
                        if (BF16_OUT) _mm256_storeu_si256(reinterpret_cast<__m256i*>(ob + jj), dj::f32x16_to_bf16(r));
                        else _mm512_storeu_ps(of + jj, r);
                    }
                }
                continue;
            }
#endif
            for (int64_t j = c0; j < c1; j += BK) {
                const float s = tk::load_sf(sf, packed, sm, sk, i / BM, j / BK);
                std::fill(scale.data() + (j - c0), scale.data() + (std::min(c1, j + BK) - c0), s);
            }
            int64_t j = 0;
#ifdef DJ_HAVE_AVX512
            for (; j + 16 <= w; j += 16) {
                const __m512 v = FMT == tk::kE4M3
                    ? dj::e4m3x16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j)))
                    : tk::e2m1x16_to_f32(src + j / 2);
                const __m512 r = _mm512_mul_ps(v, _mm512_loadu_ps(scale.data() + j));
                if (BF16_OUT) _mm256_storeu_si256(reinterpret_cast<__m256i*>(ob + j), dj::f32x16_to_bf16(r));
                else _mm512_storeu_ps(of + j, r);
            }
#endif
            for (; j < w; ++j) {
                const float v = FMT == tk::kE4M3 ? dj::e4m3_to_f32(src[j]) : dj::e2m1_to_f32((src[j / 2] >> (4 * (j & 1))) & 0xF);
                const float r = v * scale[j];
                if (BF16_OUT) ob[j] = dj::f32_to_bf16(r);
                else of[j] = r;
            }
        }
    });
}

}  // namespace

DJ_KERNEL(tk_cast_back, "ptr,i64")
void tk_cast_back(const tk::CastBackArgs* args, int64_t threads) {
    const tk::CastBackArgs a = *args;
    void* out = a.out;
    const uint8_t* q = a.q;
    const void* sf = a.sf;
    const int64_t M = a.M, K = a.K, BM = a.BM, BK = a.BK, sm = a.sm, sk = a.sk;
    const int32_t fmt = a.fmt, bf16_out = a.bf16_out, packed = a.packed;
    const bool pk = packed != 0;
    if (fmt == tk::kE4M3) {
        if (bf16_out) run<tk::kE4M3, true>(out, q, sf, M, K, BM, BK, pk, sm, sk, threads);
        else run<tk::kE4M3, false>(out, q, sf, M, K, BM, BK, pk, sm, sk, threads);
    } else {
        if (bf16_out) run<tk::kE2M1, true>(out, q, sf, M, K, BM, BK, pk, sm, sk, threads);
        else run<tk::kE2M1, false>(out, q, sf, M, K, BM, BK, pk, sm, sk, threads);
    }
}
