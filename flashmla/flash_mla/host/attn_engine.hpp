// Attention engine shared by every host kernel (sparse decode and prefill, dense decode, varlen).
//
// One "row" is a set of query vectors sharing one token list: a query token with all its heads (MQA),
// or a chunk of query tokens of one kv head (dense GQA/MHA), so every gathered token is used by all
// of them. A row's tokens are processed in blocks of BT:
//   1. the token source hands over BT bf16 K and V rows (for MLA, V is the first d_v dims of K) and
//      their validity; causal sources also give each query vector its last visible token;
//   2. S^T[t][h] = K[t] . Q[h]  on the shared BF16 micro-kernel (deepjit/host/gemm_bf16.hpp): the K
//      rows are the broadcast operand given by pointers, Q is packed once per row into K-pair panels
//      of 32 heads (8 tokens x 32 heads register tile; the softmax scale is its promote scale);
//   3. online softmax in FP32 and base 2, vectorised across heads;
//   4. O[h][:] = O[h][:] * rescale[h] + P[h][t] V[t][:]  on the same micro-kernel in its rescale mode:
//      P is broadcast as token pairs, V is packed into K-pair panels of 32 dims (8 heads x 32 dims).
// On the brgemm matrix engine (DJ_HAVE_BRGEMM) steps 2 and 4 run on oneDNN's micro-kernel instead,
// one call per product of the block (attn_brgemm.hpp); S comes out unscaled (the softmax scales it),
// and V is packed as its rows arrive in step 1. The softmax and the rest are the same code.
// Threads take (row, KV split) items; when there are fewer rows than threads a row's blocks are split
// and the partial results merged by log-sum-exp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <deepjit/host/convert.hpp>
#include <deepjit/host/gemm_bf16.hpp>
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>

namespace fmla {

// Tokens per block. On brgemm 256: the PV product reads and writes all of O per call, and over 128
// tokens that traffic held it to 0.7x of its rate over 256 (measured on a Xeon with AMX).
#ifdef DJ_HAVE_BRGEMM
constexpr int BT = 256;
#else
constexpr int BT = 128;
#endif
constexpr int TILE_T = 8;        // S tile: tokens (O tile: heads)
constexpr int TILE_H = dj::gemm::NR;  // S tile: heads (O tile: dims); heads are padded to a multiple
constexpr int MAX_DQK = 576;
constexpr int MAX_H = 128;       // query vectors per row
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();

alignas(64) inline const uint16_t kZeroRow[MAX_DQK] = {};
alignas(64) inline const float kOnes[TILE_H] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                                1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

// ---- scratch -----------------------------------------------------------------------------------
struct Buffer {
    void* p = nullptr;
    size_t n = 0;
    ~Buffer() { std::free(p); }
    template <typename T>
    T* get(size_t count) {
        const size_t bytes = (count * sizeof(T) + 63) / 64 * 64;
        if (bytes > n) {
            std::free(p);
            p = std::aligned_alloc(64, bytes);
            n = bytes;
        }
        return static_cast<T*>(p);
    }
};

struct Scratch {
    Buffer qp, s, pp, vp, kb, o, m, l, rescale, limit;
};

inline Scratch& thread_scratch() {
    static thread_local Scratch s;
    return s;
}

}  // namespace fmla
#ifdef DJ_HAVE_BRGEMM
#include <flash_mla/host/attn_brgemm.hpp>   // needs the constants above
#endif
namespace fmla {

// Asks for the cache lines of [p, p + bytes) ahead of use.
DJ_INLINE void prefetch_bytes(const void* p, int64_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off);
}

// ---- vector helpers ----------------------------------------------------------------------------
#if defined(DJ_HAVE_AVX512_BF16)
#define FMLA_VECTOR 1
// 2^x for x <= 0 (Cephes polynomial on [-0.5, 0.5], relative error ~2e-7); x < -126 gives 0.
DJ_INLINE __m512 exp2_ps(__m512 x) {
    // Only a value below -126 flushes to 0; NaN stays NaN (max_ps returns its second operand when
    // one is NaN), as the reference's exp does.
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    x = _mm512_max_ps(_mm512_set1_ps(-126.0f), x);
    const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(p, n));
}
#endif

inline float exp2_scalar(float x) { return x < -126.0f ? 0.0f : std::exp2(x); }

