// Entry kernel for every host GEMM family: decodes the parameter block written by gemm.py,
// turns the group layout into jobs and runs the packed engine.
#include <deep_gemm/host/gemm_engine.hpp>

namespace {

// Parameter block layout (int64), mirrored in gemm.py.
enum : int {
    P_M, P_N, P_K, P_G, P_MODE, P_ALIGN, P_ZERO_PAD,
    P_A,                 // 14 operand fields for A, then 14 for B
    P_B = P_A + 14,
    P_D = P_B + 14,      // d type, d group stride, d row stride
    P_C = P_D + 3,       // c type (-1 none), c group stride, c row stride
    P_COUNT = P_C + 3,
};
enum Mode : int { kDense = 0, kMIndices = 1, kPsum = 2, kMasked = 3, kKGrouped = 4 };

// Every scale a power of two well inside BF16's range: folding it into the conversion is exact.
bool foldable(const float* sf, int64_t groups, int64_t rows, int64_t cols, int64_t sg, int64_t sr, int64_t sc) {
    bool ok = true;
    for (int64_t g = 0; g < groups; ++g)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                const uint32_t bits = dj::f32_bits(sf[g * sg + r * sr + c * sc]);
                const uint32_t e = (bits >> 23) & 0xFF;
                ok &= (bits & 0x807FFFFFu) == 0 && e >= 27 && e <= 227;
            }
    return ok;
}

// Fields: type, group / MN / K strides, packed along MN, scale strides (group, MN, K), scale
// granularities (MN, K), has scales, scale extents (groups, rows, columns).
dg::Operand operand(const int64_t* f, const void* data, const float* sf) {
    dg::Operand op;
    op.ptr = static_cast<const uint8_t*>(data);
    op.type = static_cast<int>(f[0]);
    op.sg = f[1]; op.smn = f[2]; op.sk = f[3]; op.packed_mn = f[4] != 0;
    op.sf = f[10] ? sf : nullptr;
    op.sfg = f[5]; op.sfmn = f[6]; op.sfk = f[7];
    op.gmn = std::max<int64_t>(f[8], 1); op.gk = std::max<int64_t>(f[9], 1);
    op.fold = op.sf != nullptr && foldable(op.sf, f[11], f[12], f[13], op.sfg, op.sfmn, op.sfk);
    return op;
}

void zero_rows(const dg::Output& o, int64_t row0, int64_t rows, int64_t n) {
    const int64_t elem = o.d_type == 1 ? 4 : 2;
    for (int64_t r = row0; r < row0 + rows; ++r) std::memset(o.d + r * o.dsm * elem, 0, n * elem);
}

}  // namespace

DJ_KERNEL(dg_gemm, "ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,f64,i64")
void dg_gemm(const int64_t* params, const void* a, const float* sfa, const void* b, const float* sfb, void* d,
             const void* c, const int32_t* layout, double alpha, int64_t threads) {
    const int64_t M = params[P_M], N = params[P_N], K = params[P_K], G = params[P_G];
    const int mode = static_cast<int>(params[P_MODE]);
    const dg::Operand A = operand(params + P_A, a, sfa), B = operand(params + P_B, b, sfb);
    dg::Output o;
    o.d = static_cast<uint8_t*>(d);
    o.d_type = static_cast<int>(params[P_D]);
    o.dsg = params[P_D + 1]; o.dsm = params[P_D + 2];
    o.c = params[P_C] >= 0 ? static_cast<const uint8_t*>(c) : nullptr;
    o.c_type = static_cast<int>(params[P_C]);
    o.csg = params[P_C + 1]; o.csm = params[P_C + 2];
    o.alpha = static_cast<float>(alpha);

    std::vector<dg::Job> jobs;
    const bool zero_pad = params[P_ZERO_PAD] != 0;
    switch (mode) {
    case kDense:
        jobs.push_back({0, 0, 0, 0, 0, M, 0, K, 0});
        break;
    case kMIndices:   // runs of equal group ids; ids outside [0, G) are padding
        for (int64_t r = 0; r < M;) {
            const int32_t g = layout[r];
            int64_t e = r + 1;
            while (e < M && layout[e] == g) ++e;
            if (g >= 0 && g < G)
                jobs.push_back({0, r, g, 0, r, e - r, 0, K, 0});
            else if (zero_pad)
                zero_rows(o, r, e - r, N);
            r = e;
        }
        break;
    case kPsum: {     // group g: [align(psum[g-1]), psum[g]); rows in between are gaps
        const int64_t al = std::max<int64_t>(params[P_ALIGN], 1);
        int64_t start = 0;
        for (int64_t g = 0; g < G && start < M; ++g) {
            const int64_t end = std::clamp<int64_t>(layout[g], start, M);
            if (end > start) jobs.push_back({0, start, g, 0, start, end - start, 0, K, 0});
            const int64_t next = std::min<int64_t>(dj::gemm::ceil_div(end, al) * al, M);
            if (zero_pad && next > end) zero_rows(o, end, next - end, N);
            start = next;
        }
        if (zero_pad && start < M) zero_rows(o, start, M - start, N);
        break;
    }
    case kMasked:     // M is the per-group capacity
        for (int64_t g = 0; g < G; ++g)
            jobs.push_back({g, 0, g, g, 0, std::clamp<int64_t>(layout[g], 0, M), 0, K, 0});
        break;
    case kKGrouped:   // layout: (k_start, k_len, sf_start) per group
        for (int64_t g = 0; g < G; ++g)
            jobs.push_back({0, 0, 0, g, 0, M, layout[3 * g], layout[3 * g + 1], layout[3 * g + 2]});
        break;
    default:
        return;
    }
    dg::Engine(A, B, o, N, threads).run(jobs);
}
