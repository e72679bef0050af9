// Named launch arguments of the block casts (block_cast.cpp), their inverse (cast_back.cpp), the
// E5M6 casts (e5m6.cpp) and the lossless FP4 -> FP8 recast (lossless.cpp). host/cast.py and
// quant/lossless.py read these declarations (deepjit.descriptors) and fills every field by name, so
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

struct E5M6Args {
    int32_t op;                        // 0: x -> out (E5M6 words) + sf; 1: x (E5M6 words) + sf -> out
    void* out;
    void* sf;                          // per-row scales
    const void* x;
    int32_t dt;                        // the float side: kInBF16 or FP32
    int64_t T, H, BM, BK;              // the scale block (op 1)
    int32_t round_sf, packed;
    int64_t sm, sk;
};

struct LosslessArgs {
    uint8_t* out;                      // E4M3 [M, K]
    int32_t* e_out;                    // the output block exponents [ceil(M / OBM), kb_out]
    const uint8_t* q;                  // packed E2M1 [M, K / 2]
    const void* sf;                    // the input block scales
    int64_t M, K, IBM, IBK, OBM, OBK;  // input and output scale blocks
    int32_t packed;
    int64_t sm, sk, kb_out;
};

}  // namespace tk