// IEEE max with NaN propagation (torch.max / amax semantics): std::max drops a NaN second operand.
inline float nan_max(float a, float b) { return (a != a || b != b) ? NAN : std::max(a, b); }

// ---- packing into the micro-kernel's K-pair panels (32 columns, 32 words per K-pair) ----------------
// Q: panel h / 32 holds heads h..h+31; word [p][h % 32] = (q[h][2p], q[h][2p+1]), zero for padded heads.
inline void pack_q(uint32_t* qp, const uint16_t* const* qv, int H, int Hp, int dqk) {
    const int np = dqk / 2;
    for (int h = 0; h < Hp; ++h) {
        uint32_t* panel = qp + (int64_t)(h / TILE_H) * TILE_H * np + h % TILE_H;
        for (int p = 0; p < np; ++p) {
            uint32_t w = 0;
            if (h < H) std::memcpy(&w, qv[h] + 2 * p, 4);
            panel[(int64_t)p * TILE_H] = w;
        }
    }
}

// V: panel d / 32 holds dims d..d+31 of the block's tokens; word [j][d % 32] = (V[2j][d], V[2j+1][d]).
// Panels are V_PANEL words apart whatever the block's length.
constexpr int64_t V_PANEL = (int64_t)TILE_H * (BT / 2);
inline void pack_v(uint32_t* vp, const uint16_t* const* vrow, int nt, int dv) {
    for (int j = 0; j < nt / 2; ++j) {
        const uint16_t* a = vrow[2 * j];
        const uint16_t* b = vrow[2 * j + 1];
        for (int d = 0; d < dv; d += 16) {
            uint32_t* dst = vp + (d / TILE_H) * V_PANEL + (int64_t)j * TILE_H + d % TILE_H;
#ifdef FMLA_VECTOR
            const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(a + d)));
            const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(b + d)));
            _mm512_storeu_si512(dst, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
#else
            for (int e = 0; e < 16; ++e) dst[e] = (uint32_t)a[d + e] | ((uint32_t)b[d + e] << 16);
#endif
        }
    }
}

// Causal masking: head h may attend token number tok0 + t only while tok0 + t <= limit[h]; the
// visible logits are multiplied by `scale` (the softmax then takes scale 1: a masked -inf must not
// meet a zero scale).
inline void mask_block(float* s, int nt, int Hp, int64_t tok0, const int32_t* limit, float scale) {
    for (int t = 0; t < nt; ++t) {
        float* row = s + (int64_t)t * Hp;
#ifdef FMLA_VECTOR
        const __m512i pos = _mm512_set1_epi32((int32_t)(tok0 + t));
        const __m512 sc = _mm512_set1_ps(scale);
        for (int h = 0; h < Hp; h += 16) {
            const __mmask16 hide = _mm512_cmplt_epi32_mask(_mm512_loadu_si512(limit + h), pos);
            _mm512_storeu_ps(row + h, _mm512_mask_mov_ps(_mm512_mul_ps(_mm512_loadu_ps(row + h), sc), hide,
                                                         _mm512_set1_ps(NEG_INF)));
        }
#else
        for (int h = 0; h < Hp; ++h) row[h] = limit[h] < tok0 + t ? NEG_INF : row[h] * scale;
#endif
    }
}

// ---- online softmax over one block, across heads --------------------------------------------------
// s: S^T [nt][Hp] logits, times `scale` in base 2 (the brgemm path scales here, saving a pass over
// S; the valid tokens' scaled logits are left in s); valid[t]: token usable. Updates m (running max) and
// l (running sum), writes the per-head rescale of O and P as bf16 token-pair words (P[2j][h], P[2j+1][h])
// in one of two layouts:
//   PairRows  p[j * Hp + h]       the vector micro-kernel's broadcast operand
//   HeadRows  p[h * BT / 2 + j]   brgemm's A operand of the PV product (rows of BT bf16); written from
//                                 registers, it saves a pass over P (the sparse decode ran 3 % faster)
enum class PLayout { PairRows, HeadRows };

