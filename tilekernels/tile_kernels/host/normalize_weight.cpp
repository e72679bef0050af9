// normalize_weight: den[t] = ((1e-20 + w[t,0]) + w[t,1]) + ... in FP32 (the reference's order),
// out[t,k] = w[t,k] / den[t] (a true division, as the reference). Rows go 16 at a time: the
// sums per row in scalar FP32, then the K vectors of the 16 rows' flat block divided by their
// row's sum, broadcast with one permutation per vector. Small inputs stay on one thread.
#include <tile_kernels/host/common.hpp>

namespace {

// row_of[p] = p / K for the 16 * K flat positions of a chunk.
void rows16(float* den, float* out, const float* w, int64_t T, int64_t K, int64_t t0, const int32_t* row_of) {
    const int64_t n = std::min<int64_t>(16, T - t0);
    alignas(64) float d[16] = {};
    for (int64_t r = 0; r < n; ++r) {
        float s = 1e-20f;
        for (int64_t k = 0; k < K; ++k) s += w[(t0 + r) * K + k];
        d[r] = s;
        den[t0 + r] = s;
    }
    const float* src = w + t0 * K;
    float* dst = out + t0 * K;
    int64_t p = 0;
#ifdef DJ_HAVE_AVX512
    if (n == 16) {
        const __m512 vd = _mm512_load_ps(d);
        for (; p < 16 * K; p += 16) {
            const __m512 dv = _mm512_permutexvar_ps(_mm512_loadu_si512(row_of + p), vd);
            _mm512_storeu_ps(dst + p, _mm512_div_ps(_mm512_loadu_ps(src + p), dv));
        }
    }
#endif
    for (; p < n * K; ++p) dst[p] = src[p] / d[p / K];
}

}  // namespace

DJ_KERNEL(tk_normalize_weight, "ptr,ptr,ptr,i64,i64,i64")
void tk_normalize_weight(float* den, float* out, const float* w, int64_t T, int64_t K, int64_t threads) {
    std::vector<int32_t> row_of(16 * K);
    for (int64_t p = 0; p < 16 * K; ++p) row_of[p] = static_cast<int32_t>(p / K);
    const int64_t chunks = (T + 15) / 16;
    dj::parallel_for(chunks, T * K >= (1 << 17) ? threads : 1,
                     [&](int64_t c) { rows16(den, out, w, T, K, 16 * c, row_of.data()); });
}
