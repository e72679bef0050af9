// The offsets of every GemmDesc field as the C++ compiler lays them out, for the test that holds
// host/gemm_desc.py to the same layout (tests/deep_gemm/host/test_gemm_desc.py).
#include <cstddef>
#include <cstdio>

#include <deepjit/host/kernel.hpp>
#include <deep_gemm/host/gemm_desc.hpp>

// "name:offset;" for every field of GemmDesc and its size, for the layout test against gemm_desc.py.
#define DG_DESC_FIELD(f) n += std::snprintf(out + n, n < cap ? cap - n : 0, #f ":%zu;", offsetof(dg::GemmDesc, f))
#define DG_DESC_OPERAND(x) DG_DESC_FIELD(x.type); DG_DESC_FIELD(x.group_stride); DG_DESC_FIELD(x.mn_stride); \
    DG_DESC_FIELD(x.k_stride); DG_DESC_FIELD(x.packed_mn); DG_DESC_FIELD(x.sf_group_stride); \
    DG_DESC_FIELD(x.sf_mn_stride); DG_DESC_FIELD(x.sf_k_stride); DG_DESC_FIELD(x.gran_mn); DG_DESC_FIELD(x.gran_k); \
    DG_DESC_FIELD(x.has_sf); DG_DESC_FIELD(x.sf_groups); DG_DESC_FIELD(x.sf_rows); DG_DESC_FIELD(x.sf_cols)
#define DG_DESC_OUTPUT(x) DG_DESC_FIELD(x.type); DG_DESC_FIELD(x.group_stride); DG_DESC_FIELD(x.row_stride)

DJ_KERNEL(dg_gemm_desc_layout, "ptr,i64")
void dg_gemm_desc_layout(char* out, int64_t cap_) {
    const size_t cap = static_cast<size_t>(cap_);
    size_t n = std::snprintf(out, cap, "sizeof:%zu;", sizeof(dg::GemmDesc));
    DG_DESC_FIELD(m); DG_DESC_FIELD(n); DG_DESC_FIELD(k); DG_DESC_FIELD(groups); DG_DESC_FIELD(mode);
    DG_DESC_FIELD(alignment); DG_DESC_FIELD(zero_padding);
    DG_DESC_OPERAND(a); DG_DESC_OPERAND(b); DG_DESC_OUTPUT(d); DG_DESC_OUTPUT(c);
}
