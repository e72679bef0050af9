// Shared pieces of deep_ep's host kernels: the token slot layout and row copies.
//
// A dispatch slot carries one token to one destination rank:
//   [x row][scale packs][meta], each part starting at a 64-byte boundary (offsets are passed in).
// meta = int32 src_token_idx, int32 first_topk_slot_here, int32 pad[2],
//        int32 local_expert[K] (-1 where the expert lives elsewhere), int32 within_expert_idx[K],
//        float weight[K] (0 where not local).
// A combine row is [bf16 x[H]][float weight[K]] at a 64-byte aligned weight offset.
#pragma once

#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>

#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ep {

// Views of a slot's meta part for top-k width K.
struct Meta {
    int32_t* head;  // [0] src_token_idx, [1] first top-k slot landing on this rank
    int32_t* local_expert;
    int32_t* within;
    float* weight;
    DJ_INLINE Meta(uint8_t* p, int64_t K)
        : head(reinterpret_cast<int32_t*>(p)), local_expert(head + 4), within(local_expert + K),
          weight(reinterpret_cast<float*>(within + K)) {}
};

// Row copy; large rows bypass the cache on the destination side (the destination is read by
// another process later, so pulling its lines into this core's cache only costs bandwidth).
DJ_INLINE void copy_row(uint8_t* DJ_RESTRICT dst, const uint8_t* DJ_RESTRICT src, int64_t n) {
#if defined(__AVX512F__)
    if (n >= 1024 && (reinterpret_cast<uintptr_t>(dst) & 63) == 0) {
        int64_t i = 0;
        for (; i + 256 <= n; i += 256) {
            const __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 64);
            const __m512i c = _mm512_loadu_si512(src + i + 128), d = _mm512_loadu_si512(src + i + 192);
            _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), a);
            _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 64), b);
            _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 128), c);
            _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 192), d);
        }
        for (; i + 64 <= n; i += 64) _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
        if (i < n) std::memcpy(dst + i, src + i, n - i);
        return;
    }
#endif
    std::memcpy(dst, src, n);
}

DJ_INLINE void store_fence() {
#if defined(__AVX512F__)
    _mm_sfence();
#endif
}

}  // namespace ep
