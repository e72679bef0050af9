// Dispatch send: every token is written once into each destination rank that holds one of its
// experts. Two destination modes, chosen per destination:
//  - slot mode: into the token's slot of this rank's block at the destination (dst_base[d]); the
//    destination's receive epilogue later copies slots into its outputs;
//  - direct mode (direct[d][0] != 0): straight into the destination's output tensors, which live
//    in its shared window: row row_base[d] + slot (token-major), or, expanded, row
//    expert_base[d][e] + within-expert index for each local expert e (meta row stays row_base + slot).
// direct[d] = {x, x_row_stride, sf, sf_row_stride, sf_col_stride, topk_idx, weights, meta} (bytes).
#include <deep_ep/host/common.hpp>

namespace {

struct Direct {
    uint8_t* x; int64_t x_stride;
    uint8_t* sf; int64_t sf_rs, sf_cs;
    int64_t* idx; float* w; int32_t* meta;
};

DJ_INLINE Direct direct_of(const int64_t* d) {
    return {reinterpret_cast<uint8_t*>(d[0]), d[1], reinterpret_cast<uint8_t*>(d[2]), d[3], d[4],
            reinterpret_cast<int64_t*>(d[5]), reinterpret_cast<float*>(d[6]), reinterpret_cast<int32_t*>(d[7])};
}

}  // namespace

DJ_KERNEL(ep_dispatch_send,
          "ptr,i64,i64,ptr,i64,i64,i64,ptr,ptr,i64,i64,i64,i64,ptr,ptr,ptr,i64,i64,i64,ptr,ptr,ptr,i64,i64,i64,i64")
void ep_dispatch_send(const uint8_t* x, int64_t x_row_stride, int64_t x_row_bytes,
                      const uint8_t* sf, int64_t sf_row_stride, int64_t sf_col_stride, int64_t num_packs,
                      const int64_t* topk_idx, const float* weights, int64_t T, int64_t K, int64_t R, int64_t E_local,
                      const int32_t* dst_slot, const int32_t* within, const int64_t* dst_base,
                      int64_t slot_bytes, int64_t sf_off, int64_t meta_off,
                      const int64_t* direct, const int32_t* row_base, const int32_t* expert_base,
                      int64_t expand, int64_t M, int64_t rank, int64_t threads) {
    dj::parallel_for(T, threads, [&](int64_t t) {
        const int64_t* row = topk_idx + t * K;
        const uint8_t* x_row = x + t * x_row_stride;
        auto copy_sf = [&](uint8_t* dst, int64_t col_stride) {
            for (int64_t p = 0; p < num_packs; ++p)
                std::memcpy(dst + p * col_stride, sf + t * sf_row_stride + p * sf_col_stride, 4);
        };
        for (int64_t d = 0; d < R; ++d) {
            const int32_t slot = dst_slot[t * R + d];
            if (slot < 0) continue;
            int32_t first = -1;
            for (int64_t k = 0; k < K && first < 0; ++k)
                if (row[k] >= 0 && row[k] / E_local == d) first = static_cast<int32_t>(k);
            if (direct != nullptr && direct[d * 8] != 0) {
                const Direct o = direct_of(direct + d * 8);
                const int64_t mrow = row_base[d] + slot;
                int32_t* meta = o.meta + mrow * (K + 2);
                meta[0] = static_cast<int32_t>(rank * M + t);
                meta[1] = static_cast<int32_t>(rank * K + first);
                for (int64_t k = 0; k < K; ++k) {
                    const int64_t e = row[k];
                    const bool here = e >= 0 && e / E_local == d;
                    const float w = (here && weights != nullptr) ? weights[t * K + k] : 0.0f;
                    if (!expand) {
                        meta[2 + k] = -1;
                        if (o.idx != nullptr) o.idx[mrow * K + k] = here ? e % E_local : -1;
                        if (o.w != nullptr) o.w[mrow * K + k] = w;
                        continue;
                    }
                    if (!here) { meta[2 + k] = -1; continue; }
                    const int64_t r = expert_base[d * E_local + e % E_local] + within[t * K + k];
                    meta[2 + k] = static_cast<int32_t>(r);
                    ep::copy_row(o.x + r * o.x_stride, x_row, x_row_bytes);
                    if (o.sf != nullptr) copy_sf(o.sf + r * o.sf_rs, o.sf_cs);
                    if (o.w != nullptr) o.w[r] = w;
                }
                if (!expand) {
                    ep::copy_row(o.x + mrow * o.x_stride, x_row, x_row_bytes);
                    if (o.sf != nullptr) copy_sf(o.sf + mrow * o.sf_rs, o.sf_cs);
                }
                continue;
            }
            uint8_t* out = reinterpret_cast<uint8_t*>(dst_base[d]) + slot * slot_bytes;
            ep::copy_row(out, x_row, x_row_bytes);
            if (sf != nullptr) copy_sf(out + sf_off, 4);
            ep::Meta meta(out + meta_off, K);
            for (int64_t k = 0; k < K; ++k) {
                const int64_t e = row[k];
                const bool here = e >= 0 && e / E_local == d;
                meta.local_expert[k] = here ? static_cast<int32_t>(e % E_local) : -1;
                meta.within[k] = here ? within[t * K + k] : -1;
                meta.weight[k] = (here && weights != nullptr) ? weights[t * K + k] : 0.0f;
            }
            meta.head[0] = static_cast<int32_t>(t);
            meta.head[1] = first;
        }
    });
    ep::store_fence();
}
