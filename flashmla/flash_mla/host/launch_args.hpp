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

struct SparsePrefillArgs {
    uint16_t* out;                 // BF16 [s_q, h_q, d_v], contiguous
    float* max_logits;             // [s_q, h_q]
    float* lse;                    // [s_q, h_q]
    const uint16_t* q;             // BF16 [s_q, h_q, d_qk], unit last stride
    int64_t q_s, q_h;              // strides of q
    const uint16_t* kv;            // BF16 [s_kv, 1, d_qk], unit last stride
    int64_t kv_s, s_kv;            // kv.stride(0) and its token count
    const int32_t* indices;        // [s_q, 1, topk], last dim contiguous; < 0 or >= s_kv: invalid
    int64_t indices_s, topk;       // indices.stride(0)
    const int32_t* topk_length;    // [s_q] or null
    int64_t s_q;
    int32_t h_q, d_qk, d_v;
    float sm_scale;
    const float* attn_sink;        // [h_q] or null
};

struct DenseDecodeArgs {
    uint16_t* out;                 // [b, s_q, h_q, d_v] in q's dtype, contiguous
    float* lse;                    // [b, s_q, h_q]
    const uint16_t* q;             // [b, s_q, h_q, d_qk], unit last stride
    int64_t q_b, q_s, q_h;         // strides of q
    int64_t b, s_q;
    int32_t h_q, h_kv, d_qk, d_v;
    float sm_scale;
    const uint16_t* k_cache;       // [num_blocks, page_block_size, h_kv, d_qk], unit last stride
    int64_t k_cache_0, k_cache_1, k_cache_2;  // strides of k_cache
    int64_t page_block_size;
    const int32_t* block_table;    // [b, max_blocks], unit last stride
    int64_t block_table_b;         // block_table.stride(0)
    const int32_t* cache_seqlens;  // [b]
    int32_t causal;
};

struct VarlenAttentionArgs {
    uint16_t* out;                 // [total_q, h_q, d_v] in q's dtype, contiguous
    float* lse;                    // [h_q, total_q]
    const uint16_t* q;             // [total_q, h_q, d_qk], unit last stride
    int64_t q_0, q_1;
    const uint16_t* k;             // [total_k, h_kv, d_qk], unit last stride
    int64_t k_0, k_1;
    const uint16_t* v;             // [total_k, h_kv, d_v], unit last stride
    int64_t v_0, v_1;
    const int32_t* cu_seqlens_q;   // [batch + 1]
    const int32_t* cu_seqlens_k;   // [batch + 1]
    int64_t batch, total_q;
    int32_t h_q, h_kv, d_qk, d_v;
    float softmax_scale;
    int32_t causal;
};

}  // namespace fmla
