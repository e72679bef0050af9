// SwiGLU backward on E4M3 inputs fused with the per-token E4M3 cast of the input gradient.
// Per row p (routing weight w, 0 when the row is padding), with a, b the dequantised halves:
//   out = silu(a) b w;  da = g w s b fma(a, 1 - s, 1);  db = g w s a  (s = sigmoid(a));
//   weight_grad[slot(p)] = sum_h g silu(a) b.  Clamped inputs get zero gradient.
#include <tile_kernels/host/quant.hpp>

DJ_KERNEL(tk_swiglu_bwd_cast, "ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,i64,i64,i64,i32,f32,i32,i64")
void tk_swiglu_bwd_cast(uint16_t* out, uint16_t* xg, uint8_t* xgq, float* xgsf, float* wgrad, const uint8_t* q,
                        const float* sf, const uint16_t* g, const float* weights, const int32_t* p2tt, int64_t P,
                        int64_t H, int64_t npc, int32_t has_clamp, float c, int32_t round_sf, int64_t threads) {
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
            for (int64_t h = 0; h < H; ++h) {
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
            for (int64_t j = 0; j < H2; ++j) xg[p * H2 + j] = dj::f32_to_bf16(grad[j]);
            for (int64_t k = 0; k < nblk; ++k) {
                float amax = 0.0f;
                for (int64_t j = k * npc; j < (k + 1) * npc; ++j) amax = std::max(amax, std::fabs(grad[j]));
                const tk::Scale sc = tk::block_scale(amax, 1e-4f, 448.0f, round_sf != 0);
                xgsf[p * nblk + k] = sc.sf;
                for (int64_t j = k * npc; j < (k + 1) * npc; ++j) xgq[p * H2 + j] = tk::enc_e4m3(grad[j] * sc.inv);
            }
        }
    });
}
