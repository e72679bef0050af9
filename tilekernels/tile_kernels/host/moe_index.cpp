// Small MoE index operations on (T, K) int64 tensors, one kernel with an op code:
//   0 group_count: out_i32[g] = #(idx == g)            (per-thread histograms, summed)
//   1 aux_fi:      out_f32[e] = count[e] * E / (T * aux_k)
//   2 mask_indices_by_tp: out_i64 = EP/TP-local id or -1 (a = experts per rank, b = tp rank, c = tp ranks)
//   3 inplace_unique: later repeats of a value within a row become -1 (in place)
#include <tile_kernels/host/common.hpp>

namespace {

void histogram(const int64_t* idx, int64_t n, int64_t groups, int64_t threads, int64_t* counts) {
    const int nt = dj::thread_count(threads, (n + 4095) / 4096);
    std::vector<int64_t> local(static_cast<size_t>(nt) * groups, 0);
    dj::parallel_threads(nt, [&](int64_t t, int64_t parts) {
        const dj::Range rg = dj::split_range(n, parts, t);
        int64_t* c = local.data() + t * groups;
        for (int64_t i = rg.begin; i < rg.end; ++i)
            if (idx[i] >= 0) ++c[idx[i]];
    });
    for (int64_t g = 0; g < groups; ++g) {
        int64_t s = 0;
        for (int t = 0; t < nt; ++t) s += local[static_cast<size_t>(t) * groups + g];
        counts[g] = s;
    }
}

}  // namespace

DJ_KERNEL(tk_moe_index, "i32,ptr,ptr,i64,i64,i64,i64,i64,i64,i64")
void tk_moe_index(int32_t op, void* out, int64_t* idx, int64_t T, int64_t K, int64_t groups, int64_t a, int64_t b,
                  int64_t c, int64_t threads) {
    const int64_t n = T * K;
    if (op == 0 || op == 1) {
        std::vector<int64_t> counts(groups);
        histogram(idx, n, groups, threads, counts.data());
        for (int64_t g = 0; g < groups; ++g) {
            if (op == 0) static_cast<int32_t*>(out)[g] = static_cast<int32_t>(counts[g]);
            // FP32 c * E, then / (T * aux_k): the reference's two roundings
            else static_cast<float*>(out)[g] = static_cast<float>(counts[g]) * static_cast<float>(groups) /
                                              static_cast<float>(T * a);
        }
        return;
    }
    if (op == 2) {
        const int64_t per_gpu = a, tp_rank = b, tp = c, per_dp = tp * per_gpu;
        int64_t* o = static_cast<int64_t*>(out);
        dj::parallel_for((n + 4095) / 4096, threads, [&](int64_t blk) {
            for (int64_t i = blk * 4096; i < std::min(n, blk * 4096 + 4096); ++i) {
                const int64_t v = idx[i];
                if (v < 0 || (v / per_gpu) % tp != tp_rank) { o[i] = -1; continue; }
                int64_t w = v - tp_rank * per_gpu;
                const int64_t d = w >= 0 ? w / per_dp : -((-w + per_dp - 1) / per_dp);  // floor division
                w -= d * (per_dp - per_gpu);
                o[i] = w < 0 ? -1 : w;
            }
        });
        return;
    }
    dj::parallel_for((T + 255) / 256, threads, [&](int64_t blk) {
        for (int64_t t = blk * 256; t < std::min(T, blk * 256 + 256); ++t) {
            int64_t* row = idx + t * K;
            for (int64_t j = 1; j < K; ++j) {
                if (row[j] < 0) continue;
                for (int64_t i = 0; i < j; ++i)
                    if (row[i] == row[j]) { row[j] = -1; break; }
            }
        }
    });
}
