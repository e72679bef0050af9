// Named launch arguments of the fused mHC pre kernel. modeling/mhc/ops/_forward.py reads this
// declaration (deepjit.descriptors) and fills every field by name, so Python and C++ cannot drift apart.
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

}  // namespace tk
