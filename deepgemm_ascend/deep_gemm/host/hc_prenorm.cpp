// tf32_hc_prenorm_gemm on the host: d[s, m, n] = sum_k a[m, k] * b[n, k] and
// sqr[s, m] = sum_k a[m, k]^2 over split s's K range, in FP32 (exact products: a is BF16).
//
// N is small (the mHC projection: 24 columns) and K long, so a tile is 3 rows x 8 columns with
// K along the 16 vector lanes: 24 accumulators, 3 BF16 rows widened to FP32 per step, 8 rows of
// b loaded and reused 3 times, and the squared sums of the 3 rows ride along the first column
// group. K runs in blocks of KB so b's block stays in L1 while 16 row tiles pass it; the lane
// partials of a tile wait in per-thread scratch between blocks and are summed once at the end;
// a's rows are prefetched a block ahead. One core, 4096 x 24 x 7168: b re-read from L2 per tile
// 41 GFLOP/s, K blocks 53, plus the prefetch 74, of a 117 GFLOP/s FP32 FMA peak. Row and
// column tails reuse the last valid row (results discarded), K tails are masked loads (zeros).
#include <algorithm>
#include <cstdint>
#include <vector>

#include <deepjit/host/convert.hpp>
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>

#include <deep_gemm/host/hc_prenorm_args.hpp>

