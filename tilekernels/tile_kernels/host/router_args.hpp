// Named launch arguments of the DeepSeek router kernel. moe/routing.py reads this declaration
// (deepjit.descriptors) and fills every field by name, so Python and C++ cannot drift apart.
#pragma once

#include <cstdint>

namespace tk {

struct Top2SumGateArgs {
    int64_t* idx_out;                  // int64 [T, K + S]
    float* w_out;                      // FP32 [T, K + S]
    int64_t* unmapped;                 // int64 [T, K] or null: the pre-mapping ids (read where fix is set)
    const float *logits, *bias;        // FP32 [T, E], [E] (bias may be null)
    const bool *mask, *fix;            // bool [T] each, or null
    const int32_t* phys_map;           // int32 [E + S, map_width] or null (logical -> physical ids)
    const int32_t* logical_count;      // int32 [E + S] (with phys_map)
    int64_t map_width;
    int64_t T, E, K, num_topk_groups, num_groups, S;   // S: shared-expert slots after the K routed ones
    float scale;                       // routed_scaling_factor
    int64_t ep_rank, experts_per_rank, tp_rank, num_tp_ranks;
    int32_t scoring;                   // ScoringFunc: 0 sigmoid, 1 sqrt(softplus), 2 softmax, 3 identity
};

}  // namespace tk
