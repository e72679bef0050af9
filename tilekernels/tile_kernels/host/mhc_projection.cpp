// The mHC projection: mul[t, j] = <r_t, fn_j> and sqrsum[t] = <r_t, r_t> for the flattened BF16
// residual r (T, K) and FP32 fn (m3, K), FP32 FMAs in 16 lanes. Blocks of 4 tokens x 6 rows of fn
// keep 24 accumulators in registers, so fn streams from cache once per 4 tokens.
#include <tile_kernels/host/common.hpp>

namespace {

template <int TB, int RB>
void block(float* mul, const uint16_t* x, const float* fn, int64_t K, int64_t m3, int64_t t0, int64_t j0) {
#ifdef DJ_HAVE_AVX512
    __m512 acc[TB][RB];
    for (int a = 0; a < TB; ++a)
        for (int b = 0; b < RB; ++b) acc[a][b] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 r[TB];
        for (int a = 0; a < TB; ++a)
            r[a] = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + (t0 + a) * K + k)));
        for (int b = 0; b < RB; ++b) {
            const __m512 f = _mm512_loadu_ps(fn + (j0 + b) * K + k);
            for (int a = 0; a < TB; ++a) acc[a][b] = _mm512_fmadd_ps(r[a], f, acc[a][b]);
        }
    }
    for (int a = 0; a < TB; ++a)
        for (int b = 0; b < RB; ++b) {
            float s = _mm512_reduce_add_ps(acc[a][b]);
            for (int64_t kk = k; kk < K; ++kk) s = std::fma(dj::bf16_to_f32(x[(t0 + a) * K + kk]), fn[(j0 + b) * K + kk], s);
            mul[(t0 + a) * m3 + j0 + b] = s;
        }
#else
    for (int a = 0; a < TB; ++a)
        for (int b = 0; b < RB; ++b) {
            float s = 0.0f;
            for (int64_t kk = 0; kk < K; ++kk) s = std::fma(dj::bf16_to_f32(x[(t0 + a) * K + kk]), fn[(j0 + b) * K + kk], s);
            mul[(t0 + a) * m3 + j0 + b] = s;
        }
#endif
}

template <int TB>
void tokens(float* mul, const uint16_t* x, const float* fn, int64_t K, int64_t m3, int64_t t0) {
    int64_t j = 0;
    for (; j + 6 <= m3; j += 6) block<TB, 6>(mul, x, fn, K, m3, t0, j);
    for (; j < m3; ++j) block<TB, 1>(mul, x, fn, K, m3, t0, j);
}

}  // namespace

DJ_KERNEL(tk_mhc_projection, "ptr,ptr,ptr,ptr,i64,i64,i64,i64")
void tk_mhc_projection(float* mul, float* sqrsum, const uint16_t* x, const float* fn, int64_t T, int64_t K, int64_t m3,
                       int64_t threads) {
    dj::parallel_for((T + 3) / 4, threads, [&](int64_t blk) {
        const int64_t t0 = blk * 4;
        if (t0 + 4 <= T) tokens<4>(mul, x, fn, K, m3, t0);
        else for (int64_t t = t0; t < T; ++t) tokens<1>(mul, x, fn, K, m3, t);
        for (int64_t t = t0; t < std::min(T, t0 + 4); ++t) {
            const uint16_t* r = x + t * K;
            float s = 0.0f;
            int64_t k = 0;
#ifdef DJ_HAVE_AVX512
            __m512 acc = _mm512_setzero_ps();
            for (; k + 16 <= K; k += 16) {
                const __m512 v = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + k)));
                acc = _mm512_fmadd_ps(v, v, acc);
            }
            s = _mm512_reduce_add_ps(acc);
#endif
            for (; k < K; ++k) s = std::fma(dj::bf16_to_f32(r[k]), dj::bf16_to_f32(r[k]), s);
            sqrsum[t] = s;
        }
    });
}