namespace {

constexpr int RM = 3;   // rows of a per tile
constexpr int RN = 8;   // columns (rows of b) per tile

struct Problem {
    const uint16_t* a;
    const float* b;
    int64_t m, n, k, lda, ldb, ldd;
};

#ifdef DJ_HAVE_AVX512
constexpr int64_t KB = 256;   // K per block: 24 KB of b at N = 24

DJ_INLINE __m512 widen(const uint16_t* p, __mmask16 mask) {
    const __m256i x = mask == 0xFFFF ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(mask, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
}

// K [k0, k1) of one tile; part = its lane partials (RN accumulators per row, then RM squares),
// loaded when `more` (an earlier block ran) and stored back.
template <bool kSquares>
DJ_INLINE void tile_block(const Problem& P, int64_t m0, int64_t n0, int64_t k0, int64_t k1, bool more, __m512* part) {
    const uint16_t* a[RM];
    const float* b[RN];
    for (int i = 0; i < RM; ++i) a[i] = P.a + std::min(m0 + i, P.m - 1) * P.lda;
    for (int j = 0; j < RN; ++j) b[j] = P.b + std::min(n0 + j, P.n - 1) * P.ldb;
    __m512 acc[RM][RN], sq[RM];
    for (int i = 0; i < RM; ++i) {
        sq[i] = kSquares && more ? part[RM * RN + i] : _mm512_setzero_ps();
        for (int j = 0; j < RN; ++j) acc[i][j] = more ? part[i * RN + j] : _mm512_setzero_ps();
    }
    // Whole 16-value steps with plain loads; the tail (masked loads, zeros past k1) once.
    auto step = [&](int64_t k, __mmask16 mask) {
        __m512 av[RM];
        for (int i = 0; i < RM; ++i) {
            av[i] = widen(a[i] + k, mask);
            if (kSquares) sq[i] = _mm512_fmadd_ps(av[i], av[i], sq[i]);
        }
#pragma GCC unroll 8
        for (int j = 0; j < RN; ++j) {
            const __m512 bv = mask == 0xFFFF ? _mm512_loadu_ps(b[j] + k) : _mm512_maskz_loadu_ps(mask, b[j] + k);
            for (int i = 0; i < RM; ++i) acc[i][j] = _mm512_fmadd_ps(av[i], bv, acc[i][j]);
        }
    };
    int64_t k = k0;
    for (; k + 16 <= k1; k += 16) step(k, 0xFFFF);
    if (k < k1) step(k, static_cast<__mmask16>((1u << (k1 - k)) - 1));
    for (int i = 0; i < RM; ++i) {
        if (kSquares) part[RM * RN + i] = sq[i];
        for (int j = 0; j < RN; ++j) part[i * RN + j] = acc[i][j];
    }
}

// a's RM rows from m0 over K [k0, k1), into L2.
DJ_INLINE void prefetch_rows(const Problem& P, int64_t m0, int64_t k0, int64_t k1) {
    for (int i = 0; i < RM; ++i) {
        const char* row = reinterpret_cast<const char*>(P.a + std::min(m0 + i, P.m - 1) * P.lda + k0);
        for (int64_t off = 0; off < 2 * (k1 - k0); off += 64) _mm_prefetch(row + off, _MM_HINT_T1);
    }
}

// Row tiles [t0, t1) over K [k0, k1) into d / sqr (this split's).
void rows(const Problem& P, int64_t t0, int64_t t1, int64_t k0, int64_t k1, float* d, float* sqr) {
    const int64_t groups = (P.n + RN - 1) / RN, per_tile = groups * RN * RM + RM;
    thread_local std::vector<__m512> scratch;
    if (static_cast<int64_t>(scratch.size()) < (t1 - t0) * per_tile) scratch.resize((t1 - t0) * per_tile);
    for (int64_t kb = k0; kb < k1; kb += KB) {
        const int64_t ke = std::min(k1, kb + KB);
        for (int64_t t = t0; t < t1; ++t) {
            // a streams from DRAM in short per-row runs the hardware prefetcher misses: this
            // tile's next K block is requested while the rest of this block runs.
            // The first block has no earlier one to hide behind: the next tile's is requested.
            if (ke < k1) prefetch_rows(P, t * RM, ke, std::min(k1, ke + KB));
            if (kb == k0 && t + 1 < t1) prefetch_rows(P, (t + 1) * RM, kb, ke);
            __m512* part = scratch.data() + (t - t0) * per_tile;
            for (int64_t g = 0; g < groups; ++g) {
                if (g == 0)
                    tile_block<true>(P, t * RM, 0, kb, ke, kb > k0, part);
                else
                    tile_block<false>(P, t * RM, g * RN, kb, ke, kb > k0, part + g * RN * RM + RM);
            }
        }
    }
    for (int64_t t = t0; t < t1; ++t) {
        const __m512* part = scratch.data() + (t - t0) * per_tile;
        for (int i = 0; i < RM && t * RM + i < P.m; ++i) {
            const int64_t row = t * RM + i;
            sqr[row] = k1 > k0 ? _mm512_reduce_add_ps(part[RM * RN + i]) : 0.0f;
            for (int64_t g = 0; g < groups; ++g)
                for (int j = 0; j < RN && g * RN + j < P.n; ++j) {
                    const __m512* acc = g == 0 ? part : part + g * RN * RM + RM;
                    d[row * P.ldd + g * RN + j] = k1 > k0 ? _mm512_reduce_add_ps(acc[i * RN + j]) : 0.0f;
                }
        }
    }
}
#else
void rows(const Problem& P, int64_t t0, int64_t t1, int64_t k0, int64_t k1, float* d, float* sqr) {
    for (int64_t i = t0 * RM; i < std::min(t1 * RM, P.m); ++i) {
        float sq = 0.0f;
        for (int64_t k = k0; k < k1; ++k) {
            const float x = dj::bf16_to_f32(P.a[i * P.lda + k]);
            sq += x * x;
        }
        sqr[i] = sq;
        for (int64_t j = 0; j < P.n; ++j) {
            float s = 0.0f;
            for (int64_t k = k0; k < k1; ++k) s += dj::bf16_to_f32(P.a[i * P.lda + k]) * P.b[j * P.ldb + k];
            d[i * P.ldd + j] = s;
        }
    }
}
#endif

}  // namespace

// splits = 0: one output (d [M, N], sqr [M]); otherwise split-K partials d [splits, M, N] and
// sqr [splits, M], split s covering K [s * chunk, min(K, (s + 1) * chunk)).
DJ_KERNEL(dg_hc_prenorm, "ptr,i64")
void dg_hc_prenorm(const dg::HcPrenormArgs* args, int64_t threads) {
    const dg::HcPrenormArgs A = *args;
    const uint16_t* a = A.a;
    const float* b = A.b;
    float *d = A.d, *sqr = A.sqr;
    const int64_t m = A.m, n = A.n, k = A.k, lda = A.lda, ldb = A.ldb, ldd = A.ldd, d_split = A.d_split,
                  splits = A.splits;
    const int64_t parts = std::max<int64_t>(splits, 1), chunk = (k + parts - 1) / parts;
    const Problem P{a, b, m, n, k, lda, ldb, ldd};
    const int64_t row_tiles = (m + RM - 1) / RM;
    // Items of 16 row tiles: enough to balance two threads, few enough that handing them out is free.
    constexpr int64_t kTiles = 16;
    const int64_t blocks = (row_tiles + kTiles - 1) / kTiles;
    dj::parallel_for_dynamic(parts * blocks, threads, [&](int64_t item) {
        const int64_t s = item / blocks, t0 = (item % blocks) * kTiles;
        const int64_t k0 = std::min(k, s * chunk), k1 = std::min(k, (s + 1) * chunk);
        float* ds = d + s * d_split;
        float* ss = sqr + s * m;
        rows(P, t0, std::min(row_tiles, t0 + kTiles), k0, k1, ds, ss);
    });
}