#ifdef FMLA_VECTOR
// NC chunks of 16 heads at once, so that S is read along its rows. HeadRows takes one chunk (NC 1), its
// 16 x 16 blocks of words transposed in registers on the way out.
template <int NC, PLayout L>
DJ_INLINE void softmax_heads(float* s, const uint8_t* valid, bool all_valid, int nt, int Hp, __m512 sc,
                             float* m, float* l, float* rescale, uint32_t* pp) {
    // bf16 words of two vectors p0, p1 after cvtne2ps (p0 low) -> 32-bit words (p0[i], p1[i])
    const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                           21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i abs_bits = _mm512_set1_epi32(0x7FFFFFFF);
    // the maxima of A token rows at a time kept apart, so that NC * A chains run side by side (one
    // chunk's single chain of maxima was bound by their latency: a third of the softmax's time)
    constexpr int A = NC < 4 ? 4 / NC : 1;
    __m512 mx[NC][A], m_use[NC], sum[NC];
    __m512i mag[NC][A];   // largest |x| bits: above +inf's means a NaN was seen (max_ps alone drops NaN)
    for (int c = 0; c < NC; ++c)
        for (int a = 0; a < A; ++a) {
            mx[c][a] = _mm512_set1_ps(NEG_INF);
            mag[c][a] = _mm512_setzero_si512();
        }
    const auto take = [&](int t, int a) {
        if (all_valid || valid[t])
            for (int c = 0; c < NC; ++c) {
                // the scaled logit goes back into S: the exponent below subtracts the max from this very
                // value (an FMA of the unscaled one could exceed the max by half an ulp: exp2 > 1, inf)
                float* at = s + (int64_t)t * Hp + 16 * c;
                const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(at), sc);
                _mm512_storeu_ps(at, x);
                mx[c][a] = _mm512_max_ps(mx[c][a], x);
                mag[c][a] = _mm512_max_epu32(mag[c][a], _mm512_and_si512(_mm512_castps_si512(x), abs_bits));
            }
    };
    int t = 0;
    for (; t + A <= nt; t += A)
        for (int a = 0; a < A; ++a) take(t + a, a);
    for (; t < nt; ++t) take(t, 0);
    for (int c = 0; c < NC; ++c)
        for (int a = 1; a < A; ++a) {
            mx[c][0] = _mm512_max_ps(mx[c][0], mx[c][a]);
            mag[c][0] = _mm512_max_epu32(mag[c][0], mag[c][a]);
        }
    for (int c = 0; c < NC; ++c) {
        // the running max propagates NaN like torch.amax
        const __m512 m_old = _mm512_loadu_ps(m + 16 * c);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag[c][0], _mm512_set1_epi32(0x7F800000)) |
                              _mm512_cmp_ps_mask(m_old, m_old, _CMP_UNORD_Q);
        const __m512 m_new = _mm512_mask_mov_ps(_mm512_max_ps(m_old, mx[c][0]), nan, _mm512_set1_ps(NAN));
        const __mmask16 none = _mm512_cmp_ps_mask(m_new, _mm512_set1_ps(NEG_INF), _CMP_EQ_OQ);
        m_use[c] = _mm512_mask_mov_ps(m_new, none, _mm512_setzero_ps());
        _mm512_storeu_ps(m + 16 * c, m_new);
        _mm512_storeu_ps(rescale + 16 * c, exp2_ps(_mm512_sub_ps(m_old, m_use[c])));
        sum[c] = _mm512_setzero_ps();
    }
    // the words of tokens t, t + 1 for chunk c
    const auto pair_words = [&](int t, int c) {
        const float* row = s + (int64_t)t * Hp + 16 * c;
        __m512 p0 = exp2_ps(_mm512_sub_ps(_mm512_loadu_ps(row), m_use[c]));  // invalid tokens: zeroed below
        __m512 p1 = exp2_ps(_mm512_sub_ps(_mm512_loadu_ps(row + Hp), m_use[c]));
        if (!all_valid) {
            if (!valid[t]) p0 = _mm512_setzero_ps();
            if (!valid[t + 1]) p1 = _mm512_setzero_ps();
        }
        sum[c] = _mm512_add_ps(sum[c], _mm512_add_ps(p0, p1));
        return _mm512_permutexvar_epi16(pairs, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
    };
    if constexpr (L == PLayout::PairRows) {
        for (int t = 0; t < nt; t += 2)
            for (int c = 0; c < NC; ++c) _mm512_storeu_si512(pp + (int64_t)(t / 2) * Hp + 16 * c, pair_words(t, c));
    } else {
        static_assert(NC == 1, "HeadRows transposes one chunk of 16 heads");
        for (int j0 = 0; j0 < nt / 2; j0 += 16) {
            __m512i w[16], rows[16];
            const int n = std::min(16, nt / 2 - j0);
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) w[i] = i < n ? pair_words(2 * (j0 + i), 0) : _mm512_setzero_si512();
            dj::gemm::transpose16_words(w, rows);
            for (int h = 0; h < 16; ++h) _mm512_storeu_si512(pp + (int64_t)h * (BT / 2) + j0, rows[h]);
        }
    }
    for (int c = 0; c < NC; ++c)
        _mm512_storeu_ps(l + 16 * c, _mm512_fmadd_ps(_mm512_loadu_ps(l + 16 * c), _mm512_loadu_ps(rescale + 16 * c),
                                                     sum[c]));
}
#endif

