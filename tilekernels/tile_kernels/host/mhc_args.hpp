// Named launch arguments of the mHC forward kernels (mhc_ops.cpp, mhc_pre_big_fuse.cpp).
// modeling/mhc/ops/_forward.py reads these declarations (deepjit.descriptors) and fills every field
// by name, so Python and C++ cannot drift apart.
#pragma once

#include <cstdint>

namespace tk {

// Every tensor contiguous; T tokens of m streams of width H, m3 = m * (m + 2) mixes per token.
struct MhcPreBigFuseArgs {
    float *post, *comb;                // FP32 [T, m], [T, m, m]
    uint16_t* layer_input;             // BF16 [T, H]
    const float *mul, *sqrsum;         // the projection: FP32 [T, m3], [T]
    const float *scale, *base;         // FP32 [3], [m3]
    const uint16_t* residual;          // BF16 [T, m, H]
    int64_t T, m, H;
    float rms_eps, pre_eps, sinkhorn_eps, post_mult;
    int64_t repeat;                    // sinkhorn iterations
};

// One standalone step; mhc_ops.cpp lists what a, b, o1..o3, f1 and f2 hold for each op.
struct MhcOpArgs {
    int32_t op;                        // 0 norm, 1 split_mixes, 2 sinkhorn, 3 apply_mix, 4 head_compute_mix
    int64_t T, m, K, repeat;           // K: the norm's element count, or apply_mix's width
    const void *a, *b;                 // inputs
    const float *scale, *base;
    void *o1, *o2, *o3;                // outputs (unused ones null)
    float f1, f2;
};

}  // namespace tk
