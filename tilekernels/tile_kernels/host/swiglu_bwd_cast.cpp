// SwiGLU backward on E4M3 inputs fused with the per-token E4M3 cast of the input gradient.
// Per row p (routing weight w, 0 when the row is padding), with a, b the dequantised halves:
//   out = silu(a) b w;  da = g w s b fma(a, 1 - s, 1);  db = g w s a  (s = sigmoid(a));
//   weight_grad[slot(p)] = sum_h g silu(a) b.  Clamped inputs get zero gradient.
#include <tile_kernels/host/quant.hpp>
#include <tile_kernels/host/swiglu_args.hpp>

DJ_KERNEL(tk_swiglu_bwd_cast, "ptr,i64")
void tk_swiglu_bwd_cast(const tk::SwigluBwdCastArgs* a, int64_t threads) {
    uint16_t *out = a->out, *xg = a->x_grad;
    uint8_t* xgq = a->x_grad_q;
    float *xgsf = a->x_grad_sf, *wgrad = a->weight_grad;
    const uint8_t* q = a->q;
    const float *sf = a->sf, *weights = a->weights;
    const uint16_t* g = a->grad_out;
    const int32_t* p2tt = a->p2tt;
    const int64_t P = a->P, H = a->H, npc = a->npc;
    const int32_t has_clamp = a->has_clamp, round_sf = a->round_sf;
    const float c = a->clamp;
    const int64_t H2 = 2 * H, nblk = H2 / npc;
    dj::parallel_threads(dj::thread_count(threads, P), [&](int64_t t, int64_t nt) {
        std::vector<float> grad(H2);
        const dj::Range rg = dj::split_range(P, nt, t);
        for (int64_t p = rg.begin; p < rg.end; ++p) {
            const int32_t slot = p2tt[p];
            const float w = slot >= 0 ? weights[slot] : 0.0f;
            const uint8_t* qr = q + p * H2;
            const float* sr = sf + p * nblk;
            const uint16_t* gr = g + p * H;
            double dot = 0.0;
            int64_t h = 0;
#ifdef DJ_HAVE_AVX512
            // 16 channels at a time (npc is a multiple of 16, so one scale per half per step)
            const __m512 vw = _mm512_set1_ps(w), one = _mm512_set1_ps(1.0f), vc = _mm512_set1_ps(c),
                         vnc = _mm512_set1_ps(-c), zero = _mm512_setzero_ps();
            __m512 vdot = zero;
            for (; h + 16 <= H; h += 16) {
                __m512 a = _mm512_mul_ps(dj::e4m3x16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qr + h))),
                                         _mm512_set1_ps(sr[h / npc]));
                __m512 b = _mm512_mul_ps(dj::e4m3x16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qr + H + h))),
                                         _mm512_set1_ps(sr[(H + h) / npc]));
                __mmask16 a_cl = 0, b_cl = 0;
                if (has_clamp) {
                    a_cl = _mm512_cmp_ps_mask(a, vc, _CMP_GT_OQ);
                    b_cl = _mm512_cmp_ps_mask(b, vc, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, vnc, _CMP_LT_OQ);
                    a = _mm512_min_ps(a, vc);
                    b = _mm512_min_ps(_mm512_max_ps(b, vnc), vc);
                }
                const __m512 gv = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gr + h)));
                const __m512 denom = _mm512_add_ps(one, tk::exp_f32x16(_mm512_sub_ps(zero, a)));
                const __m512 sg = _mm512_div_ps(one, denom);
                const __m512 gws = _mm512_mul_ps(_mm512_mul_ps(gv, vw), sg);
                __m512 da = _mm512_mul_ps(_mm512_mul_ps(gws, b), _mm512_fmadd_ps(a, _mm512_sub_ps(one, sg), one));
                __m512 db = _mm512_mul_ps(gws, a);
                da = _mm512_mask_mov_ps(da, a_cl, zero);
                db = _mm512_mask_mov_ps(db, b_cl, zero);
                const __m512 act = _mm512_mul_ps(_mm512_div_ps(a, denom), b);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + p * H + h), dj::f32x16_to_bf16(_mm512_mul_ps(act, vw)));
                _mm512_storeu_ps(grad.data() + h, da);
                _mm512_storeu_ps(grad.data() + H + h, db);
                vdot = _mm512_add_ps(vdot, tk::rounded(_mm512_mul_ps(gv, act)));
            }
            dot = _mm512_reduce_add_ps(vdot);
#endif
            for (; h < H; ++h) {
                float a = dj::e4m3_to_f32(qr[h]) * sr[h / npc];
                float b = dj::e4m3_to_f32(qr[H + h]) * sr[(H + h) / npc];
                bool a_cl = false, b_cl = false;
                if (has_clamp) {
                    a_cl = a > c; b_cl = (b > c) || (b < -c);
                    a = std::min(a, c);
                    b = std::min(std::max(b, -c), c);
                }
                const float gv = dj::bf16_to_f32(gr[h]);
                const float denom = 1.0f + tk::exp_f32(-a);
                const float s = 1.0f / denom;
                const float gws = gv * w * s;
                float da = gws * b * std::fma(a, 1.0f - s, 1.0f);
                float db = gws * a;
                if (a_cl) da = 0.0f;
                if (b_cl) db = 0.0f;
                const float act = a / denom * b;
                out[p * H + h] = dj::f32_to_bf16(act * w);
                grad[h] = da;
                grad[H + h] = db;
                dot += static_cast<double>(gv * act);
            }
            if (slot >= 0) wgrad[slot] = static_cast<float>(dot);
            for (int64_t k = 0; k < nblk; ++k) {
                const float* gk = grad.data() + k * npc;
                int64_t j = 0;
                float amax = 0.0f;
#ifdef DJ_HAVE_AVX512
                // the lanes' max drops NaN: tracked apart, a NaN in the block makes amax NaN (torch's amax)
                __m512 m = _mm512_setzero_ps();
                __mmask16 nan = 0;
                for (; j + 16 <= npc; j += 16) {
                    const __m512 v = _mm512_loadu_ps(gk + j);
                    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                    m = _mm512_max_ps(m, tk::abs16(v));
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xg + p * H2 + k * npc + j), dj::f32x16_to_bf16(v));
                }
                amax = nan ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(m);
#endif
                for (; j < npc; ++j) {
                    amax = tk::amax_step(amax, std::fabs(gk[j]));
                    xg[p * H2 + k * npc + j] = dj::f32_to_bf16(gk[j]);
                }
                const tk::Scale sc = tk::block_scale(amax, 1e-4f, 448.0f, round_sf != 0);
                xgsf[p * nblk + k] = sc.sf;
                j = 0;
#ifdef DJ_HAVE_AVX512
                for (; j + 16 <= npc; j += 16)
                    tk::store_e4m3x16(xgq + p * H2 + k * npc + j, _mm512_mul_ps(_mm512_loadu_ps(gk + j), _mm512_set1_ps(sc.inv)));
#endif
                for (; j < npc; ++j) xgq[p * H2 + k * npc + j] = tk::enc_e4m3(gk[j] * sc.inv);
            }
        }
    });
}
