// The attention engine's two products on the brgemm matrix engine (deepjit/host/brgemm.hpp: oneDNN's
// micro-kernel, AMX tiles where the CPU has them). Included by attn_engine.hpp under DJ_HAVE_BRGEMM.
//   QK: S^T[t][h] = K[t] . Q[h]   A = the block's K rows (BF16, K contiguous), B = Q in VNNI words
//       of the full head width (word [p][h] = (q[h][2p], q[h][2p+1])), C = S^T [nt][Hp] (unscaled).
//       brgemm wants A rows equally spaced: runs of equally spaced rows (a page of a dense cache, a
//       varlen sequence, the decode's dequantised rows) are read in place, any other row is copied
//       into its slot of the kb scratch (gathered prefill tokens, the zero rows of invalid tokens).
//   PV: O[h][:] = O[h][:] * rescale[h] + P[h][:] . V   A = P as BF16 rows [h][t] (the softmax writes
//       them so, PLayout::HeadRows), B = V in VNNI words of the full d_v width (pack_v, called by
//       the engine as the rows are filled), C = O (accumulated after the rescale); O's and packed
//       V's rows are Shape::ldo() = d_v + O_PAD apart.
#pragma once

#include <cstdint>
#include <cstring>

#include <deepjit/host/brgemm.hpp>
#include <deepjit/host/gemm_bf16.hpp>

namespace fmla {
namespace brg {

constexpr int kMinRun = 16;   // equally spaced rows read in place from this many on (fewer: copied)

// Q of one row as VNNI words [dqk / 2][Hp]; zero for heads past H. Transposed 16 x 16 words at a
// time where it can: word by word this was about 5 % of the sparse decode.
inline void pack_q(uint32_t* qw, const uint16_t* const* qv, int H, int Hp, int dqk) {
    const int np = dqk / 2;
    int h0 = 0;
#ifdef DJ_HAVE_AVX512
    for (; h0 + 16 <= H && np % 16 == 0; h0 += 16)
        for (int p0 = 0; p0 < np; p0 += 16) {
            __m512i v[16], t[16];
            for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_si512(qv[h0 + i] + 2 * p0);
            dj::gemm::transpose16_words(v, t);
            for (int c = 0; c < 16; ++c) _mm512_storeu_si512(qw + (int64_t)(p0 + c) * Hp + h0, t[c]);
        }
#endif
    for (int p = 0; p < np; ++p) {
        uint32_t* dst = qw + (int64_t)p * Hp;
        for (int h = h0; h < H; ++h) std::memcpy(dst + h, qv[h] + 2 * p, 4);
        for (int h = H; h < Hp; ++h) dst[h] = 0;
    }
}

// The end of the run of equally spaced rows starting at `i` (< n), and its spacing in elements
// (0 for a lone row).
inline int run_end(const uint16_t* const* rows, int i, int n, int64_t* stride) {
    *stride = 0;
    if (i + 1 >= n) return i + 1;
    *stride = rows[i + 1] - rows[i];
    int j = i + 2;
    while (j < n && rows[j] - rows[j - 1] == *stride) ++j;
    return j;
}

// S^T[t][h] (unscaled: the softmax applies the scale) for the block's nt rows krow[0..nt); kb: BT
// slots of MAX_DQK. False after an error was reported.
inline bool qk_block(const uint16_t* const* krow, int nt, int dqk, int Hp, const uint32_t* qw, uint16_t* kb,
                     float* s) {
    const auto slot = [&](int t) { return kb + (int64_t)t * MAX_DQK; };
    const auto product = [&](int i, int j, const uint16_t* a, int64_t lda) {
        return dj::brgemm::gemm(j - i, Hp, dqk, a, lda, qw, Hp, s + (int64_t)i * Hp, Hp, false);
    };
    // Long runs of equally spaced rows are read in place; every other row goes to its slot, where
    // the decode's dequantised rows already are, and each stretch of slot rows is one call.
    int stretch = -1;   // first row of the current stretch of slot rows
    for (int i = 0; i < nt;) {
        int64_t stride;
        const int j = run_end(krow, i, nt, &stride);
        const bool at_slots = krow[i] == slot(i) && stride == MAX_DQK;
        if (stride >= dqk && j - i >= kMinRun && !at_slots) {
            if (stretch >= 0 && !product(stretch, i, slot(stretch), MAX_DQK)) return false;
            stretch = -1;
            if (!product(i, j, krow[i], stride)) return false;
            i = j;
            continue;
        }
        const int end = at_slots ? j : i + 1;   // a short run: its next row may start a long one
        for (int t = i; t < end; ++t)
            if (krow[t] != slot(t)) std::memcpy(slot(t), krow[t], sizeof(uint16_t) * dqk);
        if (stretch < 0) stretch = i;
        i = end;
    }
    return stretch < 0 || product(stretch, nt, slot(stretch), MAX_DQK);
}

// V of the block as VNNI words [nt / 2][dv] (rows ldv words apart): word [j][d] = (V[2j][d], V[2j+1][d]).
inline void pack_v(uint32_t* vw, const uint16_t* const* vrow, int nt, int dv, int ldv) {
    for (int j = 0; j < nt / 2; ++j) {
        const uint16_t* a = vrow[2 * j];
        const uint16_t* b = vrow[2 * j + 1];
        uint32_t* dst = vw + (int64_t)j * ldv;
        int d = 0;
#ifdef DJ_HAVE_AVX512
        for (; d + 16 <= dv; d += 16) {
            const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(a + d)));
            const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(b + d)));
            _mm512_storeu_si512(dst + d, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
#endif
        for (; d < dv; ++d) dst[d] = (uint32_t)a[d] | ((uint32_t)b[d] << 16);
    }
}

// O[h][:] = O[h][:] * rescale[h] + P[h][:] . V for h < H: P as the softmax's HeadRows words (rows of BT
// bf16), V packed by pack_v into vw (O's rows and packed V's ld apart). False after an error was reported.
inline bool pv_block(const uint32_t* pw, int nt, int H, int dv, int ld, const float* rescale, const uint32_t* vw,
                     float* o) {
    for (int h = 0; h < H; ++h) {
        const float r = rescale[h];
        if (r == 1.0f) continue;   // the running max did not move
        float* row = o + (int64_t)h * ld;
        int d = 0;
#ifdef DJ_HAVE_AVX512
        for (; d + 16 <= dv; d += 16) _mm512_storeu_ps(row + d, _mm512_mul_ps(_mm512_loadu_ps(row + d), _mm512_set1_ps(r)));
#endif
        for (; d < dv; ++d) row[d] *= r;
    }
    return dj::brgemm::gemm(H, dv, nt, reinterpret_cast<const uint16_t*>(pw), BT, vw, ld, o, ld, true);
}

}  // namespace brg
}  // namespace fmla
