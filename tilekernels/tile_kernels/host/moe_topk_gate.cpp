// The DeepSeek-V4.1 router per token (tile_kernels/reference/moe_topk_gate.py): sqrt(softplus)
// scores in FP64 rounded once, ranking with bias or image bias (ties -> lower id, NaN first),
// fixed selections, slot-by-slot normalisation, shared slots, physical replicas, and the
// counter-hash random rows of force_random.
#include <tile_kernels/host/common.hpp>
#include <tile_kernels/host/moe_topk_gate_args.hpp>

namespace {

using Args = tk::MoeTopkGateArgs;
constexpr int64_t kDuplicateHash = 23333;

inline uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}

// reference random_words: stream 0 draws ids, stream 1 weights.
inline uint32_t random_word(int64_t ep_rank, int64_t token, int64_t slot, int64_t stream) {
    const uint32_t key = mix32(static_cast<uint32_t>(slot * 2 + stream)) ^ static_cast<uint32_t>(ep_rank);
    return mix32(mix32(key) ^ static_cast<uint32_t>(token));
}

inline float sqrt_softplus(float x) {
    const double v = x;
    return static_cast<float>(std::sqrt(v > 20.0 ? v : std::log1p(std::exp(v))));
}

void clear_row(const Args& A, int64_t t, int64_t W) {
    int64_t* idx = A.idx_out + t * W;
    float* w = A.w_out + t * W;
    for (int64_t k = 0; k < W; ++k) { idx[k] = -1; w[k] = 0.0f; }
    if (A.unmapped != nullptr) for (int64_t k = 0; k < A.K; ++k) A.unmapped[t * A.unmapped_stride + k] = -1;
    if (A.scores != nullptr) std::fill(A.scores + t * A.E, A.scores + (t + 1) * A.E, 0.0f);
}

// Distinct ids in [0, num_physical): slot j takes the (word % (num_physical - j))-th free id.
void random_row(const Args& A, int64_t t, int64_t W, int64_t* taken) {
    int64_t* idx = A.idx_out + t * W;
    float* w = A.w_out + t * W;
    for (int64_t j = 0; j < W; ++j) {
        int64_t pick = static_cast<int64_t>(random_word(A.ep_rank, t, j, 0) % static_cast<uint64_t>(A.num_physical - j));
        int64_t at = 0;
        for (; at < j && taken[at] <= pick; ++at) ++pick;     // taken is ascending
        for (int64_t i = j; i > at; --i) taken[i] = taken[i - 1];
        taken[at] = pick;
        idx[j] = pick;
        w[j] = static_cast<float>((random_word(A.ep_rank, t, j, 1) >> 8) + 1) * 0x1p-24f;
    }
}

void route(const Args& A, int64_t t, float* s, float* kval, int64_t* taken) {
    const int64_t W = A.K + A.S;
    if (A.mask != nullptr && !A.mask[t]) return clear_row(A, t, W);
    if (A.force != nullptr && A.force[t]) {
        clear_row(A, t, W);
        return random_row(A, t, W, taken);
    }
    int64_t* idx = A.idx_out + t * W;
    float* w = A.w_out + t * W;
    const float* l = A.logits + t * A.E;
    for (int64_t e = 0; e < A.E; ++e) s[e] = sqrt_softplus(l[e]);
    if (A.scores != nullptr) std::copy(s, s + A.E, A.scores + t * A.E);
    int64_t* sel = idx;  // the routed selection lands in the first K output slots
    if (A.fix != nullptr && A.fix[t]) {
        for (int64_t k = 0; k < A.K; ++k) sel[k] = A.unmapped[t * A.unmapped_stride + k];
    } else {
        const float* b = (A.image_mask != nullptr && A.image_mask[t]) ? A.image_bias : A.bias;
        int64_t n = 0;
        for (int64_t e = 0; e < A.E; ++e) tk::insert_ranked(kval, sel, n, A.K, b != nullptr ? s[e] + b[e] : s[e], e);
    }
    if (A.unmapped != nullptr) for (int64_t k = 0; k < A.K; ++k) A.unmapped[t * A.unmapped_stride + k] = sel[k];
    float sum = s[sel[0]];
    for (int64_t k = 1; k < A.K; ++k) sum += s[sel[k]];
    sum += 1e-20f;
    for (int64_t k = 0; k < A.K; ++k) w[k] = s[sel[k]] / sum * A.scale;
    for (int64_t j = 0; j < A.S; ++j) { idx[A.K + j] = A.E + j; w[A.K + j] = 1.0f; }
    if (A.phys_map != nullptr) {
        for (int64_t k = 0; k < W; ++k) {
            const int64_t e = idx[k];
            idx[k] = A.phys_map[e * A.map_width + (A.ep_rank + t * kDuplicateHash) % A.logical_count[e]];
        }
    }
}

}  // namespace

DJ_KERNEL(tk_moe_topk_gate, "ptr,i64")
void tk_moe_topk_gate(const tk::MoeTopkGateArgs* args, int64_t threads) {
    const Args A = *args;
    dj::parallel_threads(dj::thread_count(threads, A.T), [&](int64_t th, int64_t nt) {
        std::vector<float> s(A.E), kval(A.K);
        std::vector<int64_t> taken(A.K + A.S);
        const dj::Range rg = dj::split_range(A.T, nt, th);
        for (int64_t t = rg.begin; t < rg.end; ++t) route(A, t, s.data(), kval.data(), taken.data());
    });
}
