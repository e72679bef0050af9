// mhc_pre_big_fuse after the projection GEMM: per token, norm -> split_mixes -> sinkhorn(comb)
// -> apply_mix(pre), with the exact per-token code of the standalone steps (mhc.hpp).
#include <tile_kernels/host/mhc.hpp>
#include <tile_kernels/host/mhc_args.hpp>

DJ_KERNEL(tk_mhc_pre_big_fuse, "ptr,i64")
void tk_mhc_pre_big_fuse(const tk::MhcPreBigFuseArgs* args, int64_t threads) {
    const tk::MhcPreBigFuseArgs a = *args;
    float *post = a.post, *comb = a.comb;
    uint16_t* layer_input = a.layer_input;
    const float *mul = a.mul, *sqrsum = a.sqrsum, *scale = a.scale, *base = a.base;
    const uint16_t* residual = a.residual;
    const int64_t T = a.T, m = a.m, H = a.H, repeat = a.repeat;
    const float rms_eps = a.rms_eps, pre_eps = a.pre_eps, sinkhorn_eps = a.sinkhorn_eps, post_mult = a.post_mult;
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
