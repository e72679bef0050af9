// Per-token FP8 cast of BF16 rows (see fp8_row.hpp), one 128-channel block per work item.
#include <deep_ep/host/common.hpp>
#include <deep_ep/host/fp8_row.hpp>

DJ_KERNEL(ep_fp8_cast, "ptr,ptr,ptr,i64,i64,i64,i64")
void ep_fp8_cast(const uint16_t* x, uint8_t* out, float* scales, int64_t T, int64_t H, int64_t round_scale,
                 int64_t threads) {
    const int64_t blocks = H / 128;
    dj::parallel_for(T * blocks, threads, [&](int64_t i) {
        const int64_t t = i / blocks, b = i % blocks;
        scales[t * blocks + b] = ep::cast_block_fp8(x + t * H + b * 128, out + t * H + b * 128, round_scale != 0);
    });
}
