// Dense paged MLA decode over a bf16 cache [num_blocks, P, h_kv, d] (V = first d_v dims of K).
// Row = (request, query token, kv head) with the h_q / h_kv query heads of that kv head; it reads
// positions [0, cache_seqlens[b]) through block_table, causal rows stop at s_k - s_q + s (bottom-right).
#include <flash_mla/host/attn_engine.hpp>
#include <flash_mla/host/launch_args.hpp>

namespace {

struct DenseSource {
    const uint16_t* q_base;
    int64_t q_b, q_s, q_h, s_q, h_kv;
    const uint16_t* kc;
    int64_t kc_0, kc_1, kc_2, page;
    const int32_t* block_table;
    int64_t bt_b;
    const int32_t* seqlens;
    int causal;
    uint16_t* out_base;
    float* lse;     // [b, s_q, h_q]
    int H, h_q, dv, dqk;

    int q(int64_t row, const uint16_t** qv) const {
        const int64_t g = row % h_kv, bs = row / h_kv;
        const uint16_t* base = q_base + (bs / s_q) * q_b + (bs % s_q) * q_s + g * H * q_h;
        for (int h = 0; h < H; ++h) qv[h] = base + h * q_h;
        return H;
    }
    bool limits(int64_t, int32_t*) const { return false; }
    int64_t num_tokens(int64_t row) const {
        const int64_t bs = row / h_kv, s_k = seqlens[bs / s_q];
        return causal ? std::max<int64_t>(0, std::min<int64_t>(s_k, s_k - s_q + bs % s_q + 1)) : s_k;
    }
    void fill(int64_t row, int64_t t0, int n, const uint16_t** krow, const uint16_t** vrow, uint8_t* valid,
              uint16_t* kb) const {
        const int64_t g = row % h_kv, bi = row / h_kv / s_q;
        for (int i = 0; i < n; ++i) {
            const int64_t t = t0 + i;
            const int64_t blk = block_table[bi * bt_b + t / page];
            krow[i] = vrow[i] = nan_as_zero(kc + blk * kc_0 + (t % page) * kc_1 + g * kc_2,
                                            kb + (int64_t)i * fmla::MAX_DQK);
            valid[i] = 1;
        }
    }
    // The reference (as upstream's) reads a NaN cache element as 0 (a +-inf stays): a token holding a NaN
    // is read from a sanitised copy in ``copy``, every other one in place.
    const uint16_t* nan_as_zero(const uint16_t* k, uint16_t* copy) const {
        bool nan = false;
        for (int j = 0; j < dqk; ++j) nan |= (k[j] & 0x7FFFu) > 0x7F80u;
        if (!nan) return k;
        for (int j = 0; j < dqk; ++j) copy[j] = (k[j] & 0x7FFFu) > 0x7F80u ? 0 : k[j];
        return copy;
    }
    void prefetch(int64_t, int64_t, int) const {}  // pages are read in order: the hardware prefetches
    fmla::OutPtr out(int64_t row, int h) const {
        const int64_t head = (row / h_kv) * h_q + (row % h_kv) * H + h;
        return {out_base + head * dv, lse + head, nullptr};
    }
};

}  // namespace

DJ_KERNEL(fmla_dense_decode, "ptr,i64")
void fmla_dense_decode(const fmla::DenseDecodeArgs* a, int64_t threads) {
    const int H = a->h_q / a->h_kv;
    const DenseSource src{a->q, a->q_b, a->q_s, a->q_h, a->s_q, a->h_kv, a->k_cache, a->k_cache_0, a->k_cache_1,
                          a->k_cache_2, a->page_block_size, a->block_table, a->block_table_b, a->cache_seqlens,
                          a->causal, a->out, a->lse, H, a->h_q, a->d_v, a->d_qk};
    const fmla::Shape sh{H, (H + fmla::TILE_H - 1) / fmla::TILE_H * fmla::TILE_H, a->d_qk, a->d_v,
                         a->sm_scale * fmla::LOG2E};
    fmla::run_attention(sh, src, a->b * a->s_q * a->h_kv, nullptr, threads, 64);
}
