// mhc_post backward, per token (g = d_o in FP32):
//   d_x[h] = sum_n g[n, h] post[n]            d_residual[i, h] = sum_n comb[i, n] g[n, h]   (BF16)
//   d_post[n] = sum_h g[n, h] x[h]            d_comb[i, n] = sum_h g[n, h] residual[i, h]   (FP32)
// The width sums run in 16 independent lanes (vectorised by the compiler), then added pairwise.
#include <tile_kernels/host/common.hpp>
#include <tile_kernels/host/mhc_post_args.hpp>

namespace {

constexpr int64_t kLanes = 16;

DJ_INLINE float load(const uint16_t* p, int64_t i) { return dj::bf16_to_f32(p[i]); }
DJ_INLINE float load(const float* p, int64_t i) { return p[i]; }

template <typename G>
float dot(const G* g, const uint16_t* v, int64_t H) {
    float acc[kLanes] = {};
    int64_t h = 0;
    for (; h + kLanes <= H; h += kLanes)
        for (int64_t l = 0; l < kLanes; ++l) acc[l] = std::fma(load(g, h + l), dj::bf16_to_f32(v[h + l]), acc[l]);
    for (; h < H; ++h) acc[h % kLanes] = std::fma(load(g, h), dj::bf16_to_f32(v[h]), acc[h % kLanes]);
    for (int64_t w = kLanes / 2; w > 0; w /= 2)
        for (int64_t l = 0; l < w; ++l) acc[l] += acc[l + w];
    return acc[0];
}

template <typename G>
void token(const tk::MhcPostBwdArgs& a, const G* g, int64_t t) {
    const int64_t m = a.m, H = a.H;
    const uint16_t* xt = a.x + t * H;
    const uint16_t* rt = a.residual + t * m * H;
    const float* pt = a.post + t * m;
    const float* ct = a.comb + t * m * m;
    uint16_t* dxt = a.d_x + t * H;
    uint16_t* drt = a.d_residual + t * m * H;
    for (int64_t h = 0; h < H; ++h) {
        float dx = 0.0f;
        for (int64_t n = 0; n < m; ++n) dx = std::fma(load(g, n * H + h), pt[n], dx);
        dxt[h] = dj::f32_to_bf16(dx);
    }
    for (int64_t i = 0; i < m; ++i)
        for (int64_t h = 0; h < H; ++h) {
            float dr = 0.0f;
            for (int64_t n = 0; n < m; ++n) dr = std::fma(ct[i * m + n], load(g, n * H + h), dr);
            drt[i * H + h] = dj::f32_to_bf16(dr);
        }
    for (int64_t n = 0; n < m; ++n) {
        a.d_post[t * m + n] = dot(g + n * H, xt, H);
        for (int64_t i = 0; i < m; ++i) a.d_comb[(t * m + i) * m + n] = dot(g + n * H, rt + i * H, H);
    }
}

}  // namespace

DJ_KERNEL(tk_mhc_post_bwd, "ptr,i64")
void tk_mhc_post_bwd(const tk::MhcPostBwdArgs* args, int64_t threads) {
    const tk::MhcPostBwdArgs a = *args;
    const int64_t stride = a.m * a.H;
    dj::parallel_for(a.T, threads, [&](int64_t t) {
        if (a.d_o_bf16)
            token(a, static_cast<const uint16_t*>(a.d_o) + t * stride, t);
        else
            token(a, static_cast<const float*>(a.d_o) + t * stride, t);
    });
}
