// Small MoE index operations on (T, K) int64 tensors, one kernel with an op code:
//   0 group_count: out_i32[g] = #(idx == g)            (per-thread histograms, summed)
//   1 aux_fi:      out_f32[e] = count[e] * E / (T * aux_k)
//   2 mask_indices_by_tp: out_i64 = EP/TP-local id or -1 (groups = expert count, a = experts per
//                         rank, b = tp rank, c = tp ranks)
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
        // The masked id of v in [0, groups) (groups = n, the expert count) from a table built once
        // per call: three integer divisions per element cost more than the rest of the op.
        const int64_t per_gpu = a, tp_rank = b, tp = c, per_dp = tp * per_gpu;
        auto masked = [&](int64_t v) -> int64_t {
            if (v < 0 || (v / per_gpu) % tp != tp_rank) return -1;
            int64_t w = v - tp_rank * per_gpu;
            const int64_t d = w >= 0 ? w / per_dp : -((-w + per_dp - 1) / per_dp);  // floor division
            w -= d * (per_dp - per_gpu);
            return w < 0 ? -1 : w;
        };
        std::vector<int64_t> table(groups);
        for (int64_t v = 0; v < groups; ++v) table[v] = masked(v);
        int64_t* o = static_cast<int64_t*>(out);
        dj::parallel_for((n + 4095) / 4096, n >= (1 << 17) ? threads : 1, [&](int64_t blk) {
            for (int64_t i = blk * 4096; i < std::min(n, blk * 4096 + 4096); ++i) {
                const int64_t v = idx[i];
                o[i] = static_cast<uint64_t>(v) < static_cast<uint64_t>(groups) ? table[v] : masked(v);
            }
        });
        return;
    }
    dj::parallel_for((T + 255) / 256, T * K >= (1 << 17) ? threads : 1, [&](int64_t blk) {
        for (int64_t t = blk * 256; t < std::min(T, blk * 256 + 256); ++t) {
            int64_t* row = idx + t * K;
#if defined(DJ_HAVE_AVX512) && defined(__AVX512CD__)
            if (K <= 8) {  // a lane equal to any earlier lane has a non-zero conflict mask
                const __mmask8 m = static_cast<__mmask8>((1u << K) - 1);
                const __m512i v = _mm512_maskz_loadu_epi64(m, row);
                const __mmask8 dup = _mm512_mask_test_epi64_mask(m, _mm512_maskz_conflict_epi64(m, v), _mm512_set1_epi64(-1));
                _mm512_mask_storeu_epi64(row, dup, _mm512_set1_epi64(-1));
                continue;
            }
#endif
            for (int64_t j = 1; j < K; ++j) {
                if (row[j] < 0) continue;
                for (int64_t i = 0; i < j; ++i)
                    if (row[i] == row[j]) { row[j] = -1; break; }
            }
        }
    });
}