template <PLayout L>
void softmax_block(float* s, const uint8_t* valid, int nt, int Hp, float scale, float* m, float* l,
                   float* rescale, uint32_t* pp) {
#ifdef FMLA_VECTOR
    bool all_valid = true;
    for (int t = 0; t < nt; ++t) all_valid &= valid[t] != 0;
    const __m512 sc = _mm512_set1_ps(scale);
    int h = 0;
    if constexpr (L == PLayout::PairRows) {
        for (; h + 64 <= Hp; h += 64)
            softmax_heads<4, L>(s + h, valid, all_valid, nt, Hp, sc, m + h, l + h, rescale + h, pp + h);
        for (; h < Hp; h += 16)
            softmax_heads<1, L>(s + h, valid, all_valid, nt, Hp, sc, m + h, l + h, rescale + h, pp + h);
    } else {
        for (; h < Hp; h += 16)
            softmax_heads<1, L>(s + h, valid, all_valid, nt, Hp, sc, m + h, l + h, rescale + h,
                                pp + (int64_t)h * (BT / 2));
    }
#else
    for (int h = 0; h < Hp; ++h) {
        float mx = NEG_INF;
        for (int t = 0; t < nt; ++t)
            if (valid[t]) {  // scaled in place, as the vector path: exp2 below takes the max from this value
                float& x = s[(int64_t)t * Hp + h];
                x *= scale;
                mx = nan_max(mx, x);
            }
        const float m_new = nan_max(m[h], mx);
        const float m_use = m_new == NEG_INF ? 0.0f : m_new;
        const float r = exp2_scalar(m[h] - m_use);
        float sum = 0.0f;
        for (int t = 0; t < nt; t += 2) {
            const float p0 = valid[t] ? exp2_scalar(s[(int64_t)t * Hp + h] - m_use) : 0.0f;
            const float p1 = valid[t + 1] ? exp2_scalar(s[(int64_t)(t + 1) * Hp + h] - m_use) : 0.0f;
            sum += p0 + p1;
            const int64_t at = L == PLayout::PairRows ? (int64_t)(t / 2) * Hp + h : (int64_t)h * (BT / 2) + t / 2;
            pp[at] = (uint32_t)dj::f32_to_bf16(p0) | ((uint32_t)dj::f32_to_bf16(p1) << 16);
        }
        m[h] = m_new;
        l[h] = l[h] * r + sum;
        rescale[h] = r;
    }
#endif
}

// ---- problem description ---------------------------------------------------------------------------
// Row stride of O (and of brgemm's packed V) past d_v: rows 2 KiB apart (d_v 512) put a brgemm tile's 16
// rows into 2 of L1's 64 sets; 16 floats more spread them (measured on a Xeon with AMX: the PV product
// at 128 x 512 x 128 ran 15 % faster). The vector micro-kernel path keeps d_v.
#ifdef DJ_HAVE_BRGEMM
constexpr int O_PAD = 16;
#else
constexpr int O_PAD = 0;
#endif

struct Shape {
    int H, Hp, dqk, dv;
    float scale_log2;   // softmax scale * log2(e)
    int ldo() const { return dv + O_PAD; }
};

// Where one query vector's results go; max_logits may be null.
struct OutPtr {
    uint16_t* out;
    float* lse;
    float* max_logits;
};

