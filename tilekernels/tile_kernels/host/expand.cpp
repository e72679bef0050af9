// tk_expand: out[token_topk_to_pos[t, k]] = x[t] for whole rows of any element type; rows no
// (token, topk) slot maps to are zero.
#include <tile_kernels/host/common.hpp>

namespace {

// Rows go to a large, freshly written output: streaming stores skip the read-for-ownership of
// every destination line when the row is 64-byte aligned.
inline void copy_row(uint8_t* dst, const uint8_t* src, int64_t n) {
#ifdef DJ_HAVE_AVX512
    if ((reinterpret_cast<uintptr_t>(dst) & 63) == 0 && n >= 1024) {
        int64_t i = 0;
        for (; i + 64 <= n; i += 64)
            _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
        std::memcpy(dst + i, src + i, n - i);
        return;
    }
#endif
    std::memcpy(dst, src, n);
}

}  // namespace

DJ_KERNEL(tk_expand, "ptr,ptr,ptr,ptr,i64,i64,i64,i64,i64")
void tk_expand(uint8_t* out, const uint8_t* x, const int32_t* t2p, uint8_t* covered, int64_t T, int64_t K, int64_t P,
               int64_t row_bytes, int64_t threads) {
    dj::parallel_for(T, threads, [&](int64_t t) {
        for (int64_t k = 0; k < K; ++k) {
            const int32_t p = t2p[t * K + k];
            if (p < 0) continue;
            copy_row(out + p * row_bytes, x + t * row_bytes, row_bytes);
            covered[p] = 1;
        }
    });
#ifdef DJ_HAVE_AVX512
    _mm_sfence();
#endif
    dj::parallel_for(P, threads, [&](int64_t p) {
        if (!covered[p]) std::memset(out + p * row_bytes, 0, row_bytes);
    });
}
