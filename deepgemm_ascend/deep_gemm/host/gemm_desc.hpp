// The named argument block of dg_gemm (host/gemm.cpp), declared once: host/gemm.py reads this
// declaration into ctypes and fills it by name (deepjit.descriptors); tests/deep_gemm/host/test_gemm_desc.py
// compares that layout with the compiler's, field by field (descriptors.check_host_layout). Every field
// is int64: no padding, and one element type on both sides.
#pragma once
#include <cstdint>

namespace dg {

struct OperandDesc {
    int64_t type;                              // 0 BF16, 1 FP8 E4M3, 2 FP4 E2M1 (two per byte)
    int64_t group_stride, mn_stride, k_stride;  // in elements (bytes for FP4)
    int64_t packed_mn;                         // FP4 packed along MN instead of K
    int64_t sf_group_stride, sf_mn_stride, sf_k_stride;
    int64_t gran_mn, gran_k;                   // scale granularity
    int64_t has_sf;
    int64_t sf_groups, sf_rows, sf_cols;       // scale extents
};

struct OutputDesc {
    int64_t type;                              // 0 BF16, 1 FP32; -1: no tensor (c only)
    int64_t group_stride, row_stride;
};

struct GemmDesc {
    int64_t m, n, k, groups, mode, alignment, zero_padding;
    OperandDesc a, b;
    OutputDesc d, c;
};

static_assert(sizeof(GemmDesc) == 41 * sizeof(int64_t), "GemmDesc must stay a padding-free int64 block");

}  // namespace dg
