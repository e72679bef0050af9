// The standalone mHC forward steps on CPU (the fused kernel reuses the same per-token code):
// op 0 norm: out = mul * rsqrt(sqrsum / K + eps); op 1 split_mixes; op 2 sinkhorn; op 3 apply_mix;
// op 4 head_compute_mix (the pre mixes of split_mixes alone).
#include <tile_kernels/host/mhc.hpp>
#include <tile_kernels/host/mhc_args.hpp>

namespace {

// head_compute_mix over the flat (T * m) mixes, 16 at a time: base repeats with period m, so a
// pattern of 16 * m entries (a whole number of both periods) gives the base of any 16 lanes.
void head_mix(const float* in, float scale, const float* base, int64_t T, int64_t m, float eps, float* out) {
    const int64_t n = T * m;
    int64_t k = 0;
#ifdef DJ_HAVE_AVX512
    std::vector<float> pattern(16 * m);
    for (int64_t j = 0; j < 16 * m; ++j) pattern[j] = base[j % m];
    const __m512 vs = _mm512_set1_ps(scale), one = _mm512_set1_ps(1.0f), ve = _mm512_set1_ps(eps);
    for (int64_t off = 0; k + 16 <= n; k += 16, off = off + 16 == 16 * m ? 0 : off + 16) {
        const __m512 z = _mm512_add_ps(tk::rounded(_mm512_mul_ps(_mm512_loadu_ps(in + k), vs)), _mm512_loadu_ps(pattern.data() + off));
        const __m512 e = tk::exp_f32x16(_mm512_sub_ps(_mm512_setzero_ps(), z));
        _mm512_storeu_ps(out + k, _mm512_add_ps(_mm512_div_ps(one, _mm512_add_ps(one, e)), ve));
    }
#endif
    for (; k < n; ++k) out[k] = tk::mhc::sigmoid(tk::rounded(in[k] * scale) + base[k % m]) + eps;
}

}  // namespace

DJ_KERNEL(tk_mhc_op, "ptr,i64")
void tk_mhc_op(const tk::MhcOpArgs* args, int64_t threads) {
    const tk::MhcOpArgs A = *args;
    const int32_t op = A.op;
    const int64_t T = A.T, m = A.m, K = A.K, repeat = A.repeat;
    const void *a = A.a, *b = A.b;
    const float *scale = A.scale, *base = A.base;
    void *o1 = A.o1, *o2 = A.o2, *o3 = A.o3;
    const float f1 = A.f1, f2 = A.f2;
    const int64_t m3 = m * (m + 2);
    if (op == 4) {  // a = input_mix (T, m) -> o1 (T, m); f1 = pre_eps
        head_mix(static_cast<const float*>(a), scale[0], base, T, m, f1, static_cast<float*>(o1));
        return;
    }
    dj::parallel_for((T + 63) / 64, threads, [&](int64_t blk) {
        for (int64_t t = blk * 64; t < std::min(T, blk * 64 + 64); ++t) {
            switch (op) {
                case 0:  // a = mul (T, m3), b = sqrsum (T), o1 = out (T, m3); f1 = eps
                    tk::mhc::norm(static_cast<const float*>(a) + t * m3, static_cast<const float*>(b)[t], K, f1, m3,
                                  static_cast<float*>(o1) + t * m3);
                    break;
                case 1:  // a = mixes (T, m3) -> o1 pre, o2 post, o3 comb; f1 = post_mult, f2 = pre_eps
                    tk::mhc::split(static_cast<const float*>(a) + t * m3, scale, base, m, f1, f2,
                                   static_cast<float*>(o1) + t * m, static_cast<float*>(o2) + t * m,
                                   static_cast<float*>(o3) + t * m * m);
                    break;
                case 2: {  // a = x (T, m, m) -> o1; f1 = eps
                    float* x = static_cast<float*>(o1) + t * m * m;
                    std::memcpy(x, static_cast<const float*>(a) + t * m * m, sizeof(float) * m * m);
                    tk::mhc::sinkhorn(x, m, repeat, f1);
                    break;
                }
                default:  // a = residual (T, m, K=H) bf16, b = mix (T, m) -> o1 (T, H) bf16
                    tk::mhc::apply_mix(static_cast<const uint16_t*>(a) + t * m * K, static_cast<const float*>(b) + t * m,
                                       m, K, static_cast<uint16_t*>(o1) + t * K);
            }
        }
    });
}
