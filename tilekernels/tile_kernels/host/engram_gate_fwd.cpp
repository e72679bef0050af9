// Engram gate forward per (token, head): rstd_x, rstd_k = rsqrt(mean(.^2) + eps), the raw
// dot = sum x k w, s = dot rstd_x rstd_k / sqrt(H), gate = sigmoid(sign(s) sqrt(max(|s|, clamp))),
// out = bf16(x + gate v). FP32 sums in 16 lanes.
#include <tile_kernels/host/engram_args.hpp>
#include <tile_kernels/host/quant.hpp>

DJ_KERNEL(tk_engram_gate_fwd, "ptr,i64")
void tk_engram_gate_fwd(const tk::EngramGateFwdArgs* a, int64_t threads) {
    uint16_t* out = a->out;
    float *dot_out = a->dot, *gate_out = a->gate, *rx_out = a->rstd_x, *rk_out = a->rstd_k;
    const uint16_t *x = a->x, *k = a->k, *v = a->v;
    const float* w = a->w;
    const int64_t T = a->T, HC = a->HC, H = a->H, sxt = a->x_t, sxh = a->x_h, skt = a->k_t, skh = a->k_h, svt = a->v_t;
    const float eps = a->eps, clamp = a->clamp;
    const float scale = 1.0f / std::sqrt(static_cast<float>(H));
    dj::parallel_for(T * HC, threads, [&](int64_t item) {
        const int64_t t = item / HC, c = item % HC;
        const uint16_t* xr = x + t * sxt + c * sxh;
        const uint16_t* kr = k + t * skt + c * skh;
        const uint16_t* vr = v + t * svt;
        const float* wr = w + c * H;
        float sx = 0.0f, sk = 0.0f, dot = 0.0f;
        int64_t h = 0;
#ifdef DJ_HAVE_AVX512
        __m512 ax = _mm512_setzero_ps(), ak = ax, ad = ax;
        for (; h + 16 <= H; h += 16) {
            const __m512 xv = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + h)));
            const __m512 kv = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kr + h)));
            ax = _mm512_fmadd_ps(xv, xv, ax);
            ak = _mm512_fmadd_ps(kv, kv, ak);
            ad = _mm512_fmadd_ps(_mm512_mul_ps(xv, kv), _mm512_loadu_ps(wr + h), ad);
        }
        sx = _mm512_reduce_add_ps(ax);
        sk = _mm512_reduce_add_ps(ak);
        dot = _mm512_reduce_add_ps(ad);
#endif
        for (; h < H; ++h) {
            const float xv = dj::bf16_to_f32(xr[h]), kv = dj::bf16_to_f32(kr[h]);
            sx += xv * xv;
            sk += kv * kv;
            dot += xv * kv * wr[h];
        }
        const float rx = 1.0f / std::sqrt(sx / static_cast<float>(H) + eps);
        const float rk = 1.0f / std::sqrt(sk / static_cast<float>(H) + eps);
        const float s = dot * rx * rk * scale;
        const float q = std::sqrt(std::max(std::fabs(s), clamp));
        const float gate = 1.0f / (1.0f + tk::exp_f32(s > 0.0f ? -q : (s < 0.0f ? q : 0.0f)));
        if (dot_out != nullptr) {
            dot_out[item] = dot;
            gate_out[item] = gate;
            rx_out[item] = rx;
            rk_out[item] = rk;
        }
        uint16_t* o = out + item * H;
        h = 0;
#ifdef DJ_HAVE_AVX512
        const __m512 g = _mm512_set1_ps(gate);
        for (; h + 16 <= H; h += 16) {
            const __m512 xv = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + h)));
            const __m512 vv = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(vr + h)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + h), dj::f32x16_to_bf16(_mm512_add_ps(xv, tk::rounded(_mm512_mul_ps(g, vv)))));
        }
#endif
        for (; h < H; ++h) o[h] = dj::f32_to_bf16(dj::bf16_to_f32(xr[h]) + tk::rounded(gate * dj::bf16_to_f32(vr[h])));
    });
}
