// mhc_post forward, per token: out[n] = bf16(x * post[n] + sum_i comb[i, n] * residual[i]), FP32 math
// (the comb sum with FMAs in stream order, the post product rounded on its own).
#include <tile_kernels/host/common.hpp>

DJ_KERNEL(tk_mhc_post, "ptr,ptr,ptr,ptr,ptr,i64,i64,i64,i64")
void tk_mhc_post(uint16_t* out, const uint16_t* x, const uint16_t* residual, const float* post, const float* comb,
                 int64_t T, int64_t m, int64_t H, int64_t threads) {
    dj::parallel_for(T, threads, [&](int64_t t) {
        const uint16_t* xt = x + t * H;
        const uint16_t* rt = residual + t * m * H;
        const float* pt = post + t * m;
        const float* ct = comb + t * m * m;
        uint16_t* ot = out + t * m * H;
        int64_t h = 0;
#ifdef DJ_HAVE_AVX512
        constexpr int64_t kMaxM = 8;  // streams widened once per column chunk and kept in registers
        for (; m <= kMaxM && h + 16 <= H; h += 16) {
            const __m512 xv = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xt + h)));
            __m512 r[kMaxM];
            for (int64_t i = 0; i < m; ++i)
                r[i] = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rt + i * H + h)));
            for (int64_t n = 0; n < m; ++n) {
                __m512 acc = _mm512_setzero_ps();
                for (int64_t i = 0; i < m; ++i) acc = _mm512_fmadd_ps(_mm512_set1_ps(ct[i * m + n]), r[i], acc);
                const __m512 y = _mm512_add_ps(tk::rounded(_mm512_mul_ps(xv, _mm512_set1_ps(pt[n]))), acc);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(ot + n * H + h), dj::f32x16_to_bf16(y));
            }
        }
#endif
        for (; h < H; ++h) {
            const float xv = dj::bf16_to_f32(xt[h]);
            for (int64_t n = 0; n < m; ++n) {
                float acc = 0.0f;
                for (int64_t i = 0; i < m; ++i) acc = std::fma(ct[i * m + n], dj::bf16_to_f32(rt[i * H + h]), acc);
                ot[n * H + h] = dj::f32_to_bf16(tk::rounded(xv * pt[n]) + acc);
            }
        }
    });
}
