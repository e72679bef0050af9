// Named launch arguments of the host kernels whose argument lists are long. host/__init__.py reads
// these declarations (deepjit.descriptors) and fills every field by name, so Python and C++ cannot
// drift apart: a field renamed or added here fails the Python call that does not name it.
#pragma once

#include <cstdint>

namespace fmla {

// One KV source of a sparse decode: a quantised paged cache and the token ids to read from it.
struct KVScopeArgs {
    const void* cache;             // k_cache bytes; null: the scope is absent
    int64_t block_stride;          // k_cache.stride(0), bytes
    int64_t page_block_size;
    int32_t format;                // KVCacheFormat code
    int32_t block_split;           // 1: all data rows of a page block, then all its scale rows
    const int32_t* indices;        // [b, s_q, topk] physical token ids, last dim contiguous; < 0: invalid
    int64_t indices_b, indices_s;  // strides of indices
    int64_t topk;
    const int32_t* topk_length;    // [b] valid ids per request, or null (all topk)
};

struct SparseDecodeArgs {
    uint16_t* out;                 // BF16 [b, s_q, h_q, d_v], contiguous
    float* lse;                    // [b, s_q, h_q], contiguous
    const uint16_t* q;             // BF16 [b, s_q, h_q, d_qk], unit last stride
    int64_t q_b, q_s, q_h;         // strides of q
    int64_t b, s_q;
    int32_t h_q, d_qk, d_v;
    float sm_scale;
    const float* attn_sink;        // [h_q] or null
    KVScopeArgs scope0, scope1;    // scope1.cache null: one scope
};

}  // namespace fmla
