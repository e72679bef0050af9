// Dispatch receive epilogue: copy the slots that arrived from every source rank into the
// caller-visible outputs, token-major (one row per received token) or expanded (one row per
// (token, local expert), grouped by expert at expert_base[s, e] + within-expert index).
// Rows of source s occupy [row_start[s], row_start[s+1]) in source-token order.
#include <deep_ep/host/common.hpp>

DJ_KERNEL(ep_dispatch_recv,
          "ptr,ptr,i64,i64,i64,i64,i64,ptr,i64,ptr,i64,i64,i64,ptr,ptr,ptr,i64,ptr,i64,i64,i64,i64")
void ep_dispatch_recv(const int64_t* src_base, const int32_t* row_start, int64_t R, int64_t K, int64_t M,
                      int64_t E_local, int64_t x_row_bytes, uint8_t* out_x, int64_t out_x_stride,
                      uint8_t* out_sf, int64_t out_sf_row_stride, int64_t out_sf_col_stride, int64_t num_packs,
                      int64_t* out_topk_idx, float* out_weights, int32_t* out_meta, int64_t expand,
                      const int32_t* expert_base, int64_t slot_bytes, int64_t sf_off, int64_t meta_off,
                      int64_t threads) {
    const int64_t N = row_start[R];
    dj::parallel_for(N, threads, [&](int64_t i) {
        int64_t s = 0;
        while (row_start[s + 1] <= i) ++s;
        const uint8_t* slot = reinterpret_cast<const uint8_t*>(src_base[s]) + (i - row_start[s]) * slot_bytes;
        ep::Meta meta(const_cast<uint8_t*>(slot) + meta_off, K);
        int32_t* out_row_meta = out_meta + i * (K + 2);
        out_row_meta[0] = static_cast<int32_t>(s * M + meta.head[0]);
        out_row_meta[1] = static_cast<int32_t>(s * K + meta.head[1]);
        const uint32_t* packs = reinterpret_cast<const uint32_t*>(slot + sf_off);
        auto write_row = [&](int64_t row) {
            ep::copy_row(out_x + row * out_x_stride, slot, x_row_bytes);
            if (out_sf != nullptr)
                for (int64_t p = 0; p < num_packs; ++p)
                    std::memcpy(out_sf + row * out_sf_row_stride + p * out_sf_col_stride, packs + p, 4);
        };
        if (!expand) {
            write_row(i);
            for (int64_t k = 0; k < K; ++k) {
                out_row_meta[2 + k] = -1;
                if (out_topk_idx != nullptr) out_topk_idx[i * K + k] = meta.local_expert[k];
                if (out_weights != nullptr) out_weights[i * K + k] = meta.weight[k];
            }
            return;
        }
        for (int64_t k = 0; k < K; ++k) {
            const int32_t e = meta.local_expert[k];
            if (e < 0) { out_row_meta[2 + k] = -1; continue; }
            const int64_t row = expert_base[s * E_local + e] + meta.within[k];
            out_row_meta[2 + k] = static_cast<int32_t>(row);
            write_row(row);
            if (out_weights != nullptr) out_weights[row] = meta.weight[k];
        }
    });
    ep::store_fence();
}