// Writes out / lse / max_logits of a row's `nvec` query vectors from the final state (base-2 m,
// sum l, unnormalised o); a vector with no valid token gets out 0, lse +inf, max_logits -inf.
template <typename Source>
void finalize_row(const Shape& sh, const Source& src, int64_t row, int nvec, const float* o, const float* m,
                  const float* l, const float* sink) {
    for (int h = 0; h < nvec; ++h) {
        const OutPtr ro = src.out(row, h);
        uint16_t* dst = ro.out;
        // A NaN logit makes m NaN and a +inf one l NaN (inf - inf): neither row is empty; the first
        // gives NaN everywhere, the second NaN out and lse = max = +inf, as the reference.
        const bool empty = m[h] == NEG_INF || l[h] == 0.0f;
        if (empty) {
            std::memset(dst, 0, sizeof(uint16_t) * sh.dv);
            *ro.lse = std::numeric_limits<float>::infinity();
            if (ro.max_logits) *ro.max_logits = NEG_INF;
            continue;
        }
        float denom = l[h];
        if (sink) denom += std::exp2(sink[h] * LOG2E - m[h]);
        const float inv = 1.0f / denom;
        const float* src = o + (int64_t)h * sh.ldo();
#ifdef FMLA_VECTOR
        for (int d = 0; d < sh.dv; d += 16)
            _mm256_storeu_si256((__m256i*)(dst + d), dj::f32x16_to_bf16(_mm512_mul_ps(_mm512_loadu_ps(src + d),
                                                                                       _mm512_set1_ps(inv))));
#else
        for (int d = 0; d < sh.dv; ++d) dst[d] = dj::f32_to_bf16(src[d] * inv);
#endif
        *ro.lse = m[h] == INFINITY ? INFINITY : (m[h] + std::log2(l[h])) * LN2;
        if (ro.max_logits) *ro.max_logits = m[h] * LN2;
    }
}

