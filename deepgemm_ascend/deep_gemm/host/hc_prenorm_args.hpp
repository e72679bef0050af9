// Named launch arguments of the tf32_hc_prenorm_gemm kernel. host/hc_prenorm.py reads this
// declaration (deepjit.descriptors) and fills every field by name, so Python and C++ cannot drift apart.
#pragma once

#include <cstdint>

namespace dg {

struct HcPrenormArgs {
    const uint16_t* a;                 // BF16 [m, k], row stride lda
    const float* b;                    // FP32 [n, k], row stride ldb
    float* d;                          // FP32 [m, n] (or [splits, m, n]), row stride ldd, split stride d_split
    float* sqr;                        // FP32 [m] (or [splits, m]), contiguous
    int64_t m, n, k, lda, ldb, ldd, d_split;
    int64_t splits;                    // 0: no split-K
};

}  // namespace dg
