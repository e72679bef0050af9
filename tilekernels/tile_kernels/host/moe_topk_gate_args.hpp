// Named launch arguments of the V4.1 router kernel (moe_topk_gate.cpp); moe/topk_gate_forward.py
// fills every field by name through deepjit.descriptors.
#pragma once

#include <cstdint>

namespace tk {

struct MoeTopkGateArgs {
    int64_t* idx_out;                  // int64 [T, K + S]
    float* w_out;                      // FP32 [T, K + S]
    int64_t* unmapped;                 // int64 [T, K] (row stride unmapped_stride) or null
    float* scores;                     // FP32 [T, E] or null: the unbiased scores
    const float* logits;               // FP32 [T, E]
    const float *bias, *image_bias;    // FP32 [E] each, or null
    const bool *mask, *image_mask, *fix, *force;   // bool [T] each, or null
    const int32_t* phys_map;           // int32 [E + S, map_width] or null (logical -> physical ids)
    const int32_t* logical_count;      // int32 [E + S] (with phys_map)
    int64_t map_width, unmapped_stride;
    int64_t T, E, K, S;                // S: shared-expert slots after the K routed ones
    int64_t num_physical;              // the id range of force_random rows
    float scale;                       // routed_scaling_factor
    int64_t ep_rank;
};

}  // namespace tk
