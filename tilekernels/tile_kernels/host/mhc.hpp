// Per-token mHC math shared by the standalone op kernels and mhc_pre_big_fuse, so the fused kernel
// is bitwise equal to the composed ops. Every product that feeds an add goes through rounded()
// (the references round separately) or is an explicit fma (apply_mix accumulates with FMAs).
#pragma once

#include <tile_kernels/host/common.hpp>

namespace tk {
namespace mhc {

DJ_INLINE float sigmoid(float z) { return 1.0f / (1.0f + exp_f32(-z)); }

// out[j] = mul[j] * rsqrt(sqrsum / K + eps)
DJ_INLINE void norm(const float* mul, float sqrsum, int64_t K, float eps, int64_t m3, float* out) {
    const float rs = 1.0f / std::sqrt(sqrsum / static_cast<float>(K) + eps);
    for (int64_t j = 0; j < m3; ++j) out[j] = mul[j] * rs;
}

// mixes (m(m+2)) -> pre (m), post (m), comb (m*m, row-major)
DJ_INLINE void split(const float* in, const float* scale, const float* base, int64_t m, float post_mult, float pre_eps,
                     float* pre, float* post, float* comb) {
    for (int64_t i = 0; i < m; ++i) pre[i] = sigmoid(rounded(in[i] * scale[0]) + base[i]) + pre_eps;
    for (int64_t i = 0; i < m; ++i) post[i] = sigmoid(rounded(in[m + i] * scale[1]) + base[m + i]) * post_mult;
    for (int64_t i = 0; i < m * m; ++i) comb[i] = rounded(in[2 * m + i] * scale[2]) + base[2 * m + i];
}

// In place on one m x m matrix: softmax over rows, + eps, then column / row normalisation.
DJ_INLINE void sinkhorn(float* x, int64_t m, int64_t repeat, float eps) {
    for (int64_t r = 0; r < m; ++r) {
        float* row = x + r * m;
        float mx = row[0];
        for (int64_t c = 1; c < m; ++c) mx = std::max(mx, row[c]);
        float sum = 0.0f;
        for (int64_t c = 0; c < m; ++c) { row[c] = exp_f32(row[c] - mx); sum += row[c]; }
        for (int64_t c = 0; c < m; ++c) row[c] = row[c] / sum + eps;
    }
    auto cols = [&] {
        for (int64_t c = 0; c < m; ++c) {
            float sum = 0.0f;
            for (int64_t r = 0; r < m; ++r) sum += x[r * m + c];
            for (int64_t r = 0; r < m; ++r) x[r * m + c] = x[r * m + c] / (sum + eps);
        }
    };
    cols();
    for (int64_t it = 1; it < repeat; ++it) {
        for (int64_t r = 0; r < m; ++r) {
            float sum = 0.0f;
            for (int64_t c = 0; c < m; ++c) sum += x[r * m + c];
            for (int64_t c = 0; c < m; ++c) x[r * m + c] = x[r * m + c] / (sum + eps);
        }
        cols();
    }
}

// out = bf16(sum_i fma(x_i, mix_i, acc)) over the m residual streams of one token.
DJ_INLINE void apply_mix(const uint16_t* x, const float* mix, int64_t m, int64_t H, uint16_t* out) {
    int64_t h = 0;
#ifdef DJ_HAVE_AVX512
    for (; h + 16 <= H; h += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < m; ++i)
            acc = _mm512_fmadd_ps(dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i * H + h))),
                                  _mm512_set1_ps(mix[i]), acc);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + h), dj::f32x16_to_bf16(acc));
    }
#endif
    for (; h < H; ++h) {
        float acc = 0.0f;
        for (int64_t i = 0; i < m; ++i) acc = std::fma(dj::bf16_to_f32(x[i * H + h]), mix[i], acc);
        out[h] = dj::f32_to_bf16(acc);
    }
}

}  // namespace mhc
}  // namespace tk
