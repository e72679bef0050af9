// Dequantisation of E4M3 or packed E2M1 data with block scales (FP32 with strides, or packed
// UE8M0) to FP32 or BF16: out = decode(q) * sf(block). Work item = (row, column chunk).
#include <vector>

#include <tile_kernels/host/quant.hpp>

namespace {

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
                    const __m512 vs = _mm512_set1_ps(tk::load_sf(sf, packed, sm, sk, i / BM, (c0 + j) / BK));
                    for (int64_t jj = j; jj < std::min(w, j + BK); jj += 16) {
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

DJ_KERNEL(tk_cast_back, "ptr,ptr,ptr,i32,i32,i64,i64,i64,i64,i32,i64,i64,i64")
void tk_cast_back(void* out, const uint8_t* q, const void* sf, int32_t fmt, int32_t bf16_out, int64_t M, int64_t K,
                  int64_t BM, int64_t BK, int32_t packed, int64_t sm, int64_t sk, int64_t threads) {
    const bool pk = packed != 0;
    if (fmt == tk::kE4M3) {
        if (bf16_out) run<tk::kE4M3, true>(out, q, sf, M, K, BM, BK, pk, sm, sk, threads);
        else run<tk::kE4M3, false>(out, q, sf, M, K, BM, BK, pk, sm, sk, threads);
    } else {
        if (bf16_out) run<tk::kE2M1, true>(out, q, sf, M, K, BM, BK, pk, sm, sk, threads);
        else run<tk::kE2M1, false>(out, q, sf, M, K, BM, BK, pk, sm, sk, threads);
    }
}
