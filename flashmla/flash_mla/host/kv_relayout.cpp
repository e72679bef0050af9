// convert_kv_layout: a V4.1 cache between its two placements, byte for byte. Per page block of p
// tokens, "interleaved" holds each token's data row then its scale row; "block_split" holds all p
// data rows, then all p scale rows. The input's blocks are in_stride bytes apart (padding allowed),
// the output's are compact.
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>

#include <cstdint>
#include <cstring>

DJ_KERNEL(fmla_kv_relayout, "ptr,ptr,i64,i64,i64,i64,i64,i32,i64")
void fmla_kv_relayout(uint8_t* out, const uint8_t* in, int64_t num_blocks, int64_t p, int64_t in_stride,
                      int64_t data_bytes, int64_t scale_bytes, int32_t to_block_split, int64_t threads) {
    const int64_t bpt = data_bytes + scale_bytes;
    dj::parallel_for(num_blocks, num_blocks * p * bpt >= (int64_t(1) << 20) ? threads : 1, [&](int64_t b) {
        const uint8_t* src = in + b * in_stride;
        uint8_t* dst = out + b * p * bpt;
        for (int64_t t = 0; t < p; ++t) {
            if (to_block_split) {
                std::memcpy(dst + t * data_bytes, src + t * bpt, data_bytes);
                std::memcpy(dst + p * data_bytes + t * scale_bytes, src + t * bpt + data_bytes, scale_bytes);
            } else {
                std::memcpy(dst + t * bpt, src + t * data_bytes, data_bytes);
                std::memcpy(dst + t * bpt + data_bytes, src + p * data_bytes + t * scale_bytes, scale_bytes);
            }
        }
    });
}
