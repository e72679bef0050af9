// Engram n-gram hashing: per layer l and token t, h_0 = id_0 m_0, h_i = h_{i-1} ^ (id_i m_i)
// (wrapping int64), and table j of n-gram i gets row (h_i mod vocab[l, i-1, j]) + offset.
#include <tile_kernels/host/common.hpp>

DJ_KERNEL(tk_engram_hash, "ptr,ptr,ptr,ptr,ptr,i64,i64,i64,i64,i64")
void tk_engram_hash(int32_t* out, const int32_t* ids, const int64_t* mult, const int32_t* vocab, const int32_t* offsets,
                    int64_t L, int64_t T, int64_t N, int64_t M, int64_t threads) {
    const int64_t W = (N - 1) * M;
    dj::parallel_for(L * ((T + 255) / 256), threads, [&](int64_t item) {
        const int64_t nb = (T + 255) / 256, l = item / nb, t0 = item % nb * 256, t1 = std::min(T, t0 + 256);
        for (int64_t t = t0; t < t1; ++t) {
            uint64_t h = static_cast<uint64_t>(static_cast<int64_t>(ids[t * N]) * mult[l * N]);
            int32_t* o = out + (l * T + t) * W;
            for (int64_t i = 1; i < N; ++i) {
                h ^= static_cast<uint64_t>(static_cast<int64_t>(ids[t * N + i])) * static_cast<uint64_t>(mult[l * N + i]);
                const int64_t hs = static_cast<int64_t>(h);
                for (int64_t j = 0; j < M; ++j) {
                    const int64_t v = vocab[(l * (N - 1) + i - 1) * M + j];
                    int64_t r = hs % v;
                    if (r < 0) r += v;  // floor modulo, as torch.remainder
                    o[(i - 1) * M + j] = static_cast<int32_t>(r + offsets[l * W + (i - 1) * M + j]);
                }
            }
        }
    });
}
