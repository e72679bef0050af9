// expand_to_mhc forward: out[t, n] = hidden[t] for every one of the m streams (rows of any type).
#include <tile_kernels/host/common.hpp>

DJ_KERNEL(tk_mhc_expand, "ptr,ptr,i64,i64,i64,i64")
void tk_mhc_expand(uint8_t* out, const uint8_t* hidden, int64_t T, int64_t m, int64_t row_bytes, int64_t threads) {
    dj::parallel_for(T, threads, [&](int64_t t) {
        for (int64_t n = 0; n < m; ++n) std::memcpy(out + (t * m + n) * row_bytes, hidden + t * row_bytes, row_bytes);
    });
}
