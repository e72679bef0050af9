// Named launch arguments of the combine kernels. engine/host.py reads these declarations
// (deepjit.descriptors) and fills every field by name, so Python and C++ cannot drift apart.
#pragma once

#include <cstdint>

namespace ep {

struct CombineSendArgs {
    const uint16_t* x;             // BF16 combine input, one row per received token (or expanded row)
    int64_t x_stride, H;           // x.stride(0); hidden size
    const int32_t* meta;           // recv_src_metadata [rows, 2 + K]
    const int32_t* row_start;      // [R + 1] first received row of each source rank
    int64_t R, K, M;               // ranks, top-k, max tokens per rank
    const float* weights;          // combine top-k weights, or null
    int64_t expand, multi, by_token;
    const int32_t* row_first;      // per received row: its first slot in the source's block, or null
    int64_t N;                     // received rows
    const int64_t* dst_base;       // [R] destination address of each source rank's block
    int64_t row_bytes, w_off;      // bytes per row; offset of the weights in a row
    int64_t skip_source;           // this rank over shared memory (its rows stay in x), else -1
};

struct CombineReduceArgs {
    uint16_t* out;                 // BF16 [T, H]
    const uint16_t *bias0, *bias1; // BF16 [T, H] or null
    int64_t bias0_stride, bias1_stride;
    const int64_t* topk_idx;       // [T, K]
    int64_t T, K, R, E_local, H, multi;
    const int64_t* block_base;     // [R] address of each rank's received block
    const int32_t* index;          // row index per (t, rank) or (t, slot), or null (by_token)
    int64_t by_token, row_bytes;
    float* out_weights;            // [T, K] or null
    int64_t sum_weights;           // V1: ranks summed in ascending rank order
    const float* slot_weights;     // [T, K] or null
    const uint16_t* local_x;       // this rank's own rows (not sent), or null
    int64_t local_stride;
    const float* local_w;          // their weights, or null
    int64_t local_row0;
    const int32_t* local_slot;     // [T, R]
    const int32_t* local_meta;     // recv_src_metadata
    int64_t rank;
};

}  // namespace ep