// Runs the blocks [blk_begin, blk_end) of one row into (o, m, l), which the caller initialised.
// The Source interface (every method const):
//   int q(row, const uint16_t** qv)      pointers to the row's query vectors (<= Shape::H); their count
//   int64_t num_tokens(row)              length of the row's token list
//   void fill(row, t0, n, krow, vrow, valid, kb)   K and V rows of tokens t0..t0+n-1 (n <= BT) and
//                                        their validity; kb is scratch for BT rows of MAX_DQK bf16
//   void prefetch(row, t0, n)            hint: tokens t0..t0+n-1 come next
//   bool limits(row, int32_t* limit)     per query vector, the last token it may see (causal), or false
//   OutPtr out(row, j)                   where query vector j's results go
template <typename Source>
void run_row_blocks(const Shape& sh, const Source& src, int64_t row, int64_t blk_begin, int64_t blk_end,
                    const uint32_t* qp, const int32_t* limit, Scratch& sc, float* o, float* m, float* l) {
    const int64_t ntok = src.num_tokens(row);
    float* s = sc.s.get<float>((size_t)BT * sh.Hp);
    uint32_t* pp = sc.pp.get<uint32_t>((size_t)(BT / 2) * sh.Hp);    // P words, either layout
    uint32_t* vp = sc.vp.get<uint32_t>((size_t)(BT / 2) * sh.ldo());   // vector path: (dv / TILE_H) panels
    uint16_t* kb = sc.kb.get<uint16_t>((size_t)BT * MAX_DQK);  // decode dequantises at MAX_DQK row stride
    float* rescale = sc.rescale.get<float>(sh.Hp);
    const uint16_t* krow[BT];
    const uint16_t* vrow[BT];
    uint8_t valid[BT];
#ifndef DJ_HAVE_BRGEMM
    const int np = sh.dqk / 2;
    float scale[TILE_T];  // per-token promote scale of the S tile: the softmax scale (base 2)
    std::fill(scale, scale + TILE_T, sh.scale_log2);
#endif
    for (int64_t blk = blk_begin; blk < blk_end; ++blk) {
        const int64_t t0 = blk * BT;
        const int n = (int)std::min<int64_t>(BT, ntok - t0);
        const int nt = (n + TILE_T - 1) / TILE_T * TILE_T;
        const int next_n = blk + 1 < blk_end ? (int)std::min<int64_t>(BT, ntok - t0 - BT) : 0;
#ifdef DJ_HAVE_BRGEMM
        // V is packed 16 tokens at a time right after their K rows arrive, while those are in L1
        // (3 % of the sparse decode against packing the block's rows from L2 later). Gathered tokens
        // are asked for kAhead tokens before they are filled, running on into the next block: asked
        // for a block ahead, between the products, they were partly evicted by the products' operands
        // before use (the decode's dequantisation and the products both ran 10 % faster this way).
        constexpr int kAhead = 32;
        const int64_t stream_end = t0 + n + next_n;
        if (blk == blk_begin) src.prefetch(row, t0, std::min(kAhead, n));
        int packed = 0;
        for (int c = 0; c < n; c += 16) {
            const int k = std::min(16, n - c);
            const int64_t ahead = t0 + c + kAhead;
            if (ahead < stream_end) src.prefetch(row, ahead, (int)std::min<int64_t>(16, stream_end - ahead));
            src.fill(row, t0 + c, k, krow + c, vrow + c, valid + c, kb + (int64_t)c * MAX_DQK);
            const int upto = (c + k) & ~1;
            brg::pack_v(vp + (int64_t)(packed / 2) * sh.ldo(), vrow + packed, upto - packed, sh.dv, sh.ldo());
            packed = upto;
        }
#else
        src.fill(row, t0, n, krow, vrow, valid, kb);
#endif
        for (int t = n; t < nt; ++t) {
            krow[t] = vrow[t] = kZeroRow;
            valid[t] = 0;
        }
#ifdef DJ_HAVE_BRGEMM
        brg::pack_v(vp + (int64_t)(packed / 2) * sh.ldo(), vrow + packed, nt - packed, sh.dv, sh.ldo());
#endif
        bool any = false;
        for (int t = 0; t < n; ++t) any |= valid[t] != 0;
        if (!any) continue;
#ifdef DJ_HAVE_BRGEMM
        if (!brg::qk_block(krow, nt, sh.dqk, sh.Hp, qp, kb, s)) return;
        if (limit) mask_block(s, nt, sh.Hp, t0, limit, sh.scale_log2);
        softmax_block<PLayout::HeadRows>(s, valid, nt, sh.Hp, limit ? 1.0f : sh.scale_log2, m, l, rescale, pp);
        if (!brg::pv_block(pp, nt, sh.H, sh.dv, sh.ldo(), rescale, vp, o)) return;
#else
        // gathered tokens are random accesses: fetch the next block's while this one computes, a few
        // tokens per tile so the outstanding misses stay within what the core can track
        for (int t0l = 0; t0l < nt; t0l += TILE_T) {
            if (t0l < next_n) src.prefetch(row, t0 + BT + t0l, std::min(TILE_T, next_n - t0l));
            for (int h = 0; h < sh.Hp; h += TILE_H)
                dj::gemm::micro_kernel_rows<TILE_T, dj::gemm::Combine::Promote>(
                    np, krow + t0l, qp + (int64_t)h * np, s + (int64_t)t0l * sh.Hp + h, sh.Hp, false, scale, kOnes);
        }
        if (limit) mask_block(s, nt, sh.Hp, t0, limit, 1.0f);
        softmax_block<PLayout::PairRows>(s, valid, nt, sh.Hp, 1.0f, m, l, rescale, pp);  // the S tile applied the scale
        pack_v(vp, vrow, nt, sh.dv);
        for (int d = 0; d < sh.dv; d += TILE_H)
            for (int h = 0; h < sh.Hp; h += TILE_T)
                dj::gemm::micro_kernel_core<TILE_T, dj::gemm::Combine::Rescale>(
                    nt / 2, dj::gemm::StridedRows{pp + h, sh.Hp, 1}, vp + (d / TILE_H) * V_PANEL,
                    o + (int64_t)h * sh.ldo() + d, sh.ldo(), true, rescale + h, nullptr);
#endif
    }
}

inline void init_state(const Shape& sh, float* o, float* m, float* l) {
    std::memset(o, 0, sizeof(float) * (size_t)sh.Hp * sh.ldo());
    for (int h = 0; h < sh.Hp; ++h) {
        m[h] = NEG_INF;
        l[h] = 0.0f;
    }
}

