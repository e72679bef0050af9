// Engram gate backward. Per (token, head), from the saved dot, gate and rstds:
//   d_gate = <g, v>; d_s = d_gate gate (1 - gate) / (2 sqrt|s|) where |s| >= clamp, else 0;
//   grad_x = g + d_dot k w - d_rx rstd_x^3 x / H, grad_k = d_dot x w - d_rk rstd_k^3 k / H,
//   grad_v = sum_heads g gate, and block b of `num_blocks` contiguous token ranges accumulates
//   grad_w_partial[b] += d_dot x k. One thread per block keeps the partials race-free.
#include <tile_kernels/host/common.hpp>
#include <tile_kernels/host/engram_args.hpp>

#ifdef DJ_HAVE_AVX512
namespace {
DJ_INLINE __m512 load_bf16(const uint16_t* p) { return dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
DJ_INLINE void store_bf16(uint16_t* p, __m512 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), dj::f32x16_to_bf16(v)); }
}  // namespace
#endif

DJ_KERNEL(tk_engram_gate_bwd, "ptr,i64")
void tk_engram_gate_bwd(const tk::EngramGateBwdArgs* a, int64_t threads) {
    uint16_t *gx = a->grad_x, *gk = a->grad_k, *gv = a->grad_v;
    float* partial = a->partial;
    const uint16_t *g = a->grad_out, *x = a->x, *k = a->k, *v = a->v;
    const float *w = a->w, *dot = a->dot, *gate = a->gate, *rstd_x = a->rstd_x, *rstd_k = a->rstd_k;
    const int64_t T = a->T, HC = a->HC, H = a->H, sxt = a->x_t, sxh = a->x_h, skt = a->k_t, skh = a->k_h, svt = a->v_t;
    const float clamp = a->clamp;
    const int64_t num_blocks = a->num_blocks;
    const float scale = 1.0f / std::sqrt(static_cast<float>(H)), inv_h = 1.0f / static_cast<float>(H);
    dj::parallel_for_dynamic(num_blocks, threads, [&](int64_t b) {
        float* pw = partial + b * HC * H;
        std::fill(pw, pw + HC * H, 0.0f);
        std::vector<float> acc_v(H);
        for (int64_t t = T * b / num_blocks; t < T * (b + 1) / num_blocks; ++t) {
            const uint16_t* vr = v + t * svt;
            std::fill(acc_v.begin(), acc_v.end(), 0.0f);
            for (int64_t c = 0; c < HC; ++c) {
                const int64_t r = t * HC + c;
                const uint16_t* gr = g + r * H;
                const uint16_t* xr = x + t * sxt + c * sxh;
                const uint16_t* kr = k + t * skt + c * skh;
                const float* wr = w + c * H;
                float d_gate = 0.0f;
                int64_t h0 = 0;
#ifdef DJ_HAVE_AVX512
                __m512 vd = _mm512_setzero_ps();
                for (; h0 + 16 <= H; h0 += 16) vd = _mm512_fmadd_ps(load_bf16(gr + h0), load_bf16(vr + h0), vd);
                d_gate = _mm512_reduce_add_ps(vd);
#endif
                for (int64_t h = h0; h < H; ++h) d_gate += dj::bf16_to_f32(gr[h]) * dj::bf16_to_f32(vr[h]);
                const float gt = gate[r], rx = rstd_x[r], rk = rstd_k[r], dt = dot[r];
                const float s = dt * rx * rk * scale, mag = std::fabs(s);
                const float d_s = mag >= clamp ? d_gate * gt * (1.0f - gt) / (2.0f * std::sqrt(std::max(mag, clamp))) : 0.0f;
                const float d_dot = d_s * rx * rk * scale;
                const float cx = d_s * dt * rk * scale * rx * rx * rx * inv_h;
                const float ck = d_s * dt * rx * scale * rk * rk * rk * inv_h;
                float* pr = pw + c * H;
                int64_t h1 = 0;
#ifdef DJ_HAVE_AVX512
                const __m512 vdd = _mm512_set1_ps(d_dot), vcx = _mm512_set1_ps(cx), vck = _mm512_set1_ps(ck),
                             vgt = _mm512_set1_ps(gt);
                for (; h1 + 16 <= H; h1 += 16) {
                    const __m512 gvv = load_bf16(gr + h1), xv = load_bf16(xr + h1), kv = load_bf16(kr + h1);
                    const __m512 wv = _mm512_loadu_ps(wr + h1);
                    const __m512 ddx = _mm512_mul_ps(vdd, xv);
                    store_bf16(gx + r * H + h1, _mm512_sub_ps(_mm512_add_ps(gvv, _mm512_mul_ps(_mm512_mul_ps(vdd, kv), wv)),
                                                              _mm512_mul_ps(vcx, xv)));
                    store_bf16(gk + r * H + h1, _mm512_sub_ps(_mm512_mul_ps(ddx, wv), _mm512_mul_ps(vck, kv)));
                    _mm512_storeu_ps(pr + h1, _mm512_add_ps(_mm512_loadu_ps(pr + h1), _mm512_mul_ps(ddx, kv)));
                    _mm512_storeu_ps(acc_v.data() + h1, _mm512_add_ps(_mm512_loadu_ps(acc_v.data() + h1), _mm512_mul_ps(gvv, vgt)));
                }
#endif
                for (int64_t h = h1; h < H; ++h) {
                    const float gvv = dj::bf16_to_f32(gr[h]), xv = dj::bf16_to_f32(xr[h]), kv = dj::bf16_to_f32(kr[h]);
                    gx[r * H + h] = dj::f32_to_bf16(gvv + d_dot * kv * wr[h] - cx * xv);
                    gk[r * H + h] = dj::f32_to_bf16(d_dot * xv * wr[h] - ck * kv);
                    pr[h] += d_dot * xv * kv;
                    acc_v[h] += gvv * gt;
                }
            }
            for (int64_t h = 0; h < H; ++h) gv[t * H + h] = dj::f32_to_bf16(acc_v[h]);
        }
    });
}
