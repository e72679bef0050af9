// Dispatch send: every token is written once into each destination rank's slot for it.
// dst_base[d] is where this rank's block of slots starts at destination d (a peer's shared
// memory, or this rank's staging buffer for the collective transport).
#include <deep_ep/host/common.hpp>

DJ_KERNEL(ep_dispatch_send, "ptr,i64,i64,ptr,i64,i64,i64,ptr,ptr,i64,i64,i64,i64,ptr,ptr,ptr,i64,i64,i64,i64")
void ep_dispatch_send(const uint8_t* x, int64_t x_row_stride, int64_t x_row_bytes,
                      const uint8_t* sf, int64_t sf_row_stride, int64_t sf_col_stride, int64_t num_packs,
                      const int64_t* topk_idx, const float* weights, int64_t T, int64_t K, int64_t R, int64_t E_local,
                      const int32_t* dst_slot, const int32_t* within, const int64_t* dst_base,
                      int64_t slot_bytes, int64_t sf_off, int64_t meta_off, int64_t threads) {
    dj::parallel_for(T, threads, [&](int64_t t) {
        const int64_t* row = topk_idx + t * K;
        for (int64_t d = 0; d < R; ++d) {
            const int32_t slot = dst_slot[t * R + d];
            if (slot < 0) continue;
            uint8_t* out = reinterpret_cast<uint8_t*>(dst_base[d]) + slot * slot_bytes;
            ep::copy_row(out, x + t * x_row_stride, x_row_bytes);
            if (sf != nullptr) {
                uint32_t* packs = reinterpret_cast<uint32_t*>(out + sf_off);
                for (int64_t p = 0; p < num_packs; ++p)
                    std::memcpy(packs + p, sf + t * sf_row_stride + p * sf_col_stride, 4);
            }
            ep::Meta meta(out + meta_off, K);
            int32_t first = -1;
            for (int64_t k = 0; k < K; ++k) {
                const int64_t e = row[k];
                const bool here = e >= 0 && e / E_local == d;
                if (here && first < 0) first = static_cast<int32_t>(k);
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