// `max_splits` 1 disables split-KV (batch invariance).
template <typename Source>
void run_attention(const Shape& sh, const Source& src, int64_t rows, const float* sink, int64_t threads,
                   int64_t max_splits) {
    if (rows <= 0) return;
    // Split a row's blocks only when rows cannot keep every thread busy; at least 2 blocks a split.
    int64_t splits = 1;
    if (rows < threads && max_splits > 1) {
        int64_t max_blocks = 0;
        for (int64_t r = 0; r < rows; ++r) max_blocks = std::max(max_blocks, (src.num_tokens(r) + BT - 1) / BT);
        splits = std::min<int64_t>({(threads + rows - 1) / rows, std::max<int64_t>(1, max_blocks / 2), max_splits});
    }
    const size_t o_size = (size_t)sh.Hp * sh.ldo();
    // part_o is the PV product's accumulator: 64-byte aligned like the scratch (brgemm on AMX runs
    // slower on operands that split cache lines)
    Buffer part_o_mem;
    float* part_o = nullptr;
    std::vector<float> part_m, part_l;
    if (splits > 1) {
        part_o = part_o_mem.get<float>((size_t)rows * splits * o_size);
        part_m.resize((size_t)rows * splits * sh.Hp);
        part_l.resize((size_t)rows * splits * sh.Hp);
    }
    dj::parallel_for_dynamic(rows * splits, threads, [&](int64_t item) {
        const int64_t row = item / splits, part = item % splits;
        Scratch& sc = thread_scratch();
        const uint16_t* qv[MAX_H];
        const int nvec = src.q(row, qv);
        uint32_t* qp = sc.qp.get<uint32_t>((size_t)(sh.dqk / 2) * sh.Hp);
#ifdef DJ_HAVE_BRGEMM
        dj::brgemm::Scope brgemm_scope;   // releases the thread's AMX tile state after the item
        if (dj::failed()) return;         // an error was reported: the launch raises
        brg::pack_q(qp, qv, nvec, sh.Hp, sh.dqk);
#else
        pack_q(qp, qv, nvec, sh.Hp, sh.dqk);
#endif
        int32_t* limit = sc.limit.get<int32_t>(sh.Hp);
        if (src.limits(row, limit))
            std::fill(limit + nvec, limit + sh.Hp, std::numeric_limits<int32_t>::max());
        else
            limit = nullptr;
        const int64_t nblk = (src.num_tokens(row) + BT - 1) / BT;
        const dj::Range rg = dj::split_range(nblk, splits, part);
        float *o, *m, *l;
        if (splits > 1) {
            o = part_o + (size_t)item * o_size;
            m = part_m.data() + (size_t)item * sh.Hp;
            l = part_l.data() + (size_t)item * sh.Hp;
        } else {
            o = sc.o.get<float>(o_size);
            m = sc.m.get<float>(sh.Hp);
            l = sc.l.get<float>(sh.Hp);
        }
        init_state(sh, o, m, l);
        run_row_blocks(sh, src, row, rg.begin, rg.end, qp, limit, sc, o, m, l);
        if (splits == 1) finalize_row(sh, src, row, nvec, o, m, l, sink);
    });
    if (splits == 1) return;
    // Merge the splits of each row: rebase every partial on the largest running max.
    dj::parallel_for(rows, threads, [&](int64_t row) {
        Scratch& sc = thread_scratch();
        float* o = sc.o.get<float>(o_size);
        float* m = sc.m.get<float>(sh.Hp);
        float* l = sc.l.get<float>(sh.Hp);
        init_state(sh, o, m, l);
        for (int64_t part = 0; part < splits; ++part)
            for (int h = 0; h < sh.Hp; ++h) m[h] = nan_max(m[h], part_m[(size_t)(row * splits + part) * sh.Hp + h]);
        for (int64_t part = 0; part < splits; ++part) {
            const size_t item = (size_t)(row * splits + part);
            for (int h = 0; h < sh.Hp; ++h) {
                const float pm = part_m[item * sh.Hp + h];
                if (pm == NEG_INF) continue;
                const float w = std::exp2(pm - m[h]);
                l[h] += part_l[item * sh.Hp + h] * w;
                const float* po = part_o + item * o_size + (size_t)h * sh.ldo();
                float* dst = o + (size_t)h * sh.ldo();
                for (int d = 0; d < sh.dv; ++d) dst[d] += po[d] * w;
            }
        }
        const uint16_t* qv[MAX_H];
        finalize_row(sh, src, row, src.q(row, qv), o, m, l, sink);
    });
}

}  // namespace fmla
