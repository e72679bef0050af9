// Sparse MLA prefill over a bf16 KV ([s_kv, 1, d_qk], rows read in place, no copy of K).
// Row = query token i; its tokens are indices[i][0][:topk_length[i]], ids outside [0, s_kv) ignored.
#include <flash_mla/host/attn_engine.hpp>
#include <flash_mla/host/launch_args.hpp>

namespace {

struct PrefillSource {
    const uint16_t* q_base;
    int64_t q_s, q_h;
    const uint16_t* kv;
    int64_t kv_s, s_kv;
    const int32_t* indices;
    int64_t idx_s, topk;
    const int32_t* topk_length;
    uint16_t* out_base;
    float *max_logits, *lse;
    int H, dv, dqk;

    int q(int64_t row, const uint16_t** qv) const {
        for (int h = 0; h < H; ++h) qv[h] = q_base + row * q_s + h * q_h;
        return H;
    }
    bool limits(int64_t, int32_t*) const { return false; }
    int64_t num_tokens(int64_t row) const {
        return topk_length ? std::max<int64_t>(0, std::min<int64_t>(topk_length[row], topk)) : topk;
    }
    void fill(int64_t row, int64_t t0, int n, const uint16_t** krow, const uint16_t** vrow, uint8_t* valid,
              uint16_t*) const {
        const int32_t* ids = indices + row * idx_s + t0;
        for (int i = 0; i < n; ++i) {
            const bool ok = ids[i] >= 0 && ids[i] < s_kv;
            krow[i] = vrow[i] = ok ? kv + (int64_t)ids[i] * kv_s : fmla::kZeroRow;
            valid[i] = ok;
        }
    }
    void prefetch(int64_t row, int64_t t0, int n) const {
        const int32_t* ids = indices + row * idx_s + t0;
        for (int i = 0; i < n; ++i)
            if (ids[i] >= 0 && ids[i] < s_kv) fmla::prefetch_bytes(kv + (int64_t)ids[i] * kv_s, 2 * dqk);
    }
    fmla::OutPtr out(int64_t row, int h) const {
        return {out_base + (row * H + h) * dv, lse + row * H + h, max_logits + row * H + h};
    }
};

}  // namespace

DJ_KERNEL(fmla_sparse_prefill, "ptr,i64,i64")
void fmla_sparse_prefill(const fmla::SparsePrefillArgs* a, int64_t threads, int64_t max_splits) {
    const PrefillSource src{a->q, a->q_s, a->q_h, a->kv, a->kv_s, a->s_kv, a->indices, a->indices_s, a->topk,
                            a->topk_length, a->out, a->max_logits, a->lse, a->h_q, a->d_v, a->d_qk};
    const fmla::Shape sh{a->h_q, (a->h_q + fmla::TILE_H - 1) / fmla::TILE_H * fmla::TILE_H, a->d_qk, a->d_v,
                         a->sm_scale * fmla::LOG2E};
    fmla::run_attention(sh, src, a->s_q, a->attn_sink, threads, max_splits);
}
