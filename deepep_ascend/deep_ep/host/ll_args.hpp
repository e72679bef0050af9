// Named launch arguments of the low-latency kernels (ll_dispatch.cpp, ll_combine.cpp document the
// fields' meaning). engine/low_latency.py reads these declarations (deepjit.descriptors) and fills
// every field by name, so Python and C++ cannot drift apart.
#pragma once

#include <cstdint>

namespace ep_ll {

struct LlDispatchArgs {
    const uint16_t* x;                 // BF16 [T, H]
    int64_t x_stride, T, H;
    const int64_t* topk_idx;           // [T, K]
    int64_t K, R, E_local, M, rank;
    int64_t fp8, round_scale, ue8m0;   // the FP8 cast options
    const int64_t* peer_area;          // [R] address of each rank's low-latency area
    int64_t x_off, sf_off, route_off, route_cap;   // staging and route table inside an area
    int64_t *sig, *sigs_out;           // this rank's signature [16]; every rank's [R, 16]
    const void *notify_fn, *wait_fn;   // deepjit.symm's kernel entry points
    const int64_t* abort_word;
    const int32_t* pidfds;
    const int64_t *post_notify, *post_wait;  // the window's kernel lanes
    int64_t timeout_ns, seq;
    int64_t* status;                   // [4]
    int64_t phase;                     // bits: 1 plan + stage + handshake, 2 pull
    uint8_t* recv_x;                   // [E_local, R * M, H] (FP8 or BF16)
    uint32_t* recv_sf;                 // [E_local, packs, R * M] or null
    int32_t* src_info;                 // [E_local, R * M]
    int64_t* layout_range;             // [E_local, R]
    int32_t *recv_count, *stats;       // [E_local] each (stats optional)
    int32_t *row_tk, *send_row;        // combine state: [E_local * R * M], [T, K]
    int32_t* mask;                     // [R] shrink mode, or null
};

struct LlCombineArgs {
    const uint16_t* x;                 // BF16 [E_local, R * M, H]
    int64_t x_row_stride;
    const int64_t* topk_idx;           // the dispatch's [T, K]
    const float* weights;              // [T, K]
    int64_t T, K, R, E_local, M, H, rank;
    const int64_t* layout_range;       // the dispatch's state
    const int32_t *row_tk, *send_row;
    const int64_t* peer_area;          // [R] address of each rank's low-latency area
    int64_t rows_off;                  // the combine rows inside an area
    int64_t *sig, *sigs_out;
    const void *notify_fn, *wait_fn;
    const int64_t* abort_word;
    const int32_t* pidfds;
    const int64_t *data_notify, *data_wait;
    int64_t timeout_ns, seq;
    int64_t* status;                   // [4]
    uint16_t* out;                     // BF16 [T, H]
    int32_t* mask;                     // [R] shrink mode, or null
    int64_t logfmt;                    // rows travel as LogFMT-10 (logfmt.hpp), this rank's own too
};

}  // namespace ep_ll
