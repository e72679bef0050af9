// Named launch arguments of the mhc_post backward. modeling/mhc/ops/post.py reads this declaration
// (deepjit.descriptors) and fills every field by name, so Python and C++ cannot drift apart.
#pragma once

#include <cstdint>

namespace tk {

// Every tensor contiguous; T tokens of m streams of width H.
struct MhcPostBwdArgs {
    uint16_t* d_x;                     // BF16 [T, H]
    uint16_t* d_residual;              // BF16 [T, m, H]
    float* d_post;                     // FP32 [T, m]
    float* d_comb;                     // FP32 [T, m, m]
    const uint16_t *x, *residual;      // BF16 [T, H], [T, m, H]
    const float *post, *comb;          // FP32 [T, m], [T, m, m]
    const void* d_o;                   // [T, m, H], BF16 when d_o_bf16 else FP32
    int64_t d_o_bf16;
    int64_t T, m, H;
};

}  // namespace tk
