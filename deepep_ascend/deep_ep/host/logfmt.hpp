// LogFMT-10: the lossy wire format of upstream's low-latency combine (use_logfmt=True), as its
// kernel defines it (csrc/kernels/legacy/internode_ll.cu: logfmt_encode / decode_and_accumulate),
// written for the host.
//
// A BF16 row of H channels travels as [S blocks' meta][S blocks, packed], S = ceil(H / 128):
//   meta[b]  uint32: bf16 bits of amax (low half) and amin (high half) of |x| over block b;
//   block b  LogFMT-10 when the block qualifies (every |x| < 1: log2(amax) < 0, and log_amin <
//            log_amax), else its BF16 values unchanged.
// The receiver decides per block from the meta exactly as the sender did. In a LogFMT block each
// value is 10 bits (bit stream, value i at bit 10 i): a 9-bit code and the sign. With
//   log_amin = max(log2(amin), log2(amax) - 32)     (log2(0) = -inf: a zero amin clips)
//   step     = (log2(amax) - log_amin) / 510
// code 0 is zero and code c >= 1 is 2^((c - 1) * step + log_amin); the encoder picks
//   c = floor(max((log2|x| - log_amin) / step + 2 - log2((1 + 2^step) / 2) / step, 0))
// i.e. the nearest code in linear terms (the threshold between two codes is their midpoint).
// A cast block carries 160 bytes of codes instead of 256 of BF16; blocks follow each other without
// gaps (the receiver finds block b after the sizes its meta gives blocks 0..b-1), so a row's data is
// one contiguous prefix of its slot (row_bytes: room for the all-BF16 case).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <deepjit/host/convert.hpp>

namespace ep_logfmt {

constexpr int64_t kBlock = 128;                  // channels per block
constexpr int64_t kBlockBytes = kBlock * 2;      // a block's room in the row (BF16 size)
constexpr float kMinClip = 32.0f;                // log2 range kept below amax
constexpr int kNumValues = 1 << 9;               // 9-bit codes

inline int64_t num_blocks(int64_t H) { return (H + kBlock - 1) / kBlock; }
inline int64_t row_bytes(int64_t H) { return num_blocks(H) * (4 + kBlockBytes); }

struct BlockScale {
    bool cast;
    float log_amin, step;
};

inline BlockScale scale_of(uint32_t meta) {
    const float amax = dj::bf16_to_f32(static_cast<uint16_t>(meta & 0xFFFF));
    const float amin = dj::bf16_to_f32(static_cast<uint16_t>(meta >> 16));
    const float log_amax = std::log2(amax);
    const float log_amin = amin == 0.0f ? log_amax - kMinClip : std::fmax(std::log2(amin), log_amax - kMinClip);
    const bool cast = log_amax < 0.0f && log_amin < log_amax;
    return {cast, log_amin, cast ? (log_amax - log_amin) / static_cast<float>(kNumValues - 2) : 0.0f};
}

// Writes row x[H] (BF16) to dst in the layout above; returns the bytes that carry data.
inline int64_t encode_row(uint8_t* dst, const uint16_t* x, int64_t H) {
    const int64_t S = num_blocks(H);
    int64_t used = 4 * S;
    for (int64_t b = 0; b < S; ++b) {
        const int64_t c = std::min<int64_t>(kBlock, H - b * kBlock);
        const uint16_t* v = x + b * kBlock;
        uint16_t amax = 0, amin = 0x7F80;   // |x| as BF16 bits orders like the values (+inf start)
        for (int64_t i = 0; i < c; ++i) {
            const uint16_t a = v[i] & 0x7FFF;
            amax = a > amax ? a : amax;
            amin = a < amin ? a : amin;
        }
        const uint32_t meta = static_cast<uint32_t>(amax) | static_cast<uint32_t>(amin) << 16;
        std::memcpy(dst + 4 * b, &meta, 4);
        uint8_t* block = dst + used;
        const BlockScale s = scale_of(meta);
        if (!s.cast) {
            std::memcpy(block, v, c * 2);
            used += c * 2;
            continue;
        }
        const float step_inv = 1.0f / s.step;
        const float rounding = 2.0f - std::log2((1.0f + std::exp2(s.step)) * 0.5f) * step_inv;
        const float fused = rounding - s.log_amin * step_inv;
        const int64_t nbytes = (c * 10 + 7) / 8;
        std::memset(block, 0, nbytes);
        for (int64_t i = 0; i < c; ++i) {
            const float a = dj::bf16_to_f32(v[i] & 0x7FFF);
            uint32_t code = static_cast<uint32_t>(std::floor(std::fmax(std::log2(a) * step_inv + fused, 0.0f)));
            code = code > static_cast<uint32_t>(kNumValues - 1) ? kNumValues - 1 : code;
            const uint32_t word = code | (static_cast<uint32_t>(v[i] >> 15) << 9);
            const int64_t bit = i * 10;
            uint32_t chunk = 0;   // 10 bits straddle at most two bytes after a shift of < 8
            std::memcpy(&chunk, block + bit / 8, std::min<int64_t>(4, nbytes - bit / 8));
            chunk |= word << (bit % 8);
            std::memcpy(block + bit / 8, &chunk, std::min<int64_t>(4, nbytes - bit / 8));
        }
        used += nbytes;
    }
    return used;
}

// acc[h] += w * decoded(src row)[h] for h < H.
inline void accumulate_row(float* acc, const uint8_t* src, int64_t H, float w) {
    const int64_t S = num_blocks(H);
    const uint8_t* block = src + 4 * S;
    for (int64_t b = 0; b < S; ++b) {
        const int64_t c = std::min<int64_t>(kBlock, H - b * kBlock);
        uint32_t meta;
        std::memcpy(&meta, src + 4 * b, 4);
        float* a = acc + b * kBlock;
        const BlockScale s = scale_of(meta);
        if (!s.cast) {
            for (int64_t i = 0; i < c; ++i) {
                uint16_t v;
                std::memcpy(&v, block + 2 * i, 2);
                a[i] += dj::bf16_to_f32(v) * w;
            }
            block += c * 2;
            continue;
        }
        const int64_t nbytes = (c * 10 + 7) / 8;
        for (int64_t i = 0; i < c; ++i) {
            const int64_t bit = i * 10;
            uint32_t chunk = 0;
            std::memcpy(&chunk, block + bit / 8, std::min<int64_t>(4, nbytes - bit / 8));
            const uint32_t word = (chunk >> (bit % 8)) & 0x3FF;
            const uint32_t code = word & 0x1FF;
            const float mag = code == 0 ? 0.0f : std::exp2(static_cast<float>(code - 1) * s.step + s.log_amin);
            a[i] += ((word >> 9) ? -mag : mag) * w;
        }
        block += nbytes;
    }
}

}  // namespace ep_logfmt
