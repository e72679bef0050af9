// Dispatch receive epilogue: copy the slots that arrived from every source rank into the
// caller-visible outputs, token-major (one row per received token) or expanded (one row per
// (token, local expert), grouped by expert at expert_base[s, e] + within-expert index).
// Rows of source s occupy [row_start[s], row_start[s+1]) in source-token order.
#include <deep_ep/host/common.hpp>
#include <deep_ep/host/dispatch_args.hpp>

DJ_KERNEL(ep_dispatch_recv, "ptr,i64")
void ep_dispatch_recv(const ep::DispatchRecvArgs* args, int64_t threads) {
    const ep::DispatchRecvArgs& a = *args;
    const int64_t R = a.R, K = a.K, M = a.M, E_local = a.E_local, x_row_bytes = a.x_row_bytes,
                  out_x_stride = a.out_x_stride, out_sf_row_stride = a.out_sf_row_stride,
                  out_sf_col_stride = a.out_sf_col_stride, num_packs = a.num_packs, expand = a.expand,
                  slot_bytes = a.slot_bytes, sf_off = a.sf_off, meta_off = a.meta_off;
    const int64_t* src_base = a.src_base;
    const int32_t *row_start = a.row_start, *expert_base = a.expert_base;
    uint8_t *out_x = a.out_x, *out_sf = a.out_sf;
    int64_t* out_topk_idx = a.out_topk_idx;
    float* out_weights = a.out_weights;
    int32_t* out_meta = a.out_meta;
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
