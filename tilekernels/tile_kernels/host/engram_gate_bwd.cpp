// Engram gate backward. Per (token, head), from the saved dot, gate and rstds:
//   d_gate = <g, v>; d_s = d_gate gate (1 - gate) / (2 sqrt|s|) where |s| >= clamp, else 0;
//   grad_x = g + d_dot k w - d_rx rstd_x^3 x / H, grad_k = d_dot x w - d_rk rstd_k^3 k / H,
//   grad_v = sum_heads g gate, and block b of `num_blocks` contiguous token ranges accumulates
//   grad_w_partial[b] += d_dot x k. One thread per block keeps the partials race-free.
#include <tile_kernels/host/common.hpp>

DJ_KERNEL(tk_engram_gate_bwd, "ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,i64,i64,i64,i64,i64,i64,i64,i64,f32,i64,i64")
void tk_engram_gate_bwd(uint16_t* gx, uint16_t* gk, uint16_t* gv, float* partial, const uint16_t* g, const uint16_t* x,
                        const uint16_t* k, const uint16_t* v, const float* w, const float* dot, const float* gate,
                        const float* rstd_x, const float* rstd_k, int64_t T, int64_t HC, int64_t H, int64_t sxt,
                        int64_t sxh, int64_t skt, int64_t skh, int64_t svt, float clamp, int64_t num_blocks,
                        int64_t threads) {
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
                for (int64_t h = 0; h < H; ++h) d_gate += dj::bf16_to_f32(gr[h]) * dj::bf16_to_f32(vr[h]);
                const float gt = gate[r], rx = rstd_x[r], rk = rstd_k[r], dt = dot[r];
                const float s = dt * rx * rk * scale, mag = std::fabs(s);
                const float d_s = mag >= clamp ? d_gate * gt * (1.0f - gt) / (2.0f * std::sqrt(std::max(mag, clamp))) : 0.0f;
                const float d_dot = d_s * rx * rk * scale;
                const float cx = d_s * dt * rk * scale * rx * rx * rx * inv_h;
                const float ck = d_s * dt * rx * scale * rk * rk * rk * inv_h;
                float* pr = pw + c * H;
                for (int64_t h = 0; h < H; ++h) {
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
