// Entry kernel for every host GEMM family: reads the GemmDesc written by gemm.py (gemm_desc.hpp),
// turns the group layout into jobs and runs the packed engine.
#include <deep_gemm/host/gemm_desc.hpp>
#include <deep_gemm/host/gemm_engine.hpp>

namespace {

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

dg::Operand operand(const dg::OperandDesc& f, const void* data, const float* sf) {
    dg::Operand op;
    op.ptr = static_cast<const uint8_t*>(data);
    op.type = static_cast<int>(f.type);
    op.sg = f.group_stride; op.smn = f.mn_stride; op.sk = f.k_stride; op.packed_mn = f.packed_mn != 0;
    op.sf = f.has_sf ? sf : nullptr;
    op.sfg = f.sf_group_stride; op.sfmn = f.sf_mn_stride; op.sfk = f.sf_k_stride;
    op.gmn = std::max<int64_t>(f.gran_mn, 1); op.gk = std::max<int64_t>(f.gran_k, 1);
    op.fold = op.sf != nullptr && foldable(op.sf, f.sf_groups, f.sf_rows, f.sf_cols, op.sfg, op.sfmn, op.sfk);
    return op;
}

void zero_rows(const dg::Output& o, int64_t row0, int64_t rows, int64_t n) {
    const int64_t elem = o.d_type == 1 ? 4 : 2;
    for (int64_t r = row0; r < row0 + rows; ++r) std::memset(o.d + r * o.dsm * elem, 0, n * elem);
}

}  // namespace

DJ_KERNEL(dg_gemm, "ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,f64,i64")
void dg_gemm(const dg::GemmDesc* desc, const void* a, const float* sfa, const void* b, const float* sfb, void* d,
             const void* c, const int32_t* layout, double alpha, int64_t threads) {
    const int64_t M = desc->m, N = desc->n, K = desc->k, G = desc->groups;
    const int mode = static_cast<int>(desc->mode);
    const dg::Operand A = operand(desc->a, a, sfa), B = operand(desc->b, b, sfb);
    dg::Output o;
    o.d = static_cast<uint8_t*>(d);
    o.d_type = static_cast<int>(desc->d.type);
    o.dsg = desc->d.group_stride; o.dsm = desc->d.row_stride;
    o.c = desc->c.type >= 0 ? static_cast<const uint8_t*>(c) : nullptr;
    o.c_type = static_cast<int>(desc->c.type);
    o.csg = desc->c.group_stride; o.csm = desc->c.row_stride;
    o.alpha = static_cast<float>(alpha);

    std::vector<dg::Job> jobs;
    const bool zero_pad = desc->zero_padding != 0;
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
        const int64_t al = std::max<int64_t>(desc->alignment, 1);
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
