// Named shape parameters of the MQA logits kernels (the int64 block they took before). host/mqa_logits.py
// reads this declaration (deepjit.descriptors) and fills every field by name, so Python and C++ cannot
// drift apart.
#pragma once

#include <cstdint>

namespace dg {

struct MqaLogitsParams {
    int64_t S, H, D;                   // query rows, heads, head dim
    int64_t SKV;                       // KV tokens (non-paged)
    int64_t q_type, kv_type;           // gemm_convert.hpp's element types (kE4M3, kE2M1)
    int64_t ld;                        // logits row stride
    int64_t logits_f32;                // 1: FP32 logits, 0: BF16
    int64_t compressed, clean;
    int64_t width;                     // logits columns
    int64_t next_n, block_kv, page_stride, max_blocks, batch;  // paged only (page_stride in bytes)
};

}  // namespace dg
