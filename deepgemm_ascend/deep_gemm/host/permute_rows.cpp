// Row permutation within each group: out[g, i] = in[g, perm[i]] for rows of row_bytes bytes, both
// tensors contiguous. Mega MoE's weight transforms (gate/up interleave, UTCCP scale order) are this.
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>

DJ_KERNEL(dg_permute_rows, "ptr,ptr,ptr,i64,i64,i64,i64")
void dg_permute_rows(uint8_t* out, const uint8_t* in, const int64_t* perm, int64_t groups, int64_t rows,
                     int64_t row_bytes, int64_t threads) {
    // items of 64 rows: weights are megabytes per group, so every thread gets many items
    const int64_t blocks = (rows + 63) / 64;
    dj::parallel_for(groups * blocks, groups * rows * row_bytes >= (int64_t(1) << 20) ? threads : 1, [&](int64_t item) {
        const int64_t g = item / blocks, r0 = (item % blocks) * 64, r1 = std::min(rows, r0 + 64);
        const uint8_t* src = in + g * rows * row_bytes;
        uint8_t* dst = out + g * rows * row_bytes;
        for (int64_t r = r0; r < r1; ++r) std::memcpy(dst + r * row_bytes, src + perm[r] * row_bytes, row_bytes);
    });
}
