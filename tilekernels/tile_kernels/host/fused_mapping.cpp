// The expert-major layout of a (T, K) routing: aligned segments per expert, positions handed out
// in ascending (token, k) order inside each segment; padding positions stay -1.
#include <tile_kernels/host/common.hpp>
#include <tile_kernels/host/layout_args.hpp>

DJ_KERNEL(tk_fused_mapping, "ptr")
void tk_fused_mapping(const tk::FusedMappingArgs* args) {
    const tk::FusedMappingArgs a = *args;
    int32_t *p2e = a.p2e, *p2t = a.p2t, *p2tt = a.p2tt, *t2p = a.t2p, *start = a.start, *end = a.end,
            *per_expert = a.per_expert;
    const int64_t* idx = a.idx;
    const int64_t T = a.T, K = a.K, E = a.E, P = a.P, alignment = a.alignment;
    std::vector<int64_t> count(E, 0), next(E);
    for (int64_t i = 0; i < T * K; ++i)
        if (idx[i] >= 0) ++count[idx[i]];
    int64_t pos = 0;
    for (int64_t e = 0; e < E; ++e) {
        const int64_t padded = (count[e] + alignment - 1) / alignment * alignment;
        start[e] = static_cast<int32_t>(pos);
        next[e] = pos;
        pos += padded;
        end[e] = static_cast<int32_t>(pos);
        per_expert[e] = static_cast<int32_t>(padded);
    }
    std::fill(p2e, p2e + P, -1);
    std::fill(p2t, p2t + P, -1);
    std::fill(p2tt, p2tt + P, -1);
    for (int64_t t = 0, i = 0; t < T; ++t)
        for (int64_t k = 0; k < K; ++k, ++i) {
            const int64_t e = idx[i];
            if (e < 0) { t2p[i] = -1; continue; }
            const int64_t p = next[e]++;
            t2p[i] = static_cast<int32_t>(p);
            p2e[p] = static_cast<int32_t>(e);
            p2t[p] = static_cast<int32_t>(t);
            p2tt[p] = static_cast<int32_t>(i);
        }
}
