// Named launch arguments of the Engram gate kernels. engram/__init__.py reads these declarations
// (deepjit.descriptors) and fills every field by name, so Python and C++ cannot drift apart.
#pragma once

#include <cstdint>

namespace tk {

// x, k: BF16 [T, HC, H] with unit last stride; v: BF16 [T, H] with unit last stride; w: FP32 [HC, H].
struct EngramGateFwdArgs {
    uint16_t* out;                     // BF16 [T, HC, H], contiguous
    float *dot, *gate, *rstd_x, *rstd_k;  // FP32 [T, HC] each, or all null (nothing saved)
    const uint16_t *x, *k, *v;
    const float* w;
    int64_t T, HC, H;
    int64_t x_t, x_h, k_t, k_h, v_t;   // strides of x, k, v
    float eps, clamp;
};

struct EngramGateBwdArgs {
    uint16_t *grad_x, *grad_k;         // BF16 [T, HC, H], contiguous
    uint16_t* grad_v;                  // BF16 [T, H], contiguous
    float* partial;                    // FP32 [num_blocks, HC, H]: grad_w per block of tokens
    const uint16_t* grad_out;          // BF16 [T, HC, H], contiguous
    const uint16_t *x, *k, *v;
    const float* w;
    const float *dot, *gate, *rstd_x, *rstd_k;  // FP32 [T, HC], contiguous (saved by the forward)
    int64_t T, HC, H;
    int64_t x_t, x_h, k_t, k_h, v_t;   // strides of x, k, v
    float clamp;
    int64_t num_blocks;
};

}  // namespace tk
