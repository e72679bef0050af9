// Combine send: every received token goes back to its source rank as one row per (token, rank)
// (token-major input, or the FP32 sum of its local expanded rows in top-k slot order, rounded to
// BF16 once), or, without multiple reduction, as one row per (token, top-k slot).
//
// Destination of a row of source s: dst_base[s] + index * row_bytes where index is the token's
// slot in this rank's block (i - row_start[s]); without multiple reduction it is t * K + k
// (by_token, the shared-memory layout) or row_first[i] + ordinal of k among the local slots.
//
// Rows of source skip_source (this rank, over shared memory) are not sent: the reduce reads them
// straight from x, which saves a write and a read of 1/R of the data.
#include <deep_ep/host/combine_args.hpp>
#include <deep_ep/host/common.hpp>

#include <vector>

DJ_KERNEL(ep_combine_send, "ptr,i64")
void ep_combine_send(const ep::CombineSendArgs* a, int64_t threads) {
    const uint16_t* x = a->x;
    const int32_t *meta = a->meta, *row_start = a->row_start, *row_first = a->row_first;
    const float* weights = a->weights;
    const int64_t* dst_base = a->dst_base;
    const int64_t x_stride = a->x_stride, H = a->H, R = a->R, K = a->K, M = a->M, expand = a->expand, multi = a->multi,
                  by_token = a->by_token, N = a->N, row_bytes = a->row_bytes, w_off = a->w_off,
                  skip_source = a->skip_source;
    dj::parallel_for(N, threads, [&](int64_t i) {
        int64_t s = 0;
        while (row_start[s + 1] <= i) ++s;
        if (s == skip_source) return;
        const int32_t* m = meta + i * (K + 2);
        const int64_t t = m[0] % M;
        uint8_t* base = reinterpret_cast<uint8_t*>(dst_base[s]);
        if (!expand) {
            uint8_t* out = base + (i - row_start[s]) * row_bytes;
            ep::copy_row(out, reinterpret_cast<const uint8_t*>(x + i * x_stride), H * 2);
            float* w = reinterpret_cast<float*>(out + w_off);
            for (int64_t k = 0; k < K; ++k) w[k] = weights ? weights[i * K + k] : 0.0f;
            return;
        }
        if (!multi) {
            int64_t ordinal = 0;
            for (int64_t k = 0; k < K; ++k) {
                const int32_t row = m[2 + k];
                if (row < 0) continue;
                const int64_t index = by_token ? t * K + k : row_first[i] + ordinal;
                ++ordinal;
                uint8_t* out = base + index * row_bytes;
                ep::copy_row(out, reinterpret_cast<const uint8_t*>(x + row * x_stride), H * 2);
                reinterpret_cast<float*>(out + w_off)[0] = weights ? weights[row] : 0.0f;
            }
            return;
        }
        uint8_t* out = base + (i - row_start[s]) * row_bytes;
        uint16_t* y = reinterpret_cast<uint16_t*>(out);
        float* w = reinterpret_cast<float*>(out + w_off);
        for (int64_t k = 0; k < K; ++k) w[k] = (m[2 + k] >= 0 && weights) ? weights[m[2 + k]] : 0.0f;
        // Sum the local slots in slot order. The first row starts the sum (passed as the "bias"),
        // so a lone row is copied exactly, -0.0 included; no local slot gives zeros.
        const uint16_t* src[64];
        int64_t n = 0;
        for (int64_t k = 0; k < K; ++k)
            if (m[2 + k] >= 0) src[n++] = x + m[2 + k] * x_stride;
        if (n == 0) {
            std::memset(y, 0, H * 2);
            return;
        }
        ep::reduce_rows(y, H, src + 1, nullptr, n - 1, src[0], nullptr, false);
    });
    ep::store_fence();
}
