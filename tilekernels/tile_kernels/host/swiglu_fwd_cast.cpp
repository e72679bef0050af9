// SwiGLU forward fused with the per-token E4M3 cast: y = silu(a) * b (* routing weight) for
// x = [a | b], with optional clamping (and counting of clamped values), then one scale per
// `npc` channels of y. With `y_out` set, y is written as BF16 instead and nothing is cast.
#include <tile_kernels/host/quant.hpp>
#include <tile_kernels/host/swiglu_args.hpp>

namespace {

using Args = tk::SwigluFwdCastArgs;

// y for one row into `y`; returns the clamp counts of the row.
void swiglu_row(const Args& A, int64_t p, float* y, int64_t cnt[3]) {
    const char* row = static_cast<const char*>(A.x) + p * 2 * A.H * (A.dt == tk::kInBF16 ? 2 : 4);
    const bool weighted = A.p2tt != nullptr;
    const float w = weighted ? (A.p2tt[p] >= 0 ? A.weights[A.p2tt[p]] : 0.0f) : 1.0f;
    const float c = A.clamp;
    int64_t h = 0;
#ifdef DJ_HAVE_AVX512
    for (; h + 16 <= A.H; h += 16) {
        __m512 a = tk::load16(row, A.dt, h), b = tk::load16(row, A.dt, A.H + h);
        if (A.has_clamp) {
            const __m512 vc = _mm512_set1_ps(c), vnc = _mm512_set1_ps(-c);
            cnt[0] += __builtin_popcount(_mm512_cmp_ps_mask(a, vc, _CMP_GT_OQ));
            cnt[1] += __builtin_popcount(_mm512_cmp_ps_mask(b, vc, _CMP_GT_OQ));
            cnt[2] += __builtin_popcount(_mm512_cmp_ps_mask(b, vnc, _CMP_LT_OQ));
            a = _mm512_min_ps(a, vc);
            b = _mm512_min_ps(_mm512_max_ps(b, vnc), vc);
        }
        const __m512 e = tk::exp_f32x16(_mm512_sub_ps(_mm512_setzero_ps(), a));
        __m512 v = _mm512_mul_ps(_mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), b);
        if (weighted) v = _mm512_mul_ps(v, _mm512_set1_ps(w));
        _mm512_storeu_ps(y + h, v);
    }
#endif
    for (; h < A.H; ++h) {
        float a = tk::load1(row, A.dt, h), b = tk::load1(row, A.dt, A.H + h);
        if (A.has_clamp) {
            cnt[0] += a > c; cnt[1] += b > c; cnt[2] += b < -c;
            a = std::min(a, c);
            b = std::min(std::max(b, -c), c);
        }
        float v = a / (1.0f + tk::exp_f32(-a)) * b;
        if (weighted) v = v * w;
        y[h] = v;
    }
}

void count_row(const Args& A, int64_t p, int64_t cnt[3]) {
    const char* row = static_cast<const char*>(A.x) + p * 2 * A.H * (A.dt == tk::kInBF16 ? 2 : 4);
    for (int64_t h = 0; h < A.H; ++h) {
        const float a = tk::load1(row, A.dt, h), b = tk::load1(row, A.dt, A.H + h);
        cnt[0] += a > A.clamp; cnt[1] += b > A.clamp; cnt[2] += b < -A.clamp;
    }
}

void cast_row(const Args& A, int64_t p, const float* y) {
    const float fmax = 448.0f;
    for (int64_t j = 0; j < A.H; j += A.npc) {
        const int64_t je = std::min(A.H, j + A.npc);
        float amax = 0.0f;
        int64_t jj = j;
#ifdef DJ_HAVE_AVX512
        // the lanes' max drops NaN: it is tracked apart, so a NaN in the block makes amax NaN (torch's amax)
        __m512 m = _mm512_setzero_ps();
        __mmask16 nan = 0;
        for (; jj + 16 <= je; jj += 16) {
            const __m512 v = tk::abs16(_mm512_loadu_ps(y + jj));
            nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            m = _mm512_max_ps(m, v);
        }
        amax = nan ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(m);
#endif
        for (; jj < je; ++jj) amax = tk::amax_step(amax, std::fabs(y[jj]));
        const tk::Scale s = tk::block_scale(amax, A.clamp_min, fmax, A.round_sf);
        tk::store_sf(A.sf, A.packed, A.sm, A.sk, p, j / A.npc, s.sf);
        uint8_t* out = A.q + p * A.H;
        jj = j;
#ifdef DJ_HAVE_AVX512
        for (; jj + 16 <= je; jj += 16) tk::store_e4m3x16(out + jj, _mm512_mul_ps(_mm512_loadu_ps(y + jj), _mm512_set1_ps(s.inv)));
#endif
        for (; jj < je; ++jj) out[jj] = tk::enc_e4m3(y[jj] * s.inv);
    }
}

}  // namespace

DJ_KERNEL(tk_swiglu_fwd_cast, "ptr,i64")
void tk_swiglu_fwd_cast(const tk::SwigluFwdCastArgs* args, int64_t threads) {
    const Args& A = *args;
    const int64_t P = A.P, H = A.H;
    const int32_t* p2e = A.p2e;
    int64_t* counts = A.counts;
    uint16_t* y_out = A.y_out;
    std::atomic<int64_t> total[3] = {0, 0, 0};
    dj::parallel_threads(dj::thread_count(threads, P), [&](int64_t t, int64_t nt) {
        std::vector<float> y(H);
        int64_t cnt[3] = {0, 0, 0};
        const dj::Range rg = dj::split_range(P, nt, t);
        for (int64_t p = rg.begin; p < rg.end; ++p) {
            if (p2e != nullptr && p2e[p] < 0) {
                // Padding rows produce no output but their clamped values still count, as in the reference.
                if (counts != nullptr) count_row(A, p, cnt);
                continue;
            }
            swiglu_row(A, p, y.data(), cnt);
            if (y_out != nullptr) {
                for (int64_t h = 0; h < H; ++h) y_out[p * H + h] = dj::f32_to_bf16(y[h]);
            } else {
                cast_row(A, p, y.data());
            }
        }
        for (int i = 0; i < 3; ++i) total[i] += cnt[i];
    });
    if (counts != nullptr)
        for (int i = 0; i < 3; ++i) counts[i] += total[i];
}
