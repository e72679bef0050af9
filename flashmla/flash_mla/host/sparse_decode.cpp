// Sparse MLA decode over quantised paged KV caches (main cache + optional extra cache).
// Row = (request, query token); its tokens are the first topk_length[b] entries of indices[b][s]
// followed by the first extra_topk_length[b] entries of extra_indices[b][s]; negative ids are
// invalid (skipped). Python has checked every id < num_blocks * page_block_size.
#include <flash_mla/host/attn_engine.hpp>
#include <flash_mla/host/kv_dequant.hpp>

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

}  // namespace

DJ_KERNEL(fmla_sparse_decode,
          "ptr,ptr,ptr,i64,i64,i64,i64,i64,i32,i32,i32,f32,ptr,"
          "ptr,i64,i64,i32,i32,ptr,i64,i64,i64,ptr,"
          "ptr,i64,i64,i32,i32,ptr,i64,i64,i64,ptr,i64,i64")
void fmla_sparse_decode(uint16_t* out, float* lse, const uint16_t* q, int64_t q_b, int64_t q_s, int64_t q_h,
                        int64_t b, int64_t s_q, int32_t h_q, int32_t d_qk, int32_t d_v, float sm_scale, const float* sink,
                        const void* k0, int64_t k0_stride, int64_t k0_page, int32_t k0_format, int32_t k0_split,
                        const int32_t* idx0, int64_t idx0_b, int64_t idx0_s, int64_t topk0, const int32_t* len0,
                        const void* k1, int64_t k1_stride, int64_t k1_page, int32_t k1_format, int32_t k1_split,
                        const int32_t* idx1, int64_t idx1_b, int64_t idx1_s, int64_t topk1, const int32_t* len1,
                        int64_t threads, int64_t max_splits) {
    DecodeSource src{q, q_b, q_s, q_h, s_q, out, lse, h_q, d_v, {}, k1 ? 2 : 1};
    src.scope[0] = {fmla::make_cache(k0, k0_stride, k0_page, k0_format, k0_split), idx0, idx0_b, idx0_s, topk0, len0};
    if (k1) src.scope[1] = {fmla::make_cache(k1, k1_stride, k1_page, k1_format, k1_split), idx1, idx1_b, idx1_s, topk1, len1};
    const fmla::Shape sh{h_q, (h_q + fmla::TILE_H - 1) / fmla::TILE_H * fmla::TILE_H, d_qk, d_v,
                         sm_scale * fmla::LOG2E};
    fmla::run_attention(sh, src, b * s_q, sink, threads, max_splits);
}
