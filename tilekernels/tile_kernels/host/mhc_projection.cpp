// The mHC projection: mul[t, j] = <r_t, fn_j> and sqrsum[t] = <r_t, r_t> for the flattened BF16
// residual r (T, K) and FP32 fn (m3, K), FP32 FMAs in 16 lanes. Blocks of 4 tokens x 6 rows of fn
// keep 24 accumulators in registers. Tiles of 32 tokens walk K in chunks whose slice of fn
// (m3 x 1024 FP32) stays in L2 for all of the tile's blocks: fn is read from L3 once per tile, not
// once per 4 tokens. The lane accumulators carry over between chunks through a small buffer, so
// every lane sums in plain k order (results do not depend on the tiling), and sqrsum rides along
// with the first block of fn rows instead of a separate loop over the residual.
#include <tile_kernels/host/common.hpp>

namespace {

constexpr int64_t kTileTokens = 32, kChunk = 1024;

#ifdef DJ_HAVE_AVX512
// Lanes of acc (TB x RB vectors at acc[(a * m3 + j0 + b) * 16]) and, when sq is set, of the
// tokens' sums of squares, over k in [k0, k1) (multiples of 16).
template <int TB, int RB>
DJ_INLINE void block(float* acc, float* sq, const uint16_t* x, const float* fn, int64_t K, int64_t m3, int64_t t0,
                     int64_t j0, int64_t k0, int64_t k1) {
    __m512 c[TB][RB], s[TB];
    for (int a = 0; a < TB; ++a) {
        for (int b = 0; b < RB; ++b) c[a][b] = _mm512_loadu_ps(acc + (a * m3 + j0 + b) * 16);
        if (sq) s[a] = _mm512_loadu_ps(sq + a * 16);
    }
    for (int64_t k = k0; k < k1; k += 16) {
        __m512 r[TB];
        for (int a = 0; a < TB; ++a) {
            r[a] = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + (t0 + a) * K + k)));
            if (sq) s[a] = _mm512_fmadd_ps(r[a], r[a], s[a]);
        }
        for (int b = 0; b < RB; ++b) {
            const __m512 f = _mm512_loadu_ps(fn + (j0 + b) * K + k);
            for (int a = 0; a < TB; ++a) c[a][b] = _mm512_fmadd_ps(r[a], f, c[a][b]);
        }
    }
    for (int a = 0; a < TB; ++a) {
        for (int b = 0; b < RB; ++b) _mm512_storeu_ps(acc + (a * m3 + j0 + b) * 16, c[a][b]);
        if (sq) _mm512_storeu_ps(sq + a * 16, s[a]);
    }
}

// All fn rows for TB tokens starting at t0 over one chunk; acc / sq point at the first token's.
template <int TB>
void tokens(float* acc, float* sq, const uint16_t* x, const float* fn, int64_t K, int64_t m3, int64_t t0, int64_t k0,
            int64_t k1) {
    int64_t j = 0;
    for (; j + 6 <= m3; j += 6) block<TB, 6>(acc, j == 0 ? sq : nullptr, x, fn, K, m3, t0, j, k0, k1);
    for (; j < m3; ++j) block<TB, 1>(acc, j == 0 ? sq : nullptr, x, fn, K, m3, t0, j, k0, k1);
}

void tile(float* mul, float* sqrsum, const uint16_t* x, const float* fn, int64_t T, int64_t K, int64_t m3, int64_t t0,
          float* acc, float* sq) {
    const int64_t t1 = std::min(T, t0 + kTileTokens), n = t1 - t0, k16 = K / 16 * 16;
    std::fill(acc, acc + n * m3 * 16, 0.0f);
    std::fill(sq, sq + n * 16, 0.0f);
    for (int64_t k0 = 0; k0 < k16; k0 += kChunk) {
        const int64_t k1 = std::min(k16, k0 + kChunk);
        int64_t t = t0;
        for (; t + 4 <= t1; t += 4) tokens<4>(acc + (t - t0) * m3 * 16, sq + (t - t0) * 16, x, fn, K, m3, t, k0, k1);
        for (; t < t1; ++t) tokens<1>(acc + (t - t0) * m3 * 16, sq + (t - t0) * 16, x, fn, K, m3, t, k0, k1);
    }
    for (int64_t t = t0; t < t1; ++t) {
        const uint16_t* r = x + t * K;
        for (int64_t j = 0; j < m3; ++j) {
            float s = _mm512_reduce_add_ps(_mm512_loadu_ps(acc + ((t - t0) * m3 + j) * 16));
            for (int64_t k = k16; k < K; ++k) s = std::fma(dj::bf16_to_f32(r[k]), fn[j * K + k], s);
            mul[t * m3 + j] = s;
        }
        float s = _mm512_reduce_add_ps(_mm512_loadu_ps(sq + (t - t0) * 16));
        for (int64_t k = k16; k < K; ++k) s = std::fma(dj::bf16_to_f32(r[k]), dj::bf16_to_f32(r[k]), s);
        sqrsum[t] = s;
    }
}
#endif

}  // namespace

DJ_KERNEL(tk_mhc_projection, "ptr,ptr,ptr,ptr,i64,i64,i64,i64")
void tk_mhc_projection(float* mul, float* sqrsum, const uint16_t* x, const float* fn, int64_t T, int64_t K, int64_t m3,
                       int64_t threads) {
#ifdef DJ_HAVE_AVX512
    const int64_t tiles = (T + kTileTokens - 1) / kTileTokens;
    dj::parallel_threads(dj::thread_count(threads, tiles), [&](int64_t th, int64_t nt) {
        std::vector<float> acc(kTileTokens * m3 * 16), sq(kTileTokens * 16);
        const dj::Range rg = dj::split_range(tiles, nt, th);
        for (int64_t i = rg.begin; i < rg.end; ++i) tile(mul, sqrsum, x, fn, T, K, m3, i * kTileTokens, acc.data(), sq.data());
    });
#else
    dj::parallel_for(T, threads, [&](int64_t t) {
        const uint16_t* r = x + t * K;
        for (int64_t j = 0; j < m3; ++j) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; ++k) s = std::fma(dj::bf16_to_f32(r[k]), fn[j * K + k], s);
            mul[t * m3 + j] = s;
        }
        float s = 0.0f;
        for (int64_t k = 0; k < K; ++k) s = std::fma(dj::bf16_to_f32(r[k]), dj::bf16_to_f32(r[k]), s);
        sqrsum[t] = s;
    });
#endif
}
