// Named launch arguments of the MoE layout kernels (fused_mapping.cpp, reduce.cpp). moe/layout.py
// reads these declarations (deepjit.descriptors) and fills every field by name, so Python and C++
// cannot drift apart.
#pragma once

#include <cstdint>

namespace tk {

struct FusedMappingArgs {
    int32_t *p2e, *p2t, *p2tt;         // [P] per position: expert, token, token * K + k (-1: padding)
    int32_t* t2p;                      // [T, K] the position of each (token, k), -1 where unrouted
    int32_t *start, *end, *per_expert; // [E] each expert's segment and its routed count
    const int64_t* idx;                // topk_idx [T, K]
    int64_t T, K, E, P, alignment;     // P: positions (segments padded to alignment)
};

struct ReduceArgs {
    void* out;                         // [T, H] in out_dt
    const void* x;                     // [positions, H] in in_dt
    const float* weights;              // [T, K] or null
    const float *x_sf, *sf;            // x's per-position scales and the output's one scale, or null
    const int32_t* t2p;                // [T, K] position of each (token, k), -1 where none
    int32_t in_dt, out_dt;             // reduce.cpp's kF32 / kBF16 / kE4M3
    int64_t T, K, H;
};

}  // namespace tk
