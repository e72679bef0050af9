// mhc_pre_big_fuse after the projection GEMM: per token, norm -> split_mixes -> sinkhorn(comb)
// -> apply_mix(pre), with the exact per-token code of the standalone steps (mhc.hpp).
#include <tile_kernels/host/mhc.hpp>

DJ_KERNEL(tk_mhc_pre_big_fuse, "ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,i64,i64,i64,f32,f32,f32,f32,i64,i64")
void tk_mhc_pre_big_fuse(float* post, float* comb, uint16_t* layer_input, const float* mul, const float* sqrsum,
                         const float* scale, const float* base, const uint16_t* residual, int64_t T, int64_t m,
                         int64_t H, float rms_eps, float pre_eps, float sinkhorn_eps, float post_mult, int64_t repeat,
                         int64_t threads) {
    const int64_t m3 = m * (m + 2);
    dj::parallel_for((T + 15) / 16, threads, [&](int64_t blk) {
        std::vector<float> mixes(m3), pre(m);
        for (int64_t t = blk * 16; t < std::min(T, blk * 16 + 16); ++t) {
            tk::mhc::norm(mul + t * m3, sqrsum[t], m * H, rms_eps, m3, mixes.data());
            tk::mhc::split(mixes.data(), scale, base, m, post_mult, pre_eps, pre.data(), post + t * m, comb + t * m * m);
            tk::mhc::sinkhorn(comb + t * m * m, m, repeat, sinkhorn_eps);
            tk::mhc::apply_mix(residual + t * m * H, pre.data(), m, H, layer_input + t * H);
        }
    });
}
