// Named launch arguments of the block casts (block_cast.cpp) and their inverse (cast_back.cpp).
// host/cast.py reads these declarations (deepjit.descriptors) and fills every field by name, so
// Python and C++ cannot drift apart. fmt: quant.hpp's kE4M3 / kE2M1; scales at sf[i * sm + j * sk]
// (FP32, or UE8M0 bytes packed four to an int32 when packed != 0).
#pragma once

#include <cstdint>

namespace tk {

struct BlockCastArgs {
    void* q;                           // [M, K] FP8 (or [M, K / 2] packed FP4); unused in mode 1
    void* sf;                          // the scales: written (mode 0, 1) or read (mode 2)
    const void* x;                     // [M, K] with row stride ldx, BF16 when in_dtype is kInBF16 else FP32
    int32_t in_dtype;
    int64_t M, K, ldx;
    int32_t fmt;
    int64_t BM, BK;                    // the scale block
    int32_t round_sf;                  // scales rounded up to powers of two
    float clamp_min;                   // the smallest block amax a scale is taken from
    int32_t packed;
    int64_t sm, sk;
    int32_t mode;                      // 0 cast, 1 scales only, 2 cast with the caller's scales
};

struct CastBackArgs {
    void* out;                         // [M, K] BF16 when bf16_out else FP32
    const uint8_t* q;
    const void* sf;
    int32_t fmt, bf16_out;
    int64_t M, K, BM, BK;
    int32_t packed;
    int64_t sm, sk;
};

}  // namespace tk
