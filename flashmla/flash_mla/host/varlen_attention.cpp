// Dense MHA / GQA prefill over packed variable-length sequences (flash_attn_varlen_func forward).
// Row = (sequence, kv head, chunk of query tokens); its query vectors are the chunk's tokens times the
// h_q / h_kv heads of the kv head, all reading the sequence's keys in order. Causal (bottom-right):
// query token r of a sequence with s_q queries and s_k keys sees keys 0 .. s_k - s_q + r.
#include <vector>

#include <flash_mla/host/attn_engine.hpp>
#include <flash_mla/host/launch_args.hpp>

namespace {

struct RowDesc {
    int64_t seq, g, r0;
    int nq;
};

struct VarlenSource {
    const uint16_t *q_base, *k_base, *v_base;
    int64_t q_0, q_1, k_0, k_1, v_0, v_1;
    const int32_t *cu_q, *cu_k;
    int rep, causal, dv;
    int64_t h_q;
    uint16_t* out_base;  // [total_q, h_q, dv]
    float* lse;          // [h_q, total_q]
    int64_t total_q;
    const std::vector<RowDesc>* rows;

    int64_t s_q(const RowDesc& r) const { return cu_q[r.seq + 1] - cu_q[r.seq]; }
    int64_t s_k(const RowDesc& r) const { return cu_k[r.seq + 1] - cu_k[r.seq]; }
    // query vector j of a row: token r0 + j / rep, head g * rep + j % rep
    int q(int64_t row, const uint16_t** qv) const {
        const RowDesc& r = (*rows)[row];
        for (int j = 0; j < r.nq * rep; ++j)
            qv[j] = q_base + (cu_q[r.seq] + r.r0 + j / rep) * q_0 + (r.g * rep + j % rep) * q_1;
        return r.nq * rep;
    }
    bool limits(int64_t row, int32_t* limit) const {
        if (!causal) return false;
        const RowDesc& r = (*rows)[row];
        for (int j = 0; j < r.nq * rep; ++j) limit[j] = (int32_t)(s_k(r) - s_q(r) + r.r0 + j / rep);
        return true;
    }
    int64_t num_tokens(int64_t row) const {
        const RowDesc& r = (*rows)[row];
        const int64_t n = s_k(r);
        return causal ? std::max<int64_t>(0, std::min<int64_t>(n, n - s_q(r) + r.r0 + r.nq)) : n;
    }
    void fill(int64_t row, int64_t t0, int n, const uint16_t** krow, const uint16_t** vrow, uint8_t* valid,
              uint16_t*) const {
        const RowDesc& r = (*rows)[row];
        for (int i = 0; i < n; ++i) {
            const int64_t t = cu_k[r.seq] + t0 + i;
            krow[i] = k_base + t * k_0 + r.g * k_1;
            vrow[i] = v_base + t * v_0 + r.g * v_1;
            valid[i] = 1;
        }
    }
    void prefetch(int64_t, int64_t, int) const {}  // keys are read in order: the hardware prefetches
    fmla::OutPtr out(int64_t row, int j) const {
        const RowDesc& r = (*rows)[row];
        const int64_t token = cu_q[r.seq] + r.r0 + j / rep, head = r.g * rep + j % rep;
        return {out_base + (token * h_q + head) * dv, lse + head * total_q + token, nullptr};
    }
};

}  // namespace

DJ_KERNEL(fmla_varlen_attention, "ptr,i64")
void fmla_varlen_attention(const fmla::VarlenAttentionArgs* a, int64_t threads) {
    const int rep = a->h_q / a->h_kv;
    const int chunk = std::max(1, fmla::MAX_H / rep);
    const int32_t* cu_q = a->cu_seqlens_q;
    std::vector<RowDesc> rows;
    for (int64_t s = 0; s < a->batch; ++s)
        for (int64_t g = 0; g < a->h_kv; ++g)
            for (int64_t r0 = 0; r0 < cu_q[s + 1] - cu_q[s]; r0 += chunk)
                rows.push_back({s, g, r0, (int)std::min<int64_t>(chunk, cu_q[s + 1] - cu_q[s] - r0)});
    const VarlenSource src{a->q, a->k, a->v, a->q_0, a->q_1, a->k_0, a->k_1, a->v_0, a->v_1, cu_q, a->cu_seqlens_k,
                           rep, a->causal, a->d_v, a->h_q, a->out, a->lse, a->total_q, &rows};
    const int H = std::min(fmla::MAX_H, chunk * rep);
    const fmla::Shape sh{H, (H + fmla::TILE_H - 1) / fmla::TILE_H * fmla::TILE_H, a->d_qk, a->d_v,
                         a->softmax_scale * fmla::LOG2E};
    fmla::run_attention(sh, src, (int64_t)rows.size(), nullptr, threads, 64);
}
