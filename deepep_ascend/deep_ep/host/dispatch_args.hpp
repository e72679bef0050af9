// Named launch arguments of the dispatch kernels. engine/host.py reads these declarations
// (deepjit.descriptors) and fills every field by name, so Python and C++ cannot drift apart.
// Strides and offsets are in bytes; sf points at UE8M0/FP32 scale packs of 4 bytes each.
#pragma once

#include <cstdint>

namespace ep {

struct DispatchPlanArgs {
    const int64_t* topk_idx;           // [T, K]
    int64_t T, K, R, E_local;
    int32_t* dst_slot;                 // [T, R]
    int32_t *send_count, *expert_count;  // [R], [R, E_local]
    int32_t *within, *exp_pos;         // [T, K] each
    int64_t* err;                      // [4]
};

struct DispatchSendArgs {
    const uint8_t* x;                  // [T, hidden] rows of x_row_bytes
    int64_t x_row_stride, x_row_bytes;
    const uint8_t* sf;                 // [T, num_packs] or null
    int64_t sf_row_stride, sf_col_stride, num_packs;
    const int64_t* topk_idx;           // [T, K]
    const float* weights;              // [T, K] or null
    int64_t T, K, R, E_local;          // tokens, top-k, ranks, experts per rank
    const int32_t* dst_slot;           // [T, R]: the token's slot at each destination, -1 where none
    const int32_t* within;             // [T, K]: index within its expert (expanded layouts)
    const int64_t* dst_base;           // [R]: address of this rank's slot block at each destination
    int64_t slot_bytes, sf_off, meta_off;
    const int64_t* direct;             // [R, 8] direct-mode output addresses (see dispatch_send.cpp), or null
    const int32_t* row_base;           // [R] (direct mode)
    const int32_t* expert_base;        // [R, E_local] (direct mode, expanded)
    int64_t expand, M, rank;           // M: max tokens per rank
};

struct DispatchRecvArgs {
    const int64_t* src_base;           // [R]: address of each source rank's slot block
    const int32_t* row_start;          // [R + 1]: first output row of each source
    int64_t R, K, M, E_local, x_row_bytes;
    uint8_t* out_x;
    int64_t out_x_stride;
    uint8_t* out_sf;                   // or null
    int64_t out_sf_row_stride, out_sf_col_stride, num_packs;
    int64_t* out_topk_idx;             // or null
    float* out_weights;                // or null
    int32_t* out_meta;                 // recv_src_metadata [rows, 2 + K]
    int64_t expand;
    const int32_t* expert_base;        // [R, E_local] (expanded)
    int64_t slot_bytes, sf_off, meta_off;
};

}  // namespace ep
