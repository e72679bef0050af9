// Sparse MLA decode over quantised paged KV caches (main cache + optional extra cache).
// Row = (request, query token); its tokens are the first topk_length[b] entries of indices[b][s]
// followed by the first extra_topk_length[b] entries of extra_indices[b][s]; negative ids are
// invalid (skipped). Python has checked every id < num_blocks * page_block_size.
#include <flash_mla/host/attn_engine.hpp>
#include <flash_mla/host/kv_dequant.hpp>
#include <flash_mla/host/launch_args.hpp>

namespace {

struct Scope {
    fmla::CacheDesc cache;
    const int32_t* indices;
    int64_t idx_b, idx_s;      // strides of indices (last dim contiguous)
    int64_t topk;
    const int32_t* topk_length;  // may be null
    int64_t length(int64_t b) const { return topk_length ? std::min<int64_t>(topk_length[b], topk) : topk; }
};

struct DecodeSource {
    const uint16_t* q_base;
    int64_t q_b, q_s, q_h, s_q;
    uint16_t* out_base;        // [b, s_q, H, dv]
    float* lse;                // [b, s_q, H]
    int H, dv;
    Scope scope[2];
    int nscopes;

    int q(int64_t row, const uint16_t** qv) const {
        const uint16_t* base = q_base + (row / s_q) * q_b + (row % s_q) * q_s;
        for (int h = 0; h < H; ++h) qv[h] = base + h * q_h;
        return H;
    }
    bool limits(int64_t, int32_t*) const { return false; }
    int64_t num_tokens(int64_t row) const {
        int64_t n = 0;
        for (int i = 0; i < nscopes; ++i) n += scope[i].length(row / s_q);
        return n;
    }
    void fill(int64_t row, int64_t t0, int n, const uint16_t** krow, const uint16_t** vrow, uint8_t* valid,
              uint16_t* kb) const {
        const int64_t b = row / s_q, s = row % s_q;
        const int64_t len0 = scope[0].length(b);
        for (int i = 0; i < n; ++i) {
            const int64_t t = t0 + i;
            const Scope& sc = t < len0 ? scope[0] : scope[1];
            const int64_t pos = t < len0 ? t : t - len0;
            const int32_t id = sc.indices[b * sc.idx_b + s * sc.idx_s + pos];
            if (id < 0) {
                krow[i] = vrow[i] = fmla::kZeroRow;
                valid[i] = 0;
                continue;
            }
            uint16_t* dst = kb + (int64_t)i * fmla::MAX_DQK;
            fmla::dequant_token(sc.cache, id, dst);
            krow[i] = vrow[i] = dst;
            valid[i] = 1;
        }
    }
    void prefetch(int64_t row, int64_t t0, int n) const {
        const int64_t b = row / s_q, s = row % s_q;
        const int64_t len0 = scope[0].length(b);
        for (int i = 0; i < n; ++i) {
            const int64_t t = t0 + i;
            const Scope& sc = t < len0 ? scope[0] : scope[1];
            const int32_t id = sc.indices[b * sc.idx_b + s * sc.idx_s + (t < len0 ? t : t - len0)];
            if (id >= 0) fmla::prefetch_token(sc.cache, id);
        }
    }
    fmla::OutPtr out(int64_t row, int h) const { return {out_base + (row * H + h) * dv, lse + row * H + h, nullptr}; }
};


// The engine's view of one KV scope.
Scope make_scope(const fmla::KVScopeArgs& a) {
    return {fmla::make_cache(a.cache, a.block_stride, a.page_block_size, a.format, a.block_split), a.indices,
            a.indices_b, a.indices_s, a.topk, a.topk_length};
}

}  // namespace

DJ_KERNEL(fmla_sparse_decode, "ptr,i64,i64")
void fmla_sparse_decode(const fmla::SparseDecodeArgs* a, int64_t threads, int64_t max_splits) {
    const bool two = a->scope1.cache != nullptr;
    DecodeSource src{a->q, a->q_b, a->q_s, a->q_h, a->s_q, a->out, a->lse, a->h_q, a->d_v, {}, two ? 2 : 1};
    src.scope[0] = make_scope(a->scope0);
    if (two) src.scope[1] = make_scope(a->scope1);
    const fmla::Shape sh{a->h_q, (a->h_q + fmla::TILE_H - 1) / fmla::TILE_H * fmla::TILE_H, a->d_qk, a->d_v,
                         a->sm_scale * fmla::LOG2E};
    fmla::run_attention(sh, src, a->b * a->s_q, a->attn_sink, threads, max_splits);
}
