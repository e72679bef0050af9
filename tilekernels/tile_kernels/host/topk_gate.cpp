// Per row, the indices of the k largest scores in descending order, ties -> smaller index
// (a stable descending sort truncated to k, NaN first), by insertion into a sorted k-entry list.
#include <tile_kernels/host/common.hpp>

DJ_KERNEL(tk_topk_gate, "ptr,ptr,i64,i64,i64,i64")
void tk_topk_gate(int64_t* idx, const float* scores, int64_t T, int64_t E, int64_t K, int64_t threads) {
    dj::parallel_threads(dj::thread_count(threads, T), [&](int64_t t, int64_t nt) {
        std::vector<float> val(K);
        const dj::Range rg = dj::split_range(T, nt, t);
        for (int64_t r = rg.begin; r < rg.end; ++r) {
            const float* s = scores + r * E;
            int64_t* out = idx + r * K;
            int64_t n = 0;
            for (int64_t e = 0; e < E; ++e) tk::insert_ranked(val.data(), out, n, K, s[e], e);
        }
    });
}
