// topk_sum_and_topk_group_idx per token: each group's score is the sum of its best one or two
// scores; the num_topk_groups best groups, descending, ties to the smaller group id (as the stable
// sort of the reference). Insertion keeps equal values in arrival order, so ids stay ascending.
#include <tile_kernels/host/common.hpp>

namespace {

DJ_INLINE void insert(float* val, int64_t* id, int64_t& n, int64_t cap, float v, int64_t e) {
    if (n == cap && !(v > val[n - 1])) return;
    int64_t i = n < cap ? n++ : n - 1;
    for (; i > 0 && v > val[i - 1]; --i) { val[i] = val[i - 1]; id[i] = id[i - 1]; }
    val[i] = v;
    id[i] = e;
}

}  // namespace

DJ_KERNEL(tk_topk_group, "ptr,ptr,i64,i64,i64,i64,i64,i64")
void tk_topk_group(int64_t* out, const float* scores, int64_t T, int64_t G, int64_t Eg, int64_t num_sum,
                   int64_t num_groups_out, int64_t threads) {
    dj::parallel_for((T + 255) / 256, threads, [&](int64_t blk) {
        float gval[33];
        int64_t gid[33];
        for (int64_t t = blk * 256; t < std::min(T, blk * 256 + 256); ++t) {
            const float* s = scores + t * G * Eg;
            int64_t ng = 0;
            for (int64_t g = 0; g < G; ++g) {
                float best[2];
                int64_t bid[2], nb = 0;
                for (int64_t e = 0; e < Eg; ++e) insert(best, bid, nb, num_sum, s[g * Eg + e], e);
                insert(gval, gid, ng, num_groups_out, num_sum == 2 ? best[0] + best[1] : best[0], g);
            }
            for (int64_t i = 0; i < num_groups_out; ++i) out[t * num_groups_out + i] = gid[i];
        }
    });
}
