// topk_sum_and_topk_group_idx per token: each group's score is the sum of its best one or two
// scores; the num_topk_groups best groups, descending, ties to the smaller group id (as the stable
// sort of the reference). Insertion keeps equal values in arrival order, so ids stay ascending.
// NaN ranks above every number, as in torch's topk and sort: a group holding one scores NaN.
#include <tile_kernels/host/common.hpp>

namespace {

#ifdef DJ_HAVE_AVX512
// The sum of the best `num_sum` (1 or 2) of n (a multiple of 16) scores: a lane-wise max / min
// split, then the largest value, and the runner-up from the min lanes or the max lanes less the
// one lane that held the largest (an equal second maximum stays, as in a top-2 with ties).
DJ_INLINE float top_sum16(const float* s, int64_t n, int64_t num_sum) {
    __m512 hi = _mm512_loadu_ps(s), lo = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = _mm512_cmp_ps_mask(hi, hi, _CMP_UNORD_Q);
    for (int64_t j = 16; j < n; j += 16) {
        const __m512 v = _mm512_loadu_ps(s + j);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        lo = _mm512_max_ps(lo, _mm512_min_ps(hi, v));
        hi = _mm512_max_ps(hi, v);
    }
    if (nan) return NAN;
    const float m1 = _mm512_reduce_max_ps(hi);
    if (num_sum == 1) return m1;
    const __mmask16 at = _mm512_cmp_ps_mask(hi, _mm512_set1_ps(m1), _CMP_EQ_OQ);
    const __mmask16 first = static_cast<__mmask16>(at & (~at + 1u));
    const float m2 = std::max(_mm512_reduce_max_ps(lo), _mm512_reduce_max_ps(_mm512_mask_mov_ps(hi, first, _mm512_set1_ps(-INFINITY))));
    return m1 + m2;
}
#endif

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
                float sum;
#ifdef DJ_HAVE_AVX512
                if (Eg % 16 == 0) {
                    sum = top_sum16(s + g * Eg, Eg, num_sum);
                } else
#endif
                {
                    float best[2];
                    int64_t bid[2], nb = 0;
                    for (int64_t e = 0; e < Eg; ++e) tk::insert_ranked(best, bid, nb, num_sum, s[g * Eg + e], e);
                    sum = num_sum == 2 ? best[0] + best[1] : best[0];
                }
                tk::insert_ranked(gval, gid, ng, num_groups_out, sum, g);
            }
            for (int64_t i = 0; i < num_groups_out; ++i) out[t * num_groups_out + i] = gid[i];
        }
    });
}
