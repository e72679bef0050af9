// Shared pieces of deep_ep's host kernels: the token slot layout, row copies and the combine's
// row reduction.
//
// A dispatch slot carries one token to one destination rank:
//   [x row][scale packs][meta], each part starting at a 64-byte boundary (offsets are passed in).
// meta = int32 src_token_idx, int32 first_topk_slot_here, int32 pad[2],
//        int32 local_expert[K] (-1 where the expert lives elsewhere), int32 within_expert_idx[K],
//        float weight[K] (0 where not local).
// A combine row is [bf16 x[H]][float weight[K]] at a 64-byte aligned weight offset.
#pragma once

#include <deepjit/host/convert.hpp>
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>

#include <algorithm>
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

// y[0, H) = bf16(bias0 + bias1 + sum over j < n of w[j] * src[j]), in FP32 and in exactly that
// order (vector and scalar paths do the same operations); a null bias or w adds nothing / scales by
// nothing. `stream` writes y with non-temporal stores (y 64-byte aligned, H a multiple of 32).
inline void reduce_rows(uint16_t* y, int64_t H, const uint16_t* const* src, const float* w, int64_t n,
                        const uint16_t* bias0, const uint16_t* bias1, bool stream) {
    constexpr int64_t kChunk = 256;
    for (int64_t h0 = 0; h0 < H; h0 += kChunk) {
        const int64_t c = std::min<int64_t>(kChunk, H - h0);
#if defined(DJ_HAVE_AVX512)
        if (c == kChunk) {
            constexpr int kVec = kChunk / 16;
            auto load = [](const uint16_t* p) {
                return dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
            };
            __m512 acc[kVec];
            for (int v = 0; v < kVec; ++v) acc[v] = bias0 != nullptr ? load(bias0 + h0 + v * 16) : _mm512_setzero_ps();
            if (bias1 != nullptr)
                for (int v = 0; v < kVec; ++v) acc[v] = _mm512_add_ps(acc[v], load(bias1 + h0 + v * 16));
            for (int64_t j = 0; j < n; ++j) {
                const uint16_t* s = src[j] + h0;
                if (w != nullptr) {
                    const __m512 wv = _mm512_set1_ps(w[j]);
                    for (int v = 0; v < kVec; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(wv, load(s + v * 16)));
                } else {
                    for (int v = 0; v < kVec; ++v) acc[v] = _mm512_add_ps(acc[v], load(s + v * 16));
                }
            }
            for (int v = 0; v < kVec; ++v) {
                const __m256i out = dj::f32x16_to_bf16(acc[v]);
                if (stream)
                    _mm256_stream_si256(reinterpret_cast<__m256i*>(y + h0 + v * 16), out);
                else
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + h0 + v * 16), out);
            }
            continue;
        }
#endif
        float acc[kChunk];
        for (int64_t h = 0; h < c; ++h) acc[h] = bias0 != nullptr ? dj::bf16_to_f32(bias0[h0 + h]) : 0.0f;
        if (bias1 != nullptr)
            for (int64_t h = 0; h < c; ++h) acc[h] += dj::bf16_to_f32(bias1[h0 + h]);
        for (int64_t j = 0; j < n; ++j) {
            const uint16_t* s = src[j] + h0;
            if (w != nullptr) {
                for (int64_t h = 0; h < c; ++h) acc[h] += w[j] * dj::bf16_to_f32(s[h]);
            } else {
                for (int64_t h = 0; h < c; ++h) acc[h] += dj::bf16_to_f32(s[h]);
            }
        }
        for (int64_t h = 0; h < c; ++h) y[h0 + h] = dj::f32_to_bf16(acc[h]);
    }
}

}  // namespace ep
