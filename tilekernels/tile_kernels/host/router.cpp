// The DeepSeek router per token: scores (sigmoid | sqrt(softplus) | softmax), ranking scores
// (+ bias; raw logits for softmax), group-limited selection (groups ranked by the sum of their
// two best ranking scores), top-k, weight normalisation, shared-expert slots, logical -> physical
// mapping and EP/TP masking. Ties always go to the lower index; NaN ranks first (torch's order).
#include <tile_kernels/host/common.hpp>
#include <tile_kernels/host/router_args.hpp>

namespace {

using Args = tk::Top2SumGateArgs;

inline int64_t mask_ep_tp(const Args& A, int64_t e) {
    if (e < 0 || (e / A.experts_per_rank) % A.num_tp_ranks != A.tp_rank) return -1;
    const int64_t per_dp = A.experts_per_rank * A.num_tp_ranks;
    int64_t v = e - A.tp_rank * A.experts_per_rank;
    v -= (v >= 0 ? v / per_dp : -((-v + per_dp - 1) / per_dp)) * (per_dp - A.experts_per_rank);
    return v < 0 ? -1 : v;
}

void route(const Args& A, int64_t t, float* s, float* r, float* gval, int64_t* gid, float* kval) {
    const int64_t W = A.K + A.S;
    int64_t* idx = A.idx_out + t * W;
    float* w = A.w_out + t * W;
    if (A.mask != nullptr && !A.mask[t]) {
        for (int64_t k = 0; k < W; ++k) { idx[k] = -1; w[k] = 0.0f; }
        if (A.unmapped != nullptr) for (int64_t k = 0; k < A.K; ++k) A.unmapped[t * A.K + k] = -1;
        return;
    }
    const float* l = A.logits + t * A.E;
    if (A.scoring == 2) {
        float m = -INFINITY;
        for (int64_t e = 0; e < A.E; ++e) m = std::max(m, l[e]);
        float sum = 0.0f;
        int64_t e0 = 0;
#ifdef DJ_HAVE_AVX512
        __m512 vsum = _mm512_setzero_ps();
        for (; e0 + 16 <= A.E; e0 += 16) {
            const __m512 v = tk::exp_f32x16(_mm512_sub_ps(_mm512_loadu_ps(l + e0), _mm512_set1_ps(m)));
            _mm512_storeu_ps(s + e0, v);
            vsum = _mm512_add_ps(vsum, v);
        }
        sum = _mm512_reduce_add_ps(vsum);
#endif
        for (int64_t e = e0; e < A.E; ++e) { s[e] = tk::exp_f32(l[e] - m); sum += s[e]; }
        for (int64_t e = 0; e < A.E; ++e) { s[e] = s[e] / sum; r[e] = l[e] + A.bias[e]; }
    } else {
        int64_t e = 0;
#ifdef DJ_HAVE_AVX512
        if (A.scoring == 0) {
            const __m512 one = _mm512_set1_ps(1.0f);
            for (; e + 16 <= A.E; e += 16) {
                const __m512 v = _mm512_div_ps(one, _mm512_add_ps(one, tk::exp_f32x16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_loadu_ps(l + e)))));
                _mm512_storeu_ps(s + e, v);
                _mm512_storeu_ps(r + e, _mm512_add_ps(v, _mm512_loadu_ps(A.bias + e)));
            }
        }
#endif
        for (; e < A.E; ++e) {
            const float x = l[e];
            if (A.scoring == 0) s[e] = 1.0f / (1.0f + tk::exp_f32(-x));
            else s[e] = std::sqrt(x > 20.0f ? x : std::log1p(tk::exp_f32(x)));
            r[e] = s[e] + A.bias[e];
        }
    }
    int64_t* sel = idx;  // the routed selection lands in the first K output slots
    if (A.fix != nullptr && A.fix[t]) {
        for (int64_t k = 0; k < A.K; ++k) sel[k] = A.unmapped[t * A.K + k];
    } else {
        if (A.num_groups != A.num_topk_groups) {
            const int64_t per = A.E / A.num_groups;
            int64_t ng = 0;
            for (int64_t g = 0; g < A.num_groups; ++g) {
                float best[2]; int64_t bid[2]; int64_t nb = 0;
                for (int64_t e = g * per; e < (g + 1) * per; ++e) tk::insert_ranked(best, bid, nb, 2, r[e], e);
                tk::insert_ranked(gval, gid, ng, A.num_topk_groups, nb == 2 ? best[0] + best[1] : best[0], g);
            }
            uint32_t keep = 0;
            for (int64_t i = 0; i < ng; ++i) keep |= 1u << gid[i];
            for (int64_t e = 0; e < A.E; ++e)
                if (!((keep >> (e / per)) & 1u)) r[e] = -INFINITY;
        }
        int64_t n = 0;
        for (int64_t e = 0; e < A.E; ++e) tk::insert_ranked(kval, sel, n, A.K, r[e], e);
    }
    if (A.unmapped != nullptr) for (int64_t k = 0; k < A.K; ++k) A.unmapped[t * A.K + k] = sel[k];
    float sum = 0.0f;
    for (int64_t k = 0; k < A.K; ++k) sum += s[sel[k] < 0 ? 0 : sel[k]];
    sum = std::max(sum, 1e-20f);
    for (int64_t k = 0; k < A.K; ++k) w[k] = s[sel[k] < 0 ? 0 : sel[k]] / sum * A.scale;
    for (int64_t j = 0; j < A.S; ++j) { idx[A.K + j] = A.E + j; w[A.K + j] = 1.0f; }
    for (int64_t k = 0; k < W; ++k) {
        int64_t e = idx[k];
        if (e >= 0 && A.phys_map != nullptr) {
            const int64_t dup = (A.ep_rank + t * 23333) % A.logical_count[e];
            e = A.phys_map[e * A.map_width + dup];
        }
        idx[k] = mask_ep_tp(A, e);
    }
}

}  // namespace

DJ_KERNEL(tk_top2_sum_gate, "ptr,i64")
void tk_top2_sum_gate(const tk::Top2SumGateArgs* args, int64_t threads) {
    const Args A = *args;
    const int64_t T = A.T, E = A.E, K = A.K, num_groups = A.num_groups;
    dj::parallel_threads(dj::thread_count(threads, T), [&](int64_t th, int64_t nt) {
        std::vector<float> s(E), r(E), gval(num_groups + 1), kval(K);
        std::vector<int64_t> gid(num_groups + 1);
        const dj::Range rg = dj::split_range(T, nt, th);
        for (int64_t t = rg.begin; t < rg.end; ++t) route(A, t, s.data(), r.data(), gval.data(), gid.data(), kval.data());
    });
}
