// Combine reduce epilogue on the source rank: out[t] = bf16(bias0 + bias1 + partials), in FP32,
// starting from the biases and adding the rows for token t in top-k slot order (with multiple
// reduction, one row per destination rank, added at that rank's last slot, as upstream's reference
// and epilogue do). combined weights pick, for each slot, the value held by the rank owning that
// expert. V1 (sum_weights): the ranks' rows and weights are summed in ascending rank order, as
// upstream's V1 intranode combine does.
//
// slot_weights (optional, without multiple reduction only) scales each slot's row first: the V1
// low-latency combine applies the router weights here.
//
// Row of (t, rank j) with multiple reduction: block_base[j] + index[t * R + j] * row_bytes.
// Row of (t, slot k) without it: block_base[j] + (by_token ? t * K + k : index[t * K + k]) * row_bytes.
//
// local_x (optional, shared memory): this rank's own rows were not sent and are read from the
// combine input instead. The received row of token t from this rank is
// i = local_row0 + local_slot[t * R + rank]; with multiple reduction it is local_x row i (weights:
// local_w row i, K floats), without it slot k's expanded row local_meta[i, 2 + k] (weight:
// local_w[that row]). A null local_w reads as zero weights.
#include <deep_ep/host/combine_args.hpp>
#include <deep_ep/host/common.hpp>

DJ_KERNEL(ep_combine_reduce, "ptr,i64")
void ep_combine_reduce(const ep::CombineReduceArgs* a, int64_t threads) {
    uint16_t* out = a->out;
    const uint16_t *bias0 = a->bias0, *bias1 = a->bias1, *local_x = a->local_x;
    const int64_t* topk_idx = a->topk_idx;
    const int64_t* block_base = a->block_base;
    const int32_t *index = a->index, *local_slot = a->local_slot, *local_meta = a->local_meta;
    float* out_weights = a->out_weights;
    const float *slot_weights = a->slot_weights, *local_w = a->local_w;
    const int64_t bias0_stride = a->bias0_stride, bias1_stride = a->bias1_stride, T = a->T, K = a->K, R = a->R,
                  E_local = a->E_local, H = a->H, multi = a->multi, by_token = a->by_token, row_bytes = a->row_bytes,
                  sum_weights = a->sum_weights, local_stride = a->local_stride, local_row0 = a->local_row0,
                  rank = a->rank;
    const int64_t w_off = (H * 2 + 63) / 64 * 64;
    // Outputs far larger than the caches bypass them (saves reading every line before writing it).
    const bool stream = T * H * 2 >= (int64_t{8} << 20) && (reinterpret_cast<uintptr_t>(out) & 63) == 0 && H % 32 == 0;
    dj::parallel_for(T, threads, [&](int64_t t) {
        const int64_t* idx = topk_idx + t * K;
        // Resolve each slot's source row once.
        const uint8_t* rows[64];
        const float* wrow[64];  // the K weights travelling with rows[k]
        bool add[64];
        for (int64_t k = 0; k < K; ++k) {
            rows[k] = nullptr;
            wrow[k] = nullptr;
            add[k] = false;
            const int64_t e = idx[k];
            if (e < 0) continue;
            const int64_t j = e / E_local;
            const uint8_t* base = reinterpret_cast<const uint8_t*>(block_base[j]);
            if (multi) {
                if (local_x != nullptr && j == rank) {
                    const int64_t i = local_row0 + local_slot[t * R + j];
                    rows[k] = reinterpret_cast<const uint8_t*>(local_x + i * local_stride);
                    wrow[k] = local_w != nullptr ? local_w + i * K : nullptr;
                } else {
                    rows[k] = base + index[t * R + j] * row_bytes;
                    wrow[k] = reinterpret_cast<const float*>(rows[k] + w_off);
                }
                bool later = false;
                for (int64_t q = k + 1; q < K; ++q) later |= idx[q] >= 0 && idx[q] / E_local == j;
                add[k] = !later;
            } else {
                if (local_x != nullptr && j == rank) {
                    const int64_t row = local_meta[(local_row0 + local_slot[t * R + j]) * (K + 2) + 2 + k];
                    rows[k] = reinterpret_cast<const uint8_t*>(local_x + row * local_stride);
                    wrow[k] = local_w != nullptr ? local_w + row : nullptr;
                } else {
                    rows[k] = base + (by_token ? t * K + k : index[t * K + k]) * row_bytes;
                    wrow[k] = reinterpret_cast<const float*>(rows[k] + w_off);
                }
                add[k] = true;
            }
        }
        // The slots whose rows are added, in slot order (V1 with multiple reduction: by rank).
        int64_t order[64];
        int64_t n = 0;
        for (int64_t k = 0; k < K; ++k)
            if (add[k]) order[n++] = k;
        if (sum_weights && multi)
            std::sort(order, order + n, [&](int64_t a, int64_t b) { return idx[a] / E_local < idx[b] / E_local; });
        // ... with their slot weights (V1 low-latency style) if any.
        const uint16_t* src[64];
        float w[64];
        for (int64_t i = 0; i < n; ++i) {
            src[i] = reinterpret_cast<const uint16_t*>(rows[order[i]]);
            w[i] = slot_weights != nullptr ? slot_weights[t * K + order[i]] : 1.0f;
        }
        ep::reduce_rows(out + t * H, H, src, slot_weights != nullptr ? w : nullptr, n,
                        bias0 != nullptr ? bias0 + t * bias0_stride : nullptr,
                        bias1 != nullptr ? bias1 + t * bias1_stride : nullptr, stream);
        if (out_weights == nullptr) return;
        for (int64_t k = 0; k < K; ++k) {
            float w = 0.0f;
            if (wrow[k] != nullptr) {
                if (!multi) {
                    w = wrow[k][0];
                } else if (!sum_weights) {
                    w = wrow[k][k];
                }
            }
            if (sum_weights && multi) {
                // V1: the sum over every rank that received the token, in rank order.
                for (int64_t i = 0; i < n; ++i)
                    if (wrow[order[i]] != nullptr) w += wrow[order[i]][k];
            }
            out_weights[t * K + k] = w;
        }
    });
    if (stream) ep::store_fence();
}
