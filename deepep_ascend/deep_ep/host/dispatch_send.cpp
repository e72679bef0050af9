// Dispatch send: every token is written once into each destination rank that holds one of its
// experts. Two destination modes, chosen per destination:
//  - slot mode: into the token's slot of this rank's block at the destination (dst_base[d]); the
//    destination's receive epilogue later copies slots into its outputs;
//  - direct mode (direct[d][0] != 0): straight into the destination's output tensors, which live
//    in its shared window: row row_base[d] + slot (token-major), or, expanded, row
//    expert_base[d][e] + within-expert index for each local expert e (meta row stays row_base + slot).
// direct[d] = {x, x_row_stride, sf, sf_row_stride, sf_col_stride, topk_idx, weights, meta} (bytes).
#include <deep_ep/host/common.hpp>
#include <deep_ep/host/dispatch_args.hpp>

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

DJ_KERNEL(ep_dispatch_send, "ptr,i64")
void ep_dispatch_send(const ep::DispatchSendArgs* args, int64_t threads) {
    const ep::DispatchSendArgs& a = *args;
    const uint8_t *x = a.x, *sf = a.sf;
    const int64_t x_row_stride = a.x_row_stride, x_row_bytes = a.x_row_bytes, sf_row_stride = a.sf_row_stride,
                  sf_col_stride = a.sf_col_stride, num_packs = a.num_packs, T = a.T, K = a.K, R = a.R,
                  E_local = a.E_local, slot_bytes = a.slot_bytes, sf_off = a.sf_off, meta_off = a.meta_off,
                  expand = a.expand, M = a.M, rank = a.rank;
    const int64_t *topk_idx = a.topk_idx, *dst_base = a.dst_base, *direct = a.direct;
    const float* weights = a.weights;
    const int32_t *dst_slot = a.dst_slot, *within = a.within, *row_base = a.row_base, *expert_base = a.expert_base;
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
