// out[b, j, i] = x[b, i, j] for 1/2/4/8-byte elements, in 32 x 32 tiles so both sides stream
// whole cache lines.
#include <tile_kernels/host/common.hpp>

namespace {

template <typename T>
void run(T* out, const T* x, int64_t B, int64_t M, int64_t N, int64_t sb, int64_t sm, int64_t threads) {
    constexpr int64_t kTile = 32;
    const int64_t tm = (M + kTile - 1) / kTile, tn = (N + kTile - 1) / kTile;
    dj::parallel_for(B * tm * tn, threads, [&](int64_t item) {
        const int64_t b = item / (tm * tn), i0 = (item / tn) % tm * kTile, j0 = item % tn * kTile;
        const int64_t i1 = std::min(M, i0 + kTile), j1 = std::min(N, j0 + kTile);
        const T* src = x + b * sb;
        T* dst = out + b * M * N;
        for (int64_t j = j0; j < j1; ++j)
            for (int64_t i = i0; i < i1; ++i) dst[j * M + i] = src[i * sm + j];
    });
}

}  // namespace

DJ_KERNEL(tk_transpose, "ptr,ptr,i64,i64,i64,i64,i64,i64,i64")
void tk_transpose(void* out, const void* x, int64_t B, int64_t M, int64_t N, int64_t sb, int64_t sm, int64_t esize,
                  int64_t threads) {
    switch (esize) {
        case 1: run(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(x), B, M, N, sb, sm, threads); break;
        case 2: run(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(x), B, M, N, sb, sm, threads); break;
        case 4: run(static_cast<uint32_t*>(out), static_cast<const uint32_t*>(x), B, M, N, sb, sm, threads); break;
        default: run(static_cast<uint64_t*>(out), static_cast<const uint64_t*>(x), B, M, N, sb, sm, threads); break;
    }
}
