// One packed GEMM engine behind every deep_gemm GEMM family on the host.
//
// A problem is a list of jobs; a job is one plain product D[rows] (+)= A[rows, k-range] . B[g]^T
// with its own group, row offsets and K range, so dense, M-grouped (contiguous, psum, masked) and
// K-grouped GEMMs differ only in how the job list is built (gemm.cpp). Operands of any element
// type (BF16, FP8 E4M3, FP4 E2M1) and any major are converted to BF16 while packing into the
// K-pair panels of <deepjit/host/gemm_bf16.hpp>; the micro-kernel never sees a stride.
//
// Scales: an operand whose scale factors are all powers of two is "folded" (each element is
// multiplied by its scale during conversion, exactly); otherwise its scale is "promoted": the
// micro-kernel accumulates one scale block of K in registers and adds it to the FP32 tile
// multiplied by sa[row] * sb[col], as upstream's block-scaled kernels do.
//
// Schedule: jobs with many rows pack A and B once up front (parallel), then share out MC x NC
// output tiles dynamically; jobs with few rows (decode, masked MoE) prepare A once and convert
// each B panel on the fly into L1-sized scratch, so B is read once, at its storage width, and
// converted once. Few-row jobs are split over N in 64-column tasks (one group still fills every
// thread). A multiple of 32 rows: B's rows are the broadcast side against 32-wide A panels
// (rows_task). Any other count (an MoE decode expert holds ~1-30 rows): A stays plain BF16 rows and
// each B panel meets tiles of exactly the job's height (panel_task + rows_micro), so no lanes are
// spent on padding rows; this path is bound by converting B (FP8 through byte tables).
//
// On the brgemm matrix engine (DJ_HAVE_BRGEMM, deepjit/host/brgemm.hpp) every job whose A is K-major
// keeps A as plain BF16 rows and runs oneDNN's micro-kernel (AMX tiles where the CPU has them); an
// MN-major A (K-grouped GEMMs' [K, M] operands) is transposed into such rows once (mn_rows_to_bf16),
// and an MN-major B's K rows are interleaved into the VNNI panels (pack_mnmajor).
// Many rows (group_task): each task packs 256 columns of B into its own L2-resident scratch and runs
// all rows of its range against them, 32 rows x 512 K per call (A's chunk in L1, B from L2, the
// packed B never goes to memory); where K spans several packings, A's plain copy is one row-major
// array per packing, so a block of rows reads one contiguous run of it in each pass.
// Few rows (panel_task): one 32-wide B panel and all rows per call.
// Few rows (4 to 32) of E4M3 B (tr_task): the transposed product D^T = B . A^T, B's rows converted
// to plain BF16 rows in L1 (no transpose into panels) as brgemm's A, A^T prepacked once as its B;
// a task runs a span of 64-column blocks, prefetching B across them, and applies B's scales to
// each scale block's product (folded ones too: one conversion table for all blocks).
// Promoted scales: each K block's product lands in an FP32 scratch tile, then C += P * sa[i] * sb[j]
// with the same FMA as the vdpbf16ps micro-kernel (group_task: 128 columns per call, all K blocks,
// then the next 128, so the product and its accumulators stay in L1).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <deepjit/host/gemm_bf16.hpp>
#include <deepjit/host/gemm_convert.hpp>
#ifdef DJ_HAVE_BRGEMM
#include <deepjit/host/brgemm.hpp>
#endif

namespace dg {

using namespace dj::gemm;

constexpr int64_t MC = 128;         // rows of an output tile in the packed-up-front schedule
constexpr int64_t NC = 256;         // columns of an output tile (8 panels)
constexpr int64_t SMALL_M = 96;     // jobs up to this many rows convert B on the fly
constexpr int64_t KC_FOLDED = 256;  // K per packed block when no scale is promoted
constexpr int64_t KC_BRGEMM = 2048; // the same on brgemm (a task packs 256 columns x 2048 K = 1 MiB at a time)
constexpr int64_t kPanelK = 256;  // K per B panel converted on the fly (few-row jobs)
constexpr int64_t kTrRows = 32;   // B rows per brgemm call in tr_task (divides 64)
constexpr int64_t kTrK = 512;     // K per call there when no scale is promoted or folded
constexpr int64_t kTrMaxBlocks = 16;  // 64-column blocks per tr_task at most
constexpr int64_t kTrMaxRows = 32; // rows up to which tr_task runs (measured: 64 rows no quicker than panel_task)
constexpr int64_t kTrNear = 8;    // tr_task requests into L1 the line this many rows ahead of the one it converts
constexpr int64_t kSerialPack = 1 << 18;  // elements packed on the calling thread alone
// brgemm schedule for many rows (group_task): a task packs kGroupCols columns of B into its own
// scratch, at most kGroupBytes of them at a time (half of a 2 MiB L2), and runs every A row of its
// range against them in calls of kGroupRows rows x kGroupK of K, so that the call's A chunk (32 KiB)
// stays in L1 across the 256 columns while B streams from L2.
constexpr int64_t kGroupCols = 256;
constexpr int64_t kGroupBytes = int64_t(1) << 20;
constexpr int64_t kGroupRows = 32;
constexpr int64_t kGroupK = 512;
constexpr int64_t kPromoteCols = 128;   // columns per call when scales are promoted (measured 1.13-1.15x over 256)
constexpr int64_t kGroupMaxRows = 8192;   // rows of a task's range: its FP32 accumulators when K spans several packings

struct Operand {
    const uint8_t* ptr = nullptr;
    int type = kBF16;
    int64_t sg = 0, smn = 0, sk = 0;   // element strides (FP4: byte strides along its packed layout)
    bool packed_mn = false;            // FP4 packed along MN instead of K
    const float* sf = nullptr;
    int64_t sfg = 0, sfmn = 0, sfk = 0, gmn = 1, gk = 1;
    bool fold = false;

    bool promoted() const { return sf != nullptr && !fold; }
    bool k_major() const { return type == kE2M1 ? !packed_mn && sk == 1 : sk == 1; }
    bool mn_major() const { return type == kE2M1 ? packed_mn && smn == 1 : smn == 1; }
    float scale(int64_t g, int64_t mn, int64_t kb) const { return sf[g * sfg + (mn / gmn) * sfmn + kb * sfk]; }

    // One element as BF16 (the fallback for layouts that are neither K- nor MN-major).
    uint16_t element(int64_t g, int64_t mn, int64_t k) const {
        if (type == kBF16) {
            uint16_t v;
            std::memcpy(&v, ptr + 2 * (g * sg + mn * smn + k * sk), 2);
            return v;
        }
        if (type == kE4M3) return e4m3_to_bf16(ptr[g * sg + mn * smn + k * sk]);
        const int64_t byte = packed_mn ? g * sg + (mn / 2) * smn + k * sk : g * sg + mn * smn + (k / 2) * sk;
        const int shift = static_cast<int>(((packed_mn ? mn : k) & 1) * 4);
        return e2m1_to_bf16(static_cast<uint8_t>((ptr[byte] >> shift) & 0xF));
    }
    // Start of a K-contiguous run at (g, mn, k) / an MN-contiguous run at (g, k, mn), for to_bf16.
    const uint8_t* row_base(int64_t g, int64_t mn) const {
        const int64_t elem = type == kBF16 ? 2 : 1;
        return ptr + elem * (g * sg + mn * smn);
    }
    const uint8_t* col_base(int64_t g, int64_t k) const {
        const int64_t elem = type == kBF16 ? 2 : 1;
        return ptr + elem * (g * sg + k * sk);
    }
};

struct Job {
    int64_t a_g, a_m0, b_g, d_g, d_m0, m, k0, klen, kb0;
};

struct Output {
    uint8_t* d = nullptr;
    int d_type = 0;                    // 0 BF16, 1 FP32
    int64_t dsg = 0, dsm = 0;
    const uint8_t* c = nullptr;
    int c_type = 1;
    int64_t csg = 0, csm = 0;
    float alpha = 1.0f;
};

// Rows [mn0, mn0 + mv) x K [k0, k0 + kv) of an MN-major operand, unscaled, as BF16 rows `ld` apart:
// a transpose (brgemm's A as plain rows from K-grouped GEMMs' MN-major operands). 32 rows x 32 K at
// a time in registers: K rows 2p, 2p + 1 interleaved into words (as pack_mnmajor does), then a 16 x 16
// word transpose leaves each row's 32 K values in one register. FP4 needs mn0 even (runs start on a byte).
inline void mn_rows_to_bf16(const Operand& op, int64_t g, int64_t mn0, int64_t mv, int64_t k0, int64_t kv,
                            uint16_t* out, int64_t ld) {
#ifdef DJ_HAVE_AVX512
    const ConvertTables& t = tables();
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                        39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    alignas(64) uint16_t fp4[32];
    for (int64_t r0 = 0; r0 < mv; r0 += 32) {
        const int64_t rv = std::min<int64_t>(32, mv - r0);
        const __mmask32 rm = rv >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << rv) - 1);
        // K row k's 32 values of these rows as BF16 (zero past K)
        const auto load = [&](int64_t k) -> __m512i {
            if (k >= kv) return _mm512_setzero_si512();
            const uint8_t* col = op.col_base(g, k0 + k);
            if (op.type == kBF16) return _mm512_maskz_loadu_epi16(rm, reinterpret_cast<const uint16_t*>(col) + mn0 + r0);
            if (op.type == kE4M3) return e4m3x32_to_bf16(_mm256_maskz_loadu_epi8(rm, col + mn0 + r0), t);
            to_bf16(col, op.type, mn0 + r0, rv, fp4);
            return _mm512_maskz_loadu_epi16(rm, fp4);
        };
        for (int64_t c = 0; c < kv; c += 32) {
            const int64_t cv = std::min<int64_t>(32, kv - c);
            const __mmask32 cm = cv >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << cv) - 1);
            __m512i v0[16], v1[16], tr[16];
            for (int p = 0; p < 16; ++p) {
                const __m512i x = load(c + 2 * p), y = load(c + 2 * p + 1);
                v0[p] = _mm512_permutex2var_epi16(x, lo, y);   // word r: K pair p of row r (rows 0-15)
                v1[p] = _mm512_permutex2var_epi16(x, hi, y);   // rows 16-31
            }
            transpose16_words(v0, tr);
            for (int64_t r = 0; r < std::min<int64_t>(16, rv); ++r)
                _mm512_mask_storeu_epi16(out + (r0 + r) * ld + c, cm, tr[r]);
            transpose16_words(v1, tr);
            for (int64_t r = 16; r < rv; ++r) _mm512_mask_storeu_epi16(out + (r0 + r) * ld + c, cm, tr[r - 16]);
        }
    }
#else
    uint16_t col[32];
    for (int64_t r0 = 0; r0 < mv; r0 += 32) {
        const int64_t rv = std::min<int64_t>(32, mv - r0);
        for (int64_t k = 0; k < kv; ++k) {
            to_bf16(op.col_base(g, k0 + k), op.type, mn0 + r0, rv, col);
            for (int64_t r = 0; r < rv; ++r) out[(r0 + r) * ld + k] = col[r];
        }
    }
#endif
}

// Rows [mn0, mn0 + mv) x K [k0, k0 + kv) of group g as BF16 rows `ld` apart, nrows of them
// (rows past mv and K past kv up to kcp zero). k_first and kb0 locate the scale blocks of folded
// operands: element k uses block kb0 + (k - k_first) / gk. Rows are K-contiguous in the operand,
// transposed from an MN-major one (mn_rows_to_bf16) or gathered element by element (other layouts).
inline void rows_to_bf16(const Operand& op, int64_t g, int64_t mn0, int64_t mv, int64_t nrows, int64_t k0,
                         int64_t kv, int64_t kcp, int64_t k_first, int64_t kb0, uint16_t* out, int64_t ld) {
    // Scale segments are the same for every row and scale rows advance by counting, so the
    // divisions happen once per call (they cost more than converting a short row).
    const int64_t kb_first = op.fold ? (k0 - k_first) / op.gk : 0;
    const int64_t first_end = op.fold ? std::min(kv, k_first + (kb_first + 1) * op.gk - k0) : kv;
    int64_t sf_row = op.fold ? mn0 / op.gmn : 0, sf_rem = op.fold ? mn0 % op.gmn : 0;
    const bool transposed = !op.k_major() && op.mn_major() && (op.type != kE2M1 || mn0 % 2 == 0);
    if (transposed) mn_rows_to_bf16(op, g, mn0, mv, k0, kv, out, ld);
    for (int64_t r = 0; r < nrows; ++r) {
        uint16_t* t = out + r * ld;
        int64_t done = 0;
        if (r < mv) {
            const int64_t mn = mn0 + r;
            done = kv;
            if (!op.k_major() && !transposed)
                for (int64_t k = 0; k < kv; ++k) t[k] = op.element(g, mn, k0 + k);
            if (!op.fold) {
                if (op.k_major()) to_bf16(op.row_base(g, mn), op.type, k0, kv, t);
            } else {
                const float* sf = op.sf + g * op.sfg + sf_row * op.sfmn + (kb0 + kb_first) * op.sfk;
                for (int64_t k = 0, end = first_end; k < kv; k = end, end = std::min(kv, end + op.gk), sf += op.sfk) {
                    const int e = scale_exponent(*sf);
                    if (op.k_major())   // the scale applied inside the conversion
                        to_bf16_scaled(op.row_base(g, mn), op.type, k0 + k, end - k, e, t + k);
                    else
                        add_exponent(t + k, end - k, e);
                }
                if (++sf_rem == op.gmn) sf_rem = 0, ++sf_row;
            }
        }
        if (kcp > done) std::memset(t + done, 0, (kcp - done) * 2);
    }
}

#ifdef DJ_HAVE_AVX512
// pack_block for K-major BF16 / E4M3 operands straight from their rows: 16 rows x 32 K values at
// a time are converted in registers (a folded scale applied per row) and transposed into the
// panels, without the BF16 staging copy (rows_to_bf16 + pack_kmajor) that costs as much again.
// Same bits as that path. Returns false where it does not apply (FP4, other majors, scale blocks
// that do not start on 32-value chunks).
inline bool pack_direct(const Operand& op, int64_t g, int64_t mn0, int64_t mv, int64_t nrows, int W, int64_t k0,
                        int64_t kv, int64_t kcp, int64_t k_first, int64_t kb0, uint32_t* out) {
    if (!op.k_major() || op.type == kE2M1 || nrows % 16 != 0 || kcp % 32 != 0 || !(W == 8 || W % 16 == 0)) return false;
    if (op.fold && (op.gk % 32 != 0 || (k0 - k_first) % 32 != 0)) return false;
    const int64_t kp = kcp / 2;
    const ConvertTables& t = tables();
    const bool fp8 = op.type == kE4M3;
    const __m512i nonsign = _mm512_set1_epi16(0x7FFF);
    // Per row of the current scale block: FP8 exponent bias and subnormal table, or the BF16
    // exponent increment.
    __m512i bias[16], small[16];
    for (int i = 0; i < 16; ++i) bias[i] = fp8 ? _mm512_set1_epi16(120 << 7) : _mm512_setzero_si512(), small[i] = t.e4m3_small;
    for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
        const int64_t rv = std::clamp<int64_t>(mv - r0, 0, 16);
        const uint8_t* row[16];
        for (int64_t i = 0; i < rv; ++i) row[i] = op.row_base(g, mn0 + r0 + i) + (fp8 ? k0 : 2 * k0);
        // The next group's rows are requested now: converting this group hides their latency.
        const int64_t next_rows = std::clamp<int64_t>(mv - r0 - 16, 0, 16), run = fp8 ? kv : 2 * kv;
        for (int64_t i = 0; i < next_rows; ++i) {
            const char* nrow = reinterpret_cast<const char*>(op.row_base(g, mn0 + r0 + 16 + i)) + (fp8 ? k0 : 2 * k0);
            for (int64_t b = 0; b < run; b += 64) _mm_prefetch(nrow + b, _MM_HINT_T0);
        }
        int64_t cur_kb = -1;
        for (int64_t c = 0; c < kcp; c += 32) {
            const int64_t n = std::clamp<int64_t>(kv - c, 0, 32);
            const __mmask32 m = n >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << n) - 1);
            if (op.fold && rv > 0) {
                const int64_t kb = kb0 + (k0 + c - k_first) / op.gk;
                if (kb != cur_kb) {
                    for (int64_t i = 0; i < rv; ++i) {
                        const int e = scale_exponent(op.scale(g, mn0 + r0 + i, kb));
                        bias[i] = fp8 ? _mm512_set1_epi16(static_cast<short>((120 + e) << 7))
                                      : _mm512_set1_epi16(static_cast<short>(e * 128));
                        if (fp8) small[i] = scaled_small(t, e);
                    }
                    cur_kb = kb;
                }
            }
            __m512i v[16], tr[16];
            for (int i = 0; i < 16; ++i) {
                if (i >= rv) {
                    v[i] = _mm512_setzero_si512();
                } else if (fp8) {
                    v[i] = e4m3x32_to_bf16(_mm256_maskz_loadu_epi8(m, row[i] + c), bias[i], small[i]);
                } else {
                    const __m512i x = _mm512_maskz_loadu_epi16(m, row[i] + 2 * c);
                    v[i] = op.fold ? _mm512_mask_add_epi16(x, _mm512_test_epi16_mask(x, nonsign), x, bias[i]) : x;
                }
            }
            transpose16_words(v, tr);
            for (int q = 0; q < 16; ++q) store_rows16(out, W, kp, r0, c / 2 + q, tr[q]);
        }
    }
    return true;
}
#endif

#if defined(DJ_HAVE_AVX512) && defined(__AVX512VBMI__)
// E4M3 -> BF16 for one scale exponent as two 128-entry byte tables (the result's high and low
// byte, indexed by the value without its sign): 64 values in 5 instructions instead of 20. The
// tables are built by the vector conversion itself, so the bits are the same.
struct E4M3Tables {
    __m512i hi0, hi1, lo0, lo1;
    int e = 1 << 30;

    void build(const ConvertTables& t, int exponent) {
        const __m512i bias = _mm512_set1_epi16(static_cast<short>((120 + exponent) << 7));
        const __m512i small = scaled_small(t, exponent);
        const __m256i first = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
                                               20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
        __m256i lo[4], hi[4];
        for (int i = 0; i < 4; ++i) {
            const __m512i w = e4m3x32_to_bf16(_mm256_add_epi8(first, _mm256_set1_epi8(static_cast<char>(32 * i))),
                                              bias, small);
            lo[i] = _mm512_cvtepi16_epi8(w);
            hi[i] = _mm512_cvtepi16_epi8(_mm512_srli_epi16(w, 8));
        }
        lo0 = _mm512_inserti64x4(_mm512_castsi256_si512(lo[0]), lo[1], 1);
        lo1 = _mm512_inserti64x4(_mm512_castsi256_si512(lo[2]), lo[3], 1);
        hi0 = _mm512_inserti64x4(_mm512_castsi256_si512(hi[0]), hi[1], 1);
        hi1 = _mm512_inserti64x4(_mm512_castsi256_si512(hi[2]), hi[3], 1);
        e = exponent;
    }
    // 64 E4M3 bytes -> BF16 words; w0 holds elements 0-7, 16-23, 32-39, 48-55 (K-pairs 0-3, 8-11,
    // 16-19, 24-27), w1 the others (pairs 4-7, ...): the byte interleave works within 128-bit lanes.
    DJ_INLINE void convert(__m512i x, __m512i& w0, __m512i& w1) const {
        const __m512i lo = _mm512_permutex2var_epi8(lo0, x, lo1);
        const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, x, hi1), x,
                                                     _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
        w0 = _mm512_unpacklo_epi8(lo, hi);
        w1 = _mm512_unpackhi_epi8(lo, hi);
    }
};

// pack_direct for K-major E4M3 through E4M3Tables, 16 rows x 64 K at a time. Returns false where
// it does not apply (scale blocks not aligned to 64 values, or 16 rows of one group whose
// folded scales differ: per-row scales are pack_direct's case).
inline bool pack_fp8_tables(const Operand& op, int64_t g, int64_t mn0, int64_t mv, int64_t nrows, int W, int64_t k0,
                            int64_t kv, int64_t kcp, int64_t k_first, int64_t kb0, uint32_t* out) {
    if (op.type != kE4M3 || !op.k_major() || nrows % 16 != 0 || kcp % 32 != 0 || !(W == 8 || W % 16 == 0)) return false;
    if (op.fold && (op.gk % 64 != 0 || (k0 - k_first) % 64 != 0 || op.gmn < 16)) return false;
    const int64_t kp = kcp / 2;
    const ConvertTables& t = tables();
    E4M3Tables tb;
    for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
        const int64_t rv = std::clamp<int64_t>(mv - r0, 0, 16);
        if (op.fold && rv > 0 && (mn0 + r0) / op.gmn != (mn0 + r0 + rv - 1) / op.gmn) return false;
    }
    for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
        const int64_t rv = std::clamp<int64_t>(mv - r0, 0, 16);
        const uint8_t* row[16];
        for (int64_t i = 0; i < rv; ++i) row[i] = op.row_base(g, mn0 + r0 + i) + k0;
        const int64_t next_rows = std::clamp<int64_t>(mv - r0 - 16, 0, 16);
        for (int64_t i = 0; i < next_rows; ++i) {
            const char* nrow = reinterpret_cast<const char*>(op.row_base(g, mn0 + r0 + 16 + i)) + k0;
            for (int64_t b = 0; b < kv; b += 64) _mm_prefetch(nrow + b, _MM_HINT_T0);
        }
        for (int64_t c = 0; c < kcp; c += 64) {
            const int64_t n = std::clamp<int64_t>(kv - c, 0, 64);
            const __mmask64 m = n >= 64 ? ~__mmask64(0) : ((__mmask64(1) << n) - 1);
            const int e = op.fold && rv > 0 ? scale_exponent(op.scale(g, mn0 + r0, kb0 + (k0 + c - k_first) / op.gk)) : 0;
            if (e != tb.e) tb.build(t, e);
            __m512i v0[16], v1[16], tr[16];
            for (int i = 0; i < 16; ++i) {
                if (i < rv)
                    tb.convert(_mm512_maskz_loadu_epi8(m, row[i] + c), v0[i], v1[i]);
                else
                    v0[i] = v1[i] = _mm512_setzero_si512();
            }
            const int64_t pairs = std::min<int64_t>(32, kp - c / 2);
            transpose16_words(v0, tr);
            for (int q = 0; q < 16; ++q) {
                const int64_t pq = (q / 4) * 8 + q % 4;
                if (pq < pairs) store_rows16(out, W, kp, r0, c / 2 + pq, tr[q]);
            }
            transpose16_words(v1, tr);
            for (int q = 0; q < 16; ++q) {
                const int64_t pq = (q / 4) * 8 + 4 + q % 4;
                if (pq < pairs) store_rows16(out, W, kp, r0, c / 2 + pq, tr[q]);
            }
        }
    }
    return true;
}

#endif

// Packs rows [mn0, mn0 + mv) x K [k0, k0 + kv) of group g into nrows / W panels (nrows a
// multiple of 32, rows past mv and K past kv zero) with kcp = kv rounded up to 32; k_first and
// kb0 as for rows_to_bf16.
inline void pack_block(const Operand& op, int64_t g, int64_t mn0, int64_t mv, int64_t nrows, int W, int64_t k0,
                       int64_t kv, int64_t kcp, int64_t k_first, int64_t kb0, uint16_t* tmp, int16_t* exps,
                       uint32_t* out) {
#if defined(DJ_HAVE_AVX512) && defined(__AVX512VBMI__)
    if (pack_fp8_tables(op, g, mn0, mv, nrows, W, k0, kv, kcp, k_first, kb0, out)) return;
#endif
#ifdef DJ_HAVE_AVX512
    if (pack_direct(op, g, mn0, mv, nrows, W, k0, kv, kcp, k_first, kb0, out)) return;
#endif
    if (op.k_major() || !op.mn_major()) {
        const int64_t ld = kcp + 2;     // keeps rows from aliasing the same cache sets
        rows_to_bf16(op, g, mn0, mv, nrows, k0, kv, kcp, k_first, kb0, tmp, ld);
        pack_kmajor(tmp, ld, nrows, W, kcp, out);
        return;
    }
    if (op.type == kBF16 && !op.fold && mv == nrows && kv == kcp) {   // whole block of plain BF16: read in place
        pack_mnmajor(reinterpret_cast<const uint16_t*>(op.col_base(g, k0)) + mn0, op.sk, nrows, W, kcp, out);
        return;
    }
    const int64_t ld = nrows + 32;
    int64_t exps_kb = -1;
    for (int64_t k = 0; k < kcp; ++k) {
        uint16_t* t = tmp + k * ld;
        if (k >= kv) {
            std::memset(t, 0, nrows * 2);
            continue;
        }
        const int64_t kk = k0 + k;
        to_bf16(op.col_base(g, kk), op.type, mn0, mv, t);
        std::memset(t + mv, 0, (nrows - mv) * 2);
        if (op.fold) {
            const int64_t kb = kb0 + (kk - k_first) / op.gk;
            if (kb != exps_kb) {
                for (int64_t r = 0; r < mv; ++r) exps[r] = static_cast<int16_t>(scale_exponent(op.scale(g, mn0 + r, kb)));
                exps_kb = kb;
            }
            add_exponents(t, exps, mv);
        }
    }
    pack_mnmajor(tmp, ld, nrows, W, kcp, out);
}

// Per-row (or per-column) promoted scales for one K block; 1 where the operand is not promoted.
// Scale rows advance by counting: a division per row costs more than the micro-kernel's epilogue.
inline void block_scales(const Operand& op, int64_t g, int64_t mn0, int64_t mv, int64_t n, int64_t kb, float* out) {
    int64_t r = 0;
    if (op.promoted()) {
        const float* sf = op.sf + g * op.sfg + (mn0 / op.gmn) * op.sfmn + kb * op.sfk;
        for (int64_t rem = mn0 % op.gmn; r < mv; ++r) {
            out[r] = *sf;
            if (++rem == op.gmn) rem = 0, sf += op.sfmn;
        }
    }
    for (; r < n; ++r) out[r] = 1.0f;
}

// d[row, col] = alpha * acc + c for a tile of rows x cols, acc with row stride ldc. stream: BF16
// rows of whole aligned lines (no c) go out with non-temporal stores: a large output is not read
// back into the cache first (measured: the epilogue of a prefill GEMM ~35% quicker).
// The caller fences (_mm_sfence) before its results are read by another thread. c's rows are
// requested kCAhead rows ahead: each row is a short run from memory (K-grouped GEMMs' FP32 c, read
// once) that the hardware prefetchers start too late (measured ~12% off an epilogue-bound call).
constexpr int64_t kCAhead = 4;
inline void epilogue(const Output& o, int64_t g, int64_t row0, int64_t col0, int64_t rows, int64_t cols,
                     const float* acc, int64_t ldc, bool stream = false) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* a = acc + r * ldc;
        const int64_t drow = g * o.dsg + (row0 + r) * o.dsm + col0;
        const int64_t crow = g * o.csg + (row0 + r) * o.csm + col0;
        int64_t j = 0;
        if (o.c != nullptr && r + kCAhead < rows) {
            const int64_t elem = o.c_type == 1 ? 4 : 2;
            const char* next = reinterpret_cast<const char*>(o.c) + (crow + kCAhead * o.csm) * elem;
            for (int64_t l = 0; l < cols * elem; l += 64) __builtin_prefetch(next + l, 0, 3);
        }
#ifdef DJ_HAVE_AVX512
        const __m512 alpha = _mm512_set1_ps(o.alpha);
        uint16_t* dbf = reinterpret_cast<uint16_t*>(o.d) + drow;
        if (stream && o.d_type == 0 && o.c == nullptr && cols % 32 == 0 && reinterpret_cast<uintptr_t>(dbf) % 64 == 0) {
            for (; j < cols; j += 32) {
                const __m256i lo = dj::f32x16_to_bf16(_mm512_mul_ps(_mm512_loadu_ps(a + j), alpha));
                const __m256i hi = dj::f32x16_to_bf16(_mm512_mul_ps(_mm512_loadu_ps(a + j + 16), alpha));
                _mm512_stream_si512(reinterpret_cast<__m512i*>(dbf + j), _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
            }
            continue;
        }
        for (; j < cols; j += 16) {
            const __mmask16 m = cols - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (cols - j)) - 1);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + j), alpha);
            if (o.c != nullptr) {
                if (o.c_type == 1)
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(o.c) + crow + j));
                else
                    v = _mm512_add_ps(v, dj::bf16x16_to_f32(_mm256_maskz_loadu_epi16(
                                             m, reinterpret_cast<const uint16_t*>(o.c) + crow + j)));
            }
            if (o.d_type == 1)
                _mm512_mask_storeu_ps(reinterpret_cast<float*>(o.d) + drow + j, m, v);
            else
                _mm256_mask_storeu_epi16(reinterpret_cast<uint16_t*>(o.d) + drow + j, m, dj::f32x16_to_bf16(v));
        }
#endif
        for (; j < cols; ++j) {
            float v = o.alpha * a[j];
            if (o.c != nullptr)
                v += o.c_type == 1 ? reinterpret_cast<const float*>(o.c)[crow + j]
                                   : dj::bf16_to_f32(reinterpret_cast<const uint16_t*>(o.c)[crow + j]);
            if (o.d_type == 1)
                reinterpret_cast<float*>(o.d)[drow + j] = v;
            else
                reinterpret_cast<uint16_t*>(o.d)[drow + j] = dj::f32_to_bf16(v);
        }
    }
}

template <bool kPromote>
DJ_INLINE void run_micro(int64_t kp, const uint32_t* A, const uint32_t* B, float* C, int64_t ldc, bool acc,
                         const float* sa, const float* sb) {
    micro_kernel<MR, kPromote>(kp, A, B, C, ldc, acc, sa, sb);
}

#ifdef DJ_HAVE_BRGEMM
// C[rows x w] (row stride ldc) over plain BF16 A rows (lda) and one K-pair panel of width w (a
// multiple of 16) on brgemm. Not promoted: C = (acc ? C : 0) + A.B. Promoted: P = A.B into tmp
// (rows x w), then C = (acc ? C : 0) + P * (sb[j] * sa[i]). False after an error was reported.
inline bool brgemm_panel(int64_t rows, int64_t w, int64_t kcp, const uint16_t* A, int64_t lda, const uint32_t* B,
                         float* C, int64_t ldc, bool acc, bool promote, const float* sa, const float* sb, float* tmp,
                         int64_t ldb = 0) {
    if (ldb == 0) ldb = w;
    if (!promote) return dj::brgemm::gemm(rows, w, kcp, A, lda, B, ldb, C, ldc, acc);
    if (!dj::brgemm::gemm(rows, w, kcp, A, lda, B, ldb, tmp, w, false)) return false;
    for (int64_t i = 0; i < rows; ++i) {
        float* c = C + i * ldc;
        const float* t = tmp + i * w;
#ifdef DJ_HAVE_AVX512
        const __m512 si = _mm512_set1_ps(sa[i]);
        for (int64_t h = 0; h < w; h += 16) {
            const __m512 base = acc ? _mm512_loadu_ps(c + h) : _mm512_setzero_ps();
            _mm512_storeu_ps(c + h, _mm512_fmadd_ps(_mm512_loadu_ps(t + h), _mm512_mul_ps(_mm512_loadu_ps(sb + h), si), base));
        }
#else
        for (int64_t j = 0; j < w; ++j) c[j] = (acc ? c[j] : 0.0f) + t[j] * (sb[j] * sa[i]);
#endif
    }
    return true;
}
#endif

// Decode (1-8 rows of A): B's rows are read where they lie, once, converted in registers (E4M3
// through E4M3Tables) and dotted with every A row by vdpbf16ps, so B streams at close to copy
// bandwidth: no panel is packed, nothing is written (measured 1.5-2x the packed paths at M = 4).
// A is prepacked unscaled as BF16 rows of K padded to 64 with zeros, each 64-value chunk in the
// order the conversion leaves B's values in (stream_order). Scales, folded or promoted, are
// applied per scale block of gb values in FP32: tot += acc * (sa * sb).
// A rows up to which the stream path runs. Its vdpbf16ps work grows with the rows while brgemm's
// AMX tiles cost the same for 1-16 rows: on brgemm the packed paths win from about 5 rows, and
// tr_task (E4M3 B) from 4. On avx512bf16 the stream path reads BF16 B where it lies while the panels
// copy it, but E4M3 B is converted on both: there panel_task is quicker from 7 rows, its vdpbf16ps
// broadcasting A against 32 columns (Zen 4, 2 threads, x 2816 / 7168 x 2048, B read from DRAM: 7 rows
// 0.92-0.97x the time, 8 rows 0.84-0.89x; B in L3 the panels win from 5 rows). BF16 B stays on the
// stream path to 8 rows (the panels there: 1.08-1.28x the time).
// brgemm without AMX tiles (a compile target without AMX-BF16: oneDNN's AVX-512 BF16 kernel) costs more with the
// rows, as vdpbf16ps does: there the stream path keeps the vdpbf16ps limits (Zen 4, 2 threads, 7168 x 2048
// E4M3 B from DRAM: at 4 rows the brgemm build took 1.7 ms against the stream path's 1.0).
#if defined(DJ_HAVE_BRGEMM) && defined(__AMX_BF16__)
constexpr int64_t kStreamRows = 4;
constexpr int64_t kStreamRowsFp8 = kStreamRows;
#else
constexpr int64_t kStreamRows = 8;
constexpr int64_t kStreamRowsFp8 = 6;
#endif
// With E4M3 B on brgemm with AMX, tr_task takes over from 4 rows (measured at 4 x 7168 x 2048, one thread:
// 1.3x the stream path; 3 rows even, 1-2 rows the stream path 1.4x quicker); without AMX from 7, after the
// stream path. DG_STREAM_ROWS_TR (a build define) moves the boundary, to measure the two paths against each other.
#ifndef DG_STREAM_ROWS_TR
#if defined(__AMX_BF16__)
#define DG_STREAM_ROWS_TR 3
#else
#define DG_STREAM_ROWS_TR 6
#endif
#endif
constexpr int64_t kStreamRowsTr = DG_STREAM_ROWS_TR;
static_assert(kStreamRowsTr <= kStreamRows, "the stream path's buffers hold kStreamRows rows");
constexpr int64_t kStreamCols = 128;   // B rows per task

#ifdef DJ_HAVE_AVX512
// The first min(n, 16) lanes of a vector (n > 0).
DJ_INLINE __mmask16 lanes16(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1); }
#endif

// Position within a 64-value chunk of A that element e takes: E4M3Tables::convert leaves values
// {0-7, 16-23, 32-39, 48-55} in its first register and the others in the second (BF16 B: as is).
DJ_INLINE int64_t stream_order(int64_t e, bool fp8) {
    return fp8 ? (e % 8) + ((e / 16) % 4) * 8 + ((e / 8) % 2) * 32 : e;
}

#if defined(DJ_HAVE_AVX512_BF16) && defined(__AVX512VBMI__)
// out[m * ldo + r] = sum over K of A[m] . B[r] (scaled per block) for RB B rows and M A rows.
// scales[blk][m][r] for each block of gb values (kScaled).
// bnext: the next call's B rows, requested chunk by chunk a whole call ahead (the hardware
// prefetchers follow a few rows of 2-4 KiB too late: the loads stalled on memory without it).
template <int M, int RB, bool kScaled, bool kFp8>
void stream_rows(const uint8_t* const* brow, const uint8_t* const* bnext, const uint16_t* A, int64_t lda, int64_t klen, int64_t gb,
                 const float* scales, const E4M3Tables& tb, float* out, int64_t ldo) {
    __m512 acc[M][RB], tot[M][RB];
    for (int m = 0; m < M; ++m)
        for (int r = 0; r < RB; ++r) acc[m][r] = tot[m][r] = _mm512_setzero_ps();
    const int64_t chunks = ceil_div(klen, 64), per_block = kScaled ? gb / 64 : chunks;
    for (int64_t c = 0, next = per_block; c < chunks; ++c) {
        const int64_t left = klen - c * 64;
        for (int r = 0; r < RB; ++r) {
            _mm_prefetch(reinterpret_cast<const char*>(bnext[r]) + c * (kFp8 ? 64 : 128), _MM_HINT_T0);
            if (!kFp8) _mm_prefetch(reinterpret_cast<const char*>(bnext[r]) + c * 128 + 64, _MM_HINT_T0);
        }
        __m512i w0[RB], w1[RB];
        for (int r = 0; r < RB; ++r) {
            if (kFp8) {
                const __mmask64 mk = left >= 64 ? ~__mmask64(0) : (__mmask64(1) << left) - 1;
                tb.convert(_mm512_maskz_loadu_epi8(mk, brow[r] + c * 64), w0[r], w1[r]);
            } else {
                const uint16_t* b = reinterpret_cast<const uint16_t*>(brow[r]) + c * 64;
                const __mmask32 m0 = left >= 32 ? ~__mmask32(0) : (__mmask32(1) << left) - 1;
                const __mmask32 m1 = left >= 64 ? ~__mmask32(0) : left <= 32 ? 0 : (__mmask32(1) << (left - 32)) - 1;
                w0[r] = _mm512_maskz_loadu_epi16(m0, b);
                w1[r] = _mm512_maskz_loadu_epi16(m1, b + 32);
            }
        }
        for (int m = 0; m < M; ++m) {
            const __m512bh a0 = (__m512bh)_mm512_loadu_si512(A + m * lda + c * 64);
            const __m512bh a1 = (__m512bh)_mm512_loadu_si512(A + m * lda + c * 64 + 32);
            for (int r = 0; r < RB; ++r) {
                acc[m][r] = _mm512_dpbf16_ps(acc[m][r], a0, (__m512bh)w0[r]);
                acc[m][r] = _mm512_dpbf16_ps(acc[m][r], a1, (__m512bh)w1[r]);
            }
        }
        if (kScaled && (c + 1 == next || c + 1 == chunks)) {
            for (int m = 0; m < M; ++m)
                for (int r = 0; r < RB; ++r) {
                    tot[m][r] = _mm512_fmadd_ps(acc[m][r], _mm512_set1_ps(scales[m * RB + r]), tot[m][r]);
                    acc[m][r] = _mm512_setzero_ps();
                }
            scales += M * RB;
            next += per_block;
        }
    }
    for (int m = 0; m < M; ++m)
        for (int r = 0; r < RB; ++r) out[m * ldo + r] = _mm512_reduce_add_ps(kScaled ? tot[m][r] : acc[m][r]);
}

// B rows at a time: the accumulators (and the scaled totals) of M x RB dot products in registers.
constexpr int stream_rb(int m, bool scaled) {
    return scaled ? (m <= 2 ? 4 : m <= 4 ? 2 : 1) : (m <= 2 ? 8 : m <= 4 ? 4 : 2);
}
#endif

class Engine {
public:
    Engine(const Operand& a, const Operand& b, const Output& o, int64_t n, int64_t threads)
        : a_(a), b_(b), o_(o), n_(n), threads_(std::max<int64_t>(threads, 1)) {
        promote_ = a.promoted() || b.promoted();
        kc_ = KC_FOLDED;
        if (promote_) {
            kc_ = 0;
            for (const Operand* op : {&a, &b})
                if (op->promoted()) kc_ = kc_ == 0 ? op->gk : std::min(kc_, op->gk);
        }
        npad_ = ceil_div(n, 32) * 32;
#if defined(DJ_HAVE_AVX512_BF16) && defined(__AVX512VBMI__)
        stream_gb_ = a.sf && b.sf ? std::min(a.gk, b.gk) : a.sf ? a.gk : b.sf ? b.gk : 0;
        stream_ok_ = a.k_major() && b.k_major() && (b.type == kBF16 || b.type == kE4M3) &&
                     (!a.sf || a.gk % 64 == 0) && (!b.sf || b.gk % 64 == 0) &&
                     (!a.sf || !b.sf || a.gk % b.gk == 0 || b.gk % a.gk == 0);
#endif
#ifdef DJ_HAVE_BRGEMM
        // A as plain rows (MN-major A, as K-grouped GEMMs have, transposed into them); K blocks never overlap there
        brgemm_ = (a.k_major() || a.mn_major()) && kc_ % 32 == 0;
        if (brgemm_ && !promote_) kc_ = KC_BRGEMM;
#if defined(DJ_HAVE_AVX512_BF16) && defined(__AVX512VBMI__)
        // E4M3 B converted as plain rows through E4M3Tables (tr_task): a folded scale must be one
        // exponent per 64-row task and 64-value chunk.
        tr_ok_ = brgemm_ && kc_ % 64 == 0 && b.type == kE4M3 && b.k_major() &&
                 (!b.fold || (b.gk % 64 == 0 && b.gmn % 64 == 0));
#endif
#endif
    }

    void run(const std::vector<Job>& jobs) {
        std::vector<Prepared> prep(jobs.size());
        std::vector<Item> packs, tasks;
        // Every job's packed operands and scales share one pooled block (4-byte words, each slice
        // 64-byte aligned): many small groups would otherwise each hold whole 2 MiB pages.
        int64_t words = 0;
        const auto round64 = [](int64_t w) { return ceil_div(w, 16) * 16; };
        for (size_t j = 0; j < jobs.size(); ++j) {
            const Job& job = jobs[j];
            if (job.m <= 0 || n_ <= 0) continue;
            Prepared& p = prep[j];
            p.small = job.m <= SMALL_M;
            const int64_t stream_max = tr_ok_ ? kStreamRowsTr : b_.type == kE4M3 ? kStreamRowsFp8 : kStreamRows;
            if (stream_ok_ && job.m <= stream_max) {   // A prepacked for stream_rows, B read in place
                p.stream = true;
                p.mpad = 32;
                p.lda = ceil_div(job.klen, 64) * 64;
                p.a_off = words;
                words += round64(job.m * p.lda / 2);
                packs.push_back({static_cast<int64_t>(j), 0, 0, 0});
                for (int64_t c0 = 0; c0 < n_; c0 += kStreamCols) tasks.push_back({static_cast<int64_t>(j), 4, 0, c0});
                continue;
            }
            // rows_to_bf16 transposes MN-major A (brgemm) and gathers other majors element by element
            p.plain = brgemm_ || (p.small && job.m % 32 != 0 && a_.k_major());
            p.rows = p.small && !p.plain && b_.k_major();
            // brgemm reads plain BF16 A where it lies (K even: calls then cover K exactly), unless its
            // rows lie an even number of cache lines apart (K = 2048: 4 KiB): the 32 rows of a call
            // would then share a few L1 sets and evict each other; the copy's rows are 1 line longer.
            const bool spread = (a_.smn * 2) % 64 != 0 || (a_.smn * 2 / 64) % 2 == 1;
            p.a_direct = brgemm_ && a_.k_major() && a_.type == kBF16 && a_.sf == nullptr && job.klen % 2 == 0 &&
                         (spread || p.small);
            p.group = brgemm_ && !p.small && p.plain;
            p.tr = tr_ok_ && p.small && p.plain && job.m <= kTrMaxRows;
            if (p.tr) p.a_direct = false;
            p.mpad = ceil_div(job.m, 32) * 32;
            p.nkb = ceil_div(job.klen, kc_);
            p.lda = p.nkb * kc_ + 32;
            // group_task's copy of A: one row-major array per pass (the group_blocks() K blocks a
            // task packs at a time), so that a block of rows covers one contiguous run in a pass
            // rather than 32 short runs a whole row apart: the calls' A comes from L3 in runs the
            // hardware prefetchers follow (measured at 4096 x 4096 x 7168, 4 passes: BF16 1.07-1.09x,
            // E4M3 1.06-1.12x quicker). One pass: the layout is the same either way.
            if (p.group && !p.a_direct && p.nkb > group_blocks()) {
                p.passes = ceil_div(p.nkb, group_blocks());
                p.lda = group_blocks() * kc_ + 32;
            }
            p.a_off = words;
            // A^T as narrow as the rows allow (a multiple of 4): oneDNN's calls cost with the columns
            // (32 x 4 x 128 about 0.8x the time of 32 x 16 x 128).
            p.nw = ceil_div(job.m, 4) * 4;
            words += round64(p.tr ? p.nkb * kc_ / 2 * p.nw : p.plain ? p.passes * p.mpad * p.lda / 2 : p.nkb * p.mpad * kc_ / 2);
            p.sa_off = words;
            words += round64(p.nkb * p.mpad);
            for (int64_t kb = 0; kb < p.nkb; ++kb)
                for (int64_t r0 = 0; r0 < p.mpad; r0 += MC) packs.push_back({static_cast<int64_t>(j), 0, kb, r0});
            if (p.group) {
                // Tasks: 256-column groups of B, each over a range of rows (ranges split only to
                // give every thread several tasks, or to bound the accumulators).
                const int64_t groups = ceil_div(n_, kGroupCols);
                const int64_t split = std::max(ceil_div(2 * threads_, groups), ceil_div(job.m, kGroupMaxRows));
                p.range = ceil_div(ceil_div(job.m, split), kGroupRows) * kGroupRows;
                for (int64_t r0 = 0; r0 < job.m; r0 += p.range)
                    for (int64_t c0 = 0; c0 < n_; c0 += kGroupCols) tasks.push_back({static_cast<int64_t>(j), 3, r0, c0});
                const bool whole = p.nkb <= group_blocks();
                group_acc_ = std::max(group_acc_, (whole ? kGroupRows : p.range) * kGroupCols);
            } else if (!p.small) {
                p.b_off = words;
                words += round64(p.nkb * npad_ * kc_ / 2);
                p.sb_off = words;
                words += round64(p.nkb * npad_);
                for (int64_t kb = 0; kb < p.nkb; ++kb)
                    for (int64_t c0 = 0; c0 < npad_; c0 += 64) packs.push_back({static_cast<int64_t>(j), 1, kb, c0});
                for (int64_t r0 = 0; r0 < job.m; r0 += MC)
                    for (int64_t c0 = 0; c0 < n_; c0 += NC) tasks.push_back({static_cast<int64_t>(j), 0, r0, c0});
            } else if (p.tr) {
                // Spans of 64-column blocks, about 4 per thread for a single job (each task's first
                // span of B starts cold: tr_task prefetches ahead only within its own columns).
                const int64_t span = std::clamp<int64_t>(ceil_div(ceil_div(n_, 4 * threads_), 64), 1, kTrMaxBlocks) * 64;
                for (int64_t c0 = 0; c0 < n_; c0 += span)
                    tasks.push_back({static_cast<int64_t>(j), 5, std::min(n_, c0 + span), c0});
            } else {
                // 64 columns per task keeps both threads busy even for a single decode job.
                for (int64_t c0 = 0; c0 < n_; c0 += 64)
                    tasks.push_back({static_cast<int64_t>(j), p.rows ? 2 : 1, 0, c0});
            }
        }

        Pooled<uint32_t> arena = pooled<uint32_t>(words);
        for (Prepared& p : prep) {
            p.a = arena.get() + p.a_off;
            p.b = arena.get() + p.b_off;
            p.sa = reinterpret_cast<float*>(arena.get() + p.sa_off);
            p.sb = reinterpret_cast<float*>(arena.get() + p.sb_off);
        }
        // Packing only few-row A blocks is quicker than waking the other threads (one parallel
        // region fewer also matters when a core is shared with another process).
        int64_t pack_rows = 0;
        for (const Item& it : packs) pack_rows += it.kind == 0 ? std::min(MC, prep[it.job].mpad - it.y) : NC;
        parallel_items(packs, [&](const Item& it, Scratch& s) { prepack(jobs[it.job], prep[it.job], it, s); },
                       pack_rows * kc_ <= kSerialPack);
        parallel_items(tasks, [&](const Item& it, Scratch& s) {
            if (it.kind == 0)
                tile_task(jobs[it.job], prep[it.job], it.x, it.y, s);
            else if (it.kind == 1)
                panel_task(jobs[it.job], prep[it.job], it.y, s);
#if defined(DJ_HAVE_AVX512_BF16) && defined(__AVX512VBMI__)
            else if (it.kind == 4)
                stream_task(jobs[it.job], prep[it.job], it.y);
#endif
#ifdef DJ_HAVE_BRGEMM
            else if (it.kind == 3)
                group_task(jobs[it.job], prep[it.job], it.x, it.y, s);
#if defined(DJ_HAVE_AVX512_BF16) && defined(__AVX512VBMI__)
            else if (it.kind == 5)
                tr_task(jobs[it.job], prep[it.job], it.y, it.x, s);
#endif
#endif
            else
                rows_task(jobs[it.job], prep[it.job], it.y, s);
        });
        // A job with an empty K range still writes d = c (or zeros).
        for (size_t j = 0; j < jobs.size(); ++j) {
            const Job& job = jobs[j];
            if (job.m > 0 && n_ > 0 && job.klen <= 0) {
                std::vector<float> zeros(n_, 0.0f);
                for (int64_t r = 0; r < job.m; ++r) epilogue(o_, job.d_g, job.d_m0 + r, 0, 1, n_, zeros.data(), 0);
            }
        }
    }

private:
    struct Prepared {
        bool small = false;   // few rows: B is converted on the fly, not packed up front
        bool rows = false;    // small with K-major B: B's rows are the broadcast side (rows_task)
        bool plain = false;   // small and ragged, or brgemm: A kept as BF16 rows, exact-height tiles
        bool a_direct = false;   // brgemm on A's own BF16 rows: nothing packed
        bool group = false;      // brgemm with many rows: group_task packs B itself
        bool stream = false;     // decode rows: stream_task reads B in place
        bool tr = false;         // few rows, E4M3 B on brgemm: tr_task (the transposed product)
        int64_t mpad = 0, nkb = 0, lda = 0, range = 0;
        int64_t passes = 1;      // plain A: arrays of group_blocks() K blocks each, mpad rows lda apart
        int64_t nw = 0;          // tr: A^T's width (rows rounded up to 4)
        int64_t a_off = 0, b_off = 0, sa_off = 0, sb_off = 0;   // word offsets into run()'s arena
        uint32_t *a = nullptr, *b = nullptr;
        float *sa = nullptr, *sb = nullptr;
    };
    struct Item {
        int64_t job, kind, x, y;
    };
    struct Scratch {
        Buffer<uint16_t> tmp;
        Buffer<int16_t> exps;
        Buffer<uint32_t> panel;
        Buffer<float> acc, sb, ctmp;   // ctmp: a brgemm block product before promotion
        Buffer<uint32_t> group;        // group_task's packed B columns
        Buffer<float> group_acc, group_sb;   // group_task's accumulators and promoted B scales
        Scratch(int64_t kc, int64_t npad_small, int64_t group_words, int64_t group_acc_floats, int64_t group_sb_floats)
            : tmp(alloc<uint16_t>(std::max<int64_t>(MC, 64) * (kc + 40) + kc * (std::max<int64_t>(MC, 64) + 40))),
              exps(alloc<int16_t>(std::max<int64_t>(MC, kGroupCols))),
              panel(alloc<uint32_t>(NR * std::max<int64_t>(kc, kPanelK) / 2)),
              acc(alloc<float>(std::max<int64_t>(MC * NC, npad_small * NR))),
              sb(alloc<float>(NR)),
              ctmp(alloc<float>(std::max<int64_t>(npad_small * NR, kGroupRows * kGroupCols))),
              group(alloc<uint32_t>(group_words)),
              group_acc(alloc<float>(group_acc_floats)),
              group_sb(alloc<float>(group_sb_floats)) {}
    };

    template <typename F>
    void parallel_items(const std::vector<Item>& items, F&& fn, bool serial = false) {
        const int64_t n = static_cast<int64_t>(items.size());
        if (n == 0) return;
        const int t = serial ? 1 : dj::thread_count(threads_, n);
        const int64_t small_rows = SMALL_M + 32;
#ifdef _OPENMP
#pragma omp parallel num_threads(t) if (t > 1)
#endif
        {
            Scratch s(kc_, small_rows, group_acc_ > 0 ? group_blocks() * kGroupCols * kc_ / 2 : 0, group_acc_,
                      group_acc_ > 0 ? group_blocks() * kGroupCols : 0);
#ifdef DJ_HAVE_BRGEMM
            dj::brgemm::Scope brgemm_scope;   // the thread's AMX tile state is released on leaving
#endif
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t i = 0; i < n; ++i)
                if (!dj::failed()) fn(items[i], s);   // after a reported error the launch raises
        }
    }

    // K blocks of kc_ a group_task packs at a time.
    int64_t group_blocks() const { return std::max<int64_t>(1, kGroupBytes / (kGroupCols * 2) / kc_); }

    int64_t kcp_of(const Job& job, int64_t kb) const {
        const int64_t kv = std::min(kc_, job.klen - kb * kc_);
        return ceil_div(kv, 32) * 32;
    }

    void prepack(const Job& job, Prepared& p, const Item& it, Scratch& s) {
        if (p.stream) {   // A's rows unscaled, each 64-value chunk in stream_order, zero past K
            // Converted a chunk at a time: a whole row (any K) would not fit the scratch, sized by kc_.
            uint16_t chunk[64];
            for (int64_t r = 0; r < job.m; ++r) {
                uint16_t* out = reinterpret_cast<uint16_t*>(p.a) + r * p.lda;
                for (int64_t c = 0; c < p.lda; c += 64) {
                    const int64_t n = std::clamp<int64_t>(job.klen - c, 0, 64);
                    to_bf16(a_.row_base(job.a_g, job.a_m0 + r), a_.type, job.k0 + c, n, chunk);
                    std::fill(chunk + n, chunk + 64, uint16_t(0));
                    for (int64_t e = 0; e < 64; ++e) out[c + stream_order(e, b_.type == kE4M3)] = chunk[e];
                }
            }
            return;
        }
        const int64_t kb = it.x, kv = std::min(kc_, job.klen - kb * kc_), kcp = kcp_of(job, kb);
        const int64_t k0 = job.k0 + kb * kc_;
        const int64_t kbs_a = job.kb0 + (kb * kc_) / std::max<int64_t>(a_.gk, 1);
        const int64_t kbs_b = job.kb0 + (kb * kc_) / std::max<int64_t>(b_.gk, 1);
        if (it.kind == 0) {
            const int64_t r0 = it.y, rows = std::min(MC, p.mpad - r0), mv = std::clamp<int64_t>(job.m - r0, 0, rows);
            if (p.a_direct) {
                // read in place by a_rows()
#if defined(DJ_HAVE_BRGEMM) && defined(DJ_HAVE_AVX512_BF16) && defined(__AVX512VBMI__)
            } else if (p.tr) {
                pack_a_transposed(job, p, kb, k0, kv, s.tmp.get());
#endif
            } else if (p.plain) {   // K block kb of each row, zero past K (the B panels are zero there too)
                uint16_t* out = a_plain(p, kb, r0);
                rows_to_bf16(a_, job.a_g, job.a_m0 + r0, mv, mv, k0, kv, kcp, job.k0, job.kb0, out, p.lda);
            } else {
                uint32_t* out = p.a + kb * p.mpad * kc_ / 2 + r0 * kcp / 2;
                pack_block(a_, job.a_g, job.a_m0 + r0, mv, rows, p.rows ? NR : MR, k0, kv, kcp, job.k0, job.kb0,
                           s.tmp.get(), s.exps.get(), out);
            }
            block_scales(a_, job.a_g, job.a_m0 + r0, mv, rows, kbs_a, p.sa + kb * p.mpad + r0);
        } else {
            const int64_t c0 = it.y, cols = std::min<int64_t>(64, npad_ - c0), nv = std::clamp<int64_t>(n_ - c0, 0, cols);
            uint32_t* out = p.b + kb * npad_ * kc_ / 2 + c0 * kcp / 2;
            // brgemm reads 64-wide panels (fewer, longer calls); the layout by column is the same
            pack_block(b_, job.b_g, c0, nv, cols, NR, k0, kv, kcp, job.k0, job.kb0, s.tmp.get(), s.exps.get(), out);
            block_scales(b_, job.b_g, c0, nv, cols, kbs_b, p.sb + kb * npad_ + c0);
        }
    }

    // One MC x NC output tile from operands packed up front.
    void tile_task(const Job& job, const Prepared& p, int64_t r0, int64_t c0, Scratch& s) {
        const int64_t rows = std::min(MC, job.m - r0), cols = std::min(NC, n_ - c0);
        const int64_t ipanels = ceil_div(rows, MR), jpanels = ceil_div(cols, NR);
        float* acc = s.acc.get();
        for (int64_t kb = 0; kb < p.nkb; ++kb) {
            const int64_t kcp = kcp_of(job, kb);
            const uint32_t* ablk = a_block(job, p, kb, r0);
            const uint32_t* bblk = b_block(job, p, kb, c0);
            const float* sa = p.sa + kb * p.mpad + r0;
            const float* sb = p.sb + kb * npad_ + c0;
            // While this block runs, the next B panel is pulled into L1 and the next K block's A
            // rows into L2, a few lines per micro-kernel call, so no call starts on cold panels
            // (worth about 4% of a prefill GEMM).
            const bool more = kb + 1 < p.nkb;
            const int64_t b_lines = NR * kcp * 2 / 64, b_per_call = ceil_div(b_lines, ipanels);
            const int64_t a_lines = more ? rows * kcp_of(job, kb + 1) * 2 / 64 : 0;
            const int64_t a_per_call = ceil_div(a_lines, jpanels * ipanels);
            const char* a_next = more ? reinterpret_cast<const char*>(a_block(job, p, kb + 1, r0)) : nullptr;
            for (int64_t jp = 0; jp < jpanels; ++jp) {
                const uint32_t* b_next = jp + 1 < jpanels ? bblk + (jp + 1) * NR * kcp / 2
                                         : more           ? b_block(job, p, kb + 1, c0)
                                                          : nullptr;
                for (int64_t ip = 0; ip < ipanels; ++ip) {
                    if (b_next != nullptr) prefetch_lines<3>(b_next, ip * b_per_call, b_per_call, b_lines);
                    if (a_next != nullptr) prefetch_lines<2>(a_next, (jp * ipanels + ip) * a_per_call, a_per_call, a_lines);
                    float* c = acc + ip * MR * NC + jp * NR;
                    const uint32_t* A = ablk + ip * MR * kcp / 2;
                    const uint32_t* B = bblk + jp * NR * kcp / 2;
                    if (promote_)
                        run_micro<true>(kcp / 2, A, B, c, NC, kb > 0, sa + ip * MR, sb + jp * NR);
                    else
                        run_micro<false>(kcp / 2, A, B, c, NC, kb > 0, nullptr, nullptr);
                }
            }
        }
        if (p.nkb > 0) epilogue(o_, job.d_g, job.d_m0 + r0, c0, rows, cols, acc, NC);
    }

#ifdef DJ_HAVE_BRGEMM
    // Rows [r_begin, r_begin + range) of a many-row job against B's columns [c0, c0 + 256) on
    // brgemm. B is packed here, group_blocks() K blocks at a time, into the thread's scratch (it
    // stays in L2 for every row of the range); A is read as plain rows in 32 x 512 chunks (L1).
    void group_task(const Job& job, const Prepared& p, int64_t r_begin, int64_t c0, Scratch& s) {
        const int64_t r_end = std::min(job.m, r_begin + p.range);
        const int64_t cols = std::min(kGroupCols, n_ - c0), colsp = ceil_div(cols, 32) * 32;
        const int64_t per_pack = group_blocks();
        const bool whole = p.nkb <= per_pack;   // all of K packed at once: a row block finishes in one pass
        uint32_t* bg = s.group.get();
        for (int64_t kb0 = 0; kb0 < p.nkb; kb0 += per_pack) {
            const int64_t kb1 = std::min(p.nkb, kb0 + per_pack);
            for (int64_t kb = kb0; kb < kb1; ++kb) {
                const int64_t kv = std::min(kc_, job.klen - kb * kc_), kcp = kcp_of(job, kb);
                pack_block(b_, job.b_g, c0, cols, colsp, colsp, job.k0 + kb * kc_, kv, kcp, job.k0, job.kb0,
                           s.tmp.get(), s.exps.get(), bg + (kb - kb0) * colsp * kc_ / 2);
                if (promote_)
                    block_scales(b_, job.b_g, c0, cols, colsp, job.kb0 + (kb * kc_) / std::max<int64_t>(b_.gk, 1),
                                 s.group_sb.get() + (kb - kb0) * colsp);
            }
            for (int64_t r0 = r_begin; r0 < r_end; r0 += kGroupRows) {
                const int64_t rows = std::min(kGroupRows, r_end - r0);
                float* c = s.group_acc.get() + (whole ? 0 : (r0 - r_begin) * colsp);
                if (promote_) {
                    // One scale block per call (kc_ is the scale granularity), kPromoteCols columns at
                    // a time over the packed K: the call's product and accumulators (16 KiB each) and
                    // A's chunk stay in L1 for the promotion pass.
                    for (int64_t h = 0; h < colsp; h += kPromoteCols)
                        for (int64_t kb = kb0; kb < kb1; ++kb) {
                            int64_t lda, kk;
                            const uint16_t* A = a_rows(job, p, kb, r0, lda, kk);
                            const uint32_t* B = bg + (kb - kb0) * colsp * kc_ / 2 + h;
                            if (!brgemm_panel(rows, std::min(kPromoteCols, colsp - h), kk, A, lda, B, c + h, colsp,
                                              kb > 0, true, p.sa + kb * p.mpad + r0,
                                              s.group_sb.get() + (kb - kb0) * colsp + h, s.ctmp.get(), colsp))
                                return;
                        }
                    if (kb1 == p.nkb) epilogue(o_, job.d_g, job.d_m0 + r0, c0, rows, cols, c, colsp, true);
                    continue;
                }
                for (int64_t kb = kb0; kb < kb1; ++kb) {
                    int64_t lda, kk;
                    const uint16_t* A = a_rows(job, p, kb, r0, lda, kk);
                    const uint32_t* B = bg + (kb - kb0) * colsp * kc_ / 2;
                    for (int64_t k = 0; k < kk; k += kGroupK)
                        if (!dj::brgemm::gemm(rows, colsp, std::min(kGroupK, kk - k), A + k, lda, B + k / 2 * colsp,
                                              colsp, c, colsp, kb > 0 || k > 0))
                            return;
                }
                if (kb1 == p.nkb) epilogue(o_, job.d_g, job.d_m0 + r0, c0, rows, cols, c, colsp, true);
            }
        }
#ifdef DJ_HAVE_AVX512
        _mm_sfence();
#endif
    }

#endif

#if defined(DJ_HAVE_AVX512_BF16) && defined(__AVX512VBMI__)
    // B's rows [c0, c0 + kStreamCols) against the job's (few) A rows, RB rows at a time.
    void stream_task(const Job& job, const Prepared& p, int64_t c0) {
        const bool scaled = stream_gb_ > 0, fp8 = b_.type == kE4M3;
        const int64_t cols = std::min(kStreamCols, n_ - c0), m = job.m;
        const int rb = stream_rb(static_cast<int>(m), scaled);
        const int64_t blocks = scaled ? ceil_div(job.klen, stream_gb_) : 0;
        E4M3Tables tb;
        if (fp8) tb.build(tables(), 0);
        // Per block: each A row's scale (sa), and the offset of B's scale along K (sb_k).
        std::vector<float> scales(blocks * m * rb), sa(blocks * m, 1.0f);
        std::vector<int64_t> sb_k(blocks);
        for (int64_t bi = 0; bi < blocks; ++bi) {
            const int64_t koff = bi * stream_gb_;
            if (b_.sf) sb_k[bi] = (job.kb0 + koff / b_.gk) * b_.sfk;
            if (a_.sf)
                for (int64_t i = 0; i < m; ++i) sa[bi * m + i] = a_.scale(job.a_g, job.a_m0 + i, job.kb0 + koff / a_.gk);
        }
        float out[kStreamRows * kStreamCols];
        const uint16_t* A = reinterpret_cast<const uint16_t*>(p.a);
        // B rows prefetched about 16 KiB ahead (whole groups of rb rows)
        const int64_t row_bytes = std::max<int64_t>(1, job.klen * (fp8 ? 1 : 2));
        const int64_t ahead = rb * std::max<int64_t>(1, ceil_div(16384, rb * row_bytes));
        for (int64_t r0 = 0; r0 < cols; r0 += rb) {
            const uint8_t *brow[8], *bnext[8];
            const float* sb_row[8];
            for (int r = 0; r < rb; ++r) {   // rows past the end repeat the last one (results dropped)
                const int64_t n = c0 + std::min<int64_t>(r0 + r, cols - 1);
                brow[r] = b_.row_base(job.b_g, n) + (fp8 ? 1 : 2) * job.k0;
                bnext[r] = b_.row_base(job.b_g, std::min(n_ - 1, c0 + r0 + ahead + r)) + (fp8 ? 1 : 2) * job.k0;
                sb_row[r] = b_.sf ? b_.sf + job.b_g * b_.sfg + (n / b_.gmn) * b_.sfmn : nullptr;
            }
            for (int64_t bi = 0; bi < blocks; ++bi)
                for (int64_t i = 0; i < m; ++i)
                    for (int r = 0; r < rb; ++r)
                        scales[(bi * m + i) * rb + r] = sa[bi * m + i] * (sb_row[r] ? sb_row[r][sb_k[bi]] : 1.0f);
            float part[kStreamRows * 8];
            stream_dispatch(static_cast<int>(m), scaled, fp8, brow, bnext, A, p.lda, job.klen, scales.data(), tb, part, rb);
            for (int64_t i = 0; i < m; ++i)
                for (int r = 0; r < rb && r0 + r < cols; ++r) out[i * kStreamCols + r0 + r] = part[i * rb + r];
        }
        epilogue(o_, job.d_g, job.d_m0, c0, m, cols, out, kStreamCols);
    }

    template <int M>
    void stream_m(bool scaled, bool fp8, const uint8_t* const* brow, const uint8_t* const* bnext, const uint16_t* A, int64_t lda, int64_t klen,
                  const float* sc, const E4M3Tables& tb, float* out, int64_t ldo) const {
        if (scaled) {
            if (fp8) stream_rows<M, stream_rb(M, true), true, true>(brow, bnext, A, lda, klen, stream_gb_, sc, tb, out, ldo);
            else stream_rows<M, stream_rb(M, true), true, false>(brow, bnext, A, lda, klen, stream_gb_, sc, tb, out, ldo);
        } else {
            if (fp8) stream_rows<M, stream_rb(M, false), false, true>(brow, bnext, A, lda, klen, 0, sc, tb, out, ldo);
            else stream_rows<M, stream_rb(M, false), false, false>(brow, bnext, A, lda, klen, 0, sc, tb, out, ldo);
        }
    }
    void stream_dispatch(int m, bool scaled, bool fp8, const uint8_t* const* brow, const uint8_t* const* bnext, const uint16_t* A, int64_t lda,
                         int64_t klen, const float* sc, const E4M3Tables& tb, float* out, int64_t ldo) const {
        switch (m) {
        case 1: return stream_m<1>(scaled, fp8, brow, bnext, A, lda, klen, sc, tb, out, ldo);
        case 2: return stream_m<2>(scaled, fp8, brow, bnext, A, lda, klen, sc, tb, out, ldo);
        case 3: return stream_m<3>(scaled, fp8, brow, bnext, A, lda, klen, sc, tb, out, ldo);
        case 4: return stream_m<4>(scaled, fp8, brow, bnext, A, lda, klen, sc, tb, out, ldo);
        case 5: return stream_m<5>(scaled, fp8, brow, bnext, A, lda, klen, sc, tb, out, ldo);
        case 6: return stream_m<6>(scaled, fp8, brow, bnext, A, lda, klen, sc, tb, out, ldo);
        case 7: return stream_m<7>(scaled, fp8, brow, bnext, A, lda, klen, sc, tb, out, ldo);
        default: return stream_m<8>(scaled, fp8, brow, bnext, A, lda, klen, sc, tb, out, ldo);
        }
    }
#endif

#if defined(DJ_HAVE_BRGEMM) && defined(DJ_HAVE_AVX512_BF16) && defined(__AVX512VBMI__)
    // tr: A's K block kb as brgemm's B operand, A^T in K-pair (VNNI) layout p.nw wide: word
    // [q * nw + i] holds positions 2q, 2q + 1 of row i, each 64-value chunk of K in stream_order (the
    // order E4M3Tables::convert leaves B's values in), zero past K and past the job's rows.
    void pack_a_transposed(const Job& job, const Prepared& p, int64_t kb, int64_t k0, int64_t kv, uint16_t* tmp) const {
        const int64_t kcp = ceil_div(kv, 64) * 64, ld = kcp + 2, nw = p.nw;
        rows_to_bf16(a_, job.a_g, job.a_m0, job.m, job.m, k0, kv, kcp, job.k0, job.kb0, tmp, ld);
        uint16_t* at = reinterpret_cast<uint16_t*>(p.a + kb * kc_ / 2 * nw);
        std::memset(at, 0, kc_ * nw * 2);
        // Position q of a chunk takes element order[q]; each row's chunk, so permuted, is 32 words
        // that go down A^T's column i (nw words apart).
        alignas(64) uint16_t order[64];
        for (int e = 0; e < 64; ++e) order[stream_order(e, true)] = static_cast<uint16_t>(e);
        const __m512i perm0 = _mm512_load_si512(order), perm1 = _mm512_load_si512(order + 32);
        const __m512i down = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(static_cast<int>(nw)));
        uint32_t* atw = p.a + kb * kc_ / 2 * nw;
        for (int64_t c = 0; c < kcp; c += 64)
            for (int64_t i = 0; i < job.m; ++i) {
                const __m512i lo = _mm512_loadu_si512(tmp + i * ld + c), hi = _mm512_loadu_si512(tmp + i * ld + c + 32);
                uint32_t* col = atw + (c / 2) * nw + i;
                _mm512_i32scatter_epi32(col, down, _mm512_permutex2var_epi16(lo, perm0, hi), 4);
                _mm512_i32scatter_epi32(col + 16 * nw, down, _mm512_permutex2var_epi16(lo, perm1, hi), 4);
            }
    }

    // Few rows, E4M3 B, on brgemm: the transposed product D^T[columns, rows] = B . A^T over the
    // task's columns [c0, c1), 64 at a time. B's rows are converted through E4M3Tables into plain
    // BF16 rows (L1 scratch, no transpose into panels: that was most of the conversion's cost) and
    // are brgemm's A operand; A^T (pack_a_transposed) is its B. B is read once, converted once,
    // never written to memory.
    void tr_task(const Job& job, const Prepared& p, int64_t c0, int64_t c1, Scratch& s) {
        if (job.klen <= 0) return;   // run() writes d = c
        const int64_t nw = p.nw;
        // B's folded scales are applied to each scale block's product (exact: powers of two) rather
        // than through tables rebuilt per block (measured 1.4x at 4 rows). One call per block then.
        const bool post = !promote_ && b_.fold;
        const int64_t step = promote_ ? kc_ : post ? b_.gk : kTrK, ld = step + 32;   // ld: rows 1 line off L1-set aliasing
        uint16_t* brows = s.tmp.get();
        float* acc = s.acc.get();                // [64][nw]
        float* out = acc + 64 * nw;              // [m][64] for the epilogue
        float* prod = s.ctmp.get();              // promoted: one block's product
        alignas(64) float sb[kTrRows];
        const ConvertTables& t = tables();
        E4M3Tables tb;
        // kTrRows B rows over all of K, then the next kTrRows (the order of the packed path: few
        // enough concurrent row streams for the hardware prefetchers), through the task's columns.
        // Each call's BF16 rows and A^T's block stay in L1. The span `ahead` steps on is requested
        // into L2 one line per converted line (a burst of a whole span's requests stalls on the fill
        // buffers), across 64-column blocks too, so only the task's first span starts cold.
        const int64_t steps = ceil_div(job.klen, step), ahead = std::max<int64_t>(1, 512 / step);
        const int64_t groups = ceil_div(c1 - c0, kTrRows);   // kTrRows divides 64
        const auto b_row = [&](int64_t col) { return b_.row_base(job.b_g, col) + job.k0; };
        for (int64_t t0 = 0; t0 < std::min(ahead, steps); ++t0)
            prefetch_rows<2>(b_, job.b_g, c0, std::min(kTrRows, c1 - c0), job.k0 + t0 * step,
                             std::min(step, job.klen - t0 * step));
        for (int64_t cb = c0; cb < c1; cb += 64) {
            const int64_t nv = std::min<int64_t>(64, c1 - cb);
            for (int64_t h = 0; h < nv; h += kTrRows) {
                const int64_t hv = std::min(kTrRows, nv - h), gi = (cb - c0 + h) / kTrRows;
                float* ch = acc + h * nw;
                for (int64_t st = 0; st < steps; ++st) {
                    const int64_t k = st * step, kv = std::min(step, job.klen - k), kcp = ceil_div(kv, 64) * 64;
                    const int64_t ti = gi * steps + st + ahead, pg = ti / steps, pk = (ti % steps) * step;
                    const int64_t pc = c0 + pg * kTrRows;
                    const int64_t prow = pg < groups ? std::min(kTrRows, c1 - pc) : 0, plen = std::min(step, job.klen - pk);
                    for (int64_t c = 0; c < kcp; c += 64) {
                        const int64_t n = std::min<int64_t>(64, kv - c);
                        const __mmask64 m = n >= 64 ? ~__mmask64(0) : ((__mmask64(1) << n) - 1);
                        const int e = b_.fold && !post ? scale_exponent(b_.scale(job.b_g, cb, job.kb0 + (k + c) / b_.gk)) : 0;
                        if (e != tb.e) tb.build(t, e);
                        const uint8_t* src = b_row(cb + h) + k + c;
                        const uint8_t* pre = prow > 0 ? b_row(pc) + pk + c : nullptr;
                        const int64_t b_ld = b_.smn;   // K-major E4M3: a row's stride in bytes
                        for (int64_t r = 0; r < hv; ++r) {
                            if (r < prow && c < plen) _mm_prefetch(reinterpret_cast<const char*>(pre + r * b_ld), _MM_HINT_T1);
                            // The far request above only reaches L2, and each load then waited on L2
                            // (with the narrow A^T: measured 5-7% at 4 x 7168 x 2048 and 4 x 4096 x 7168).
                            const int64_t rn = r + kTrNear;
                            if (rn < hv)
                                _mm_prefetch(reinterpret_cast<const char*>(src + rn * b_ld), _MM_HINT_T0);
                            else if (rn - hv < hv && c + 64 < kcp)   // the next chunk's first rows
                                _mm_prefetch(reinterpret_cast<const char*>(src + 64 + (rn - hv) * b_ld), _MM_HINT_T0);
                            __m512i w0, w1;
                            tb.convert(_mm512_maskz_loadu_epi8(m, src + r * b_ld), w0, w1);
                            _mm512_storeu_si512(brows + r * ld + c, w0);
                            _mm512_storeu_si512(brows + r * ld + c + 32, w1);
                        }
                    }
                    const uint32_t* at = p.a + (k / 2) * nw;
                    if (!promote_ && !post) {
                        if (!dj::brgemm::gemm(hv, nw, kcp, brows, ld, at, nw, ch, nw, k > 0)) return;
                        continue;
                    }
                    if (post) {   // one scale for the block's 64 columns (gmn % 64 == 0)
                        if (!dj::brgemm::gemm(hv, nw, kcp, brows, ld, at, nw, prod, nw, false)) return;
                        const __m512 sr = _mm512_set1_ps(b_.scale(job.b_g, cb, job.kb0 + k / b_.gk));
                        for (int64_t e = 0; e < hv * nw; e += 16) {   // hv * nw: a multiple of 4
                            const __mmask16 mk = lanes16(hv * nw - e);
                            const __m512 base = k > 0 ? _mm512_maskz_loadu_ps(mk, ch + e) : _mm512_setzero_ps();
                            _mm512_mask_storeu_ps(ch + e, mk, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, prod + e), sr, base));
                        }
                        continue;
                    }
                    // Promoted: kc_ is the scale block, one per step.
                    if (!dj::brgemm::gemm(hv, nw, kcp, brows, ld, at, nw, prod, nw, false)) return;
                    block_scales(b_, job.b_g, cb + h, hv, hv, job.kb0 + k / std::max<int64_t>(b_.gk, 1), sb);
                    const float* sa = p.sa + st * p.mpad;   // 1 past the job's rows up to mpad >= nw
                    for (int64_t r = 0; r < hv; ++r) {
                        const __m512 sr = _mm512_set1_ps(sb[r]);
                        float* cr = ch + r * nw;
                        const float* pr = prod + r * nw;
                        for (int64_t i = 0; i < nw; i += 16) {   // rows nw apart: the mask keeps to row r
                            const __mmask16 mk = lanes16(nw - i);
                            const __m512 base = k > 0 ? _mm512_maskz_loadu_ps(mk, cr + i) : _mm512_setzero_ps();
                            _mm512_mask_storeu_ps(cr + i, mk, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, pr + i),
                                                                              _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, sa + i), sr), base));
                        }
                    }
                }
            }
            for (int64_t i = 0; i < job.m; ++i)
                for (int64_t r = 0; r < nv; ++r) out[i * 64 + r] = acc[r * nw + i];
            epilogue(o_, job.d_g, job.d_m0, cb, job.m, nv, out, 64);
        }
    }
#endif

#ifdef DJ_HAVE_BRGEMM
    // Row r0 of the job's A at K block kb for brgemm, its row stride and the K the call covers:
    // A's own rows (a_direct, exactly the block's K) or the plain rows prepack wrote (K zero-padded).
    const uint16_t* a_rows(const Job& job, const Prepared& p, int64_t kb, int64_t r0, int64_t& lda, int64_t& k) const {
        if (p.a_direct) {
            lda = a_.smn;
            k = std::min(kc_, job.klen - kb * kc_);
            return reinterpret_cast<const uint16_t*>(a_.row_base(job.a_g, job.a_m0 + r0)) + job.k0 + kb * kc_;
        }
        lda = p.lda;
        k = kcp_of(job, kb);
        return a_plain(p, kb, r0);
    }
#endif
    // Row r0 of the plain A copy at the start of K block kb (in pass kb / group_blocks() where the
    // copy is split into passes).
    uint16_t* a_plain(const Prepared& p, int64_t kb, int64_t r0) const {
        const int64_t per = group_blocks(), pass = p.passes > 1 ? kb / per : 0;
        return reinterpret_cast<uint16_t*>(p.a) + (pass * p.mpad + r0) * p.lda + (kb - pass * per) * kc_;
    }

    // K [k0, k0 + kv) of rows [mn0, mn0 + rows) of a K-major operand, into L1.
    template <int kLocality = 3>
    static void prefetch_rows(const Operand& op, int64_t g, int64_t mn0, int64_t rows, int64_t k0, int64_t kv) {
        const int64_t first = op.type == kBF16 ? 2 * k0 : op.type == kE4M3 ? k0 : k0 / 2;
        const int64_t bytes = op.type == kBF16 ? 2 * kv : op.type == kE4M3 ? kv : kv / 2;
        for (int64_t r = 0; r < rows; ++r) {
            const char* row = reinterpret_cast<const char*>(op.row_base(g, mn0 + r)) + first;
            for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, kLocality);
        }
    }

    const uint32_t* a_block(const Job& job, const Prepared& p, int64_t kb, int64_t r0) const {
        return p.a + kb * p.mpad * kc_ / 2 + r0 * kcp_of(job, kb) / 2;
    }
    const uint32_t* b_block(const Job& job, const Prepared& p, int64_t kb, int64_t c0) const {
        return p.b + kb * npad_ * kc_ / 2 + c0 * kcp_of(job, kb) / 2;
    }
    // Lines [first, first + count) of the `total` 64-byte lines at `base`; kLocality 3 = into L1,
    // 2 = into L2 (__builtin_prefetch, so builds without x86 intrinsics keep compiling).
    template <int kLocality>
    static void prefetch_lines(const void* base, int64_t first, int64_t count, int64_t total) {
        const char* b = static_cast<const char*>(base);
        for (int64_t l = first; l < std::min(total, first + count); ++l) __builtin_prefetch(b + l * 64, 0, kLocality);
    }

    // The transposed product for few rows: D^T[64 columns, rows] = B . A^T. B's rows, converted to
    // BF16 8 at a time (no packing: the micro-kernel broadcasts straight from them), meet A packed
    // up front as 32-wide panels; B is read once, at its storage width, in sequential runs.
    void rows_task(const Job& job, const Prepared& p, int64_t c0, Scratch& s) {
        constexpr int R = MR;
        const int64_t apanels = p.mpad / NR, ld = kc_ + 2;   // ld even: rows are K-pair words
        float* acc = s.acc.get();                               // [R][mpad]
        float* acc_t = acc + R * p.mpad;                        // [mpad][R] for the epilogue
        float sb[R];
        for (int64_t n0 = c0; n0 < std::min(n_, c0 + 64); n0 += R) {
            const int64_t nv = std::min<int64_t>(R, n_ - n0);
            for (int64_t kb = 0; kb < p.nkb; ++kb) {
                const int64_t kv = std::min(kc_, job.klen - kb * kc_), kcp = kcp_of(job, kb), k0 = job.k0 + kb * kc_;
                // Whole blocks of plain BF16 rows are read in place; anything else is converted.
                // (rows read as 32-bit words: each must start 4-byte aligned, the group offset included)
                const bool in_place = b_.type == kBF16 && !b_.fold && nv == R && kv == kcp && b_.smn % 2 == 0 &&
                                      reinterpret_cast<uintptr_t>(b_.row_base(job.b_g, n0) + 2 * k0) % 4 == 0;
                const uint32_t* brows = reinterpret_cast<const uint32_t*>(s.tmp.get());
                int64_t bld = ld / 2;
                if (in_place) {
                    brows = reinterpret_cast<const uint32_t*>(b_.row_base(job.b_g, n0) + 2 * k0);
                    bld = b_.smn / 2;
                } else {
                    rows_to_bf16(b_, job.b_g, n0, nv, R, k0, kv, kcp, job.k0, job.kb0, s.tmp.get(), ld);
                }
                if (promote_)
                    block_scales(b_, job.b_g, n0, nv, R, job.kb0 + (kb * kc_) / std::max<int64_t>(b_.gk, 1), sb);
                // The rows' next K block (or the next rows' first) comes from DRAM in 8 short
                // runs the hardware prefetchers pick up too late: request it now.
                if (kb + 1 < p.nkb)
                    prefetch_rows(b_, job.b_g, n0, nv, job.k0 + (kb + 1) * kc_, kc_);
                else if (n0 + R < n_)
                    prefetch_rows(b_, job.b_g, n0 + R, std::min<int64_t>(R, n_ - n0 - R), job.k0, kc_);
                const uint32_t* ablk = p.a + kb * p.mpad * kc_ / 2;
                const float* sa = p.sa + kb * p.mpad;
                for (int64_t jp = 0; jp < apanels; ++jp) {
                    const uint32_t* A = ablk + jp * NR * kcp / 2;
                    if (promote_)
                        micro_kernel_strided<R, true>(kcp / 2, brows, 1, bld, A, acc + jp * NR, p.mpad, kb > 0, sb,
                                                      sa + jp * NR);
                    else
                        micro_kernel_strided<R, false>(kcp / 2, brows, 1, bld, A, acc + jp * NR, p.mpad, kb > 0,
                                                       nullptr, nullptr);
                }
            }
            if (p.nkb == 0) continue;
            for (int64_t i = 0; i < R; ++i)
                for (int64_t r = 0; r < job.m; ++r) acc_t[r * R + i] = acc[i * p.mpad + r];
            epilogue(o_, job.d_g, job.d_m0, n0, job.m, nv, acc_t, R);
        }
    }

    static constexpr int kMaxRows = 14;   // 2 * 14 accumulators + 2 B vectors fit the 32 registers
    template <int R>
    DJ_INLINE void rows_micro_r(int64_t kp, const uint32_t* A, int64_t lda, const uint32_t* B, float* C, bool acc,
                                const float* sa, const float* sb) const {
        if (promote_)
            micro_kernel_strided<R, true>(kp, A, 1, lda, B, C, NR, acc, sa, sb);
        else
            micro_kernel_strided<R, false>(kp, A, 1, lda, B, C, NR, acc, nullptr, nullptr);
    }
    // C[h x 32] over plain BF16 A rows (lda words apart) and one packed B panel, 1 <= h <= kMaxRows.
    void rows_micro(int h, int64_t kp, const uint32_t* A, int64_t lda, const uint32_t* B, float* C, bool acc,
                    const float* sa, const float* sb) const {
        switch (h) {
        case 1: return rows_micro_r<1>(kp, A, lda, B, C, acc, sa, sb);
        case 2: return rows_micro_r<2>(kp, A, lda, B, C, acc, sa, sb);
        case 3: return rows_micro_r<3>(kp, A, lda, B, C, acc, sa, sb);
        case 4: return rows_micro_r<4>(kp, A, lda, B, C, acc, sa, sb);
        case 5: return rows_micro_r<5>(kp, A, lda, B, C, acc, sa, sb);
        case 6: return rows_micro_r<6>(kp, A, lda, B, C, acc, sa, sb);
        case 7: return rows_micro_r<7>(kp, A, lda, B, C, acc, sa, sb);
        case 8: return rows_micro_r<8>(kp, A, lda, B, C, acc, sa, sb);
        case 9: return rows_micro_r<9>(kp, A, lda, B, C, acc, sa, sb);
        case 10: return rows_micro_r<10>(kp, A, lda, B, C, acc, sa, sb);
        case 11: return rows_micro_r<11>(kp, A, lda, B, C, acc, sa, sb);
        case 12: return rows_micro_r<12>(kp, A, lda, B, C, acc, sa, sb);
        case 13: return rows_micro_r<13>(kp, A, lda, B, C, acc, sa, sb);
        default: return rows_micro_r<14>(kp, A, lda, B, C, acc, sa, sb);
        }
    }

    // B's rows [c, c + 32) over K [k, k + kv) of the job into L2, where c < end.
    void prefetch_span(const Job& job, int64_t c, int64_t k, int64_t kv, int64_t end) const {
        if (c < end && kv > 0)
            prefetch_rows<2>(b_, job.b_g, c, std::min<int64_t>(NR, end - c), job.k0 + k, kv);
    }

    // Two B panels converted on the fly against all (few) rows of the job. With plain A rows a
    // panel spans up to 256 values of K (several promoted scale blocks): longer runs of each B row.
    void panel_task(const Job& job, const Prepared& p, int64_t c0, Scratch& s) {
        const int64_t ipanels = ceil_div(job.m, MR), end = std::min(n_, c0 + 64);
        const int64_t f = p.plain && kc_ % 32 == 0 ? std::max<int64_t>(1, kPanelK / kc_) : 1, step = f * kc_;
        const int64_t steps = ceil_div(p.nkb, f), ahead = std::max<int64_t>(1, 512 / step);
        float* acc = s.acc.get();
        for (int64_t c = c0; c < end; c += NR) {
            const int64_t nv = std::min<int64_t>(NR, n_ - c);
            for (int64_t st = 0; st < steps; ++st) {
                // B's rows come from DRAM in short runs (one K span of 32 rows) that the hardware
                // prefetchers pick up too late: the span about 512 values ahead (in this panel or
                // the task's next one) is requested into L2 now, the first ones when the task starts.
                if (b_.k_major())
                    for (int64_t t = (c == c0 && st == 0) ? 0 : ahead; t <= ahead; ++t) {
                        const int64_t k = ((st + t) % steps) * step;
                        prefetch_span(job, c + ((st + t) / steps) * NR, k, std::min(step, job.klen - k), end);
                    }
                const int64_t k0 = st * step, kv = std::min(step, job.klen - k0), kcp = ceil_div(kv, 32) * 32;
                pack_block(b_, job.b_g, c, nv, NR, NR, job.k0 + k0, kv, kcp, job.k0, job.kb0, s.tmp.get(),
                           s.exps.get(), s.panel.get());
                for (int64_t kb = st * f; kb < std::min(p.nkb, st * f + f); ++kb) {
                    const int64_t kcpb = kcp_of(job, kb);
                    const uint32_t* panel = s.panel.get() + (kb - st * f) * kc_ / 2 * NR;
                    const float* sa = p.sa + kb * p.mpad;
                    if (promote_)
                        block_scales(b_, job.b_g, c, nv, NR, job.kb0 + (kb * kc_) / std::max<int64_t>(b_.gk, 1),
                                     s.sb.get());
#ifdef DJ_HAVE_BRGEMM
                    if (p.plain) {   // brgemm: all the job's rows in one call
                        int64_t lda, kk;
                        const uint16_t* A = a_rows(job, p, kb, 0, lda, kk);
                        if (!brgemm_panel(job.m, NR, kk, A, lda, panel, acc, NR, kb > 0, promote_, sa, s.sb.get(),
                                          s.ctmp.get()))
                            return;
                        continue;
                    }
#endif
                    if (p.plain) {
                        // Rows in near-equal chunks of at most kMaxRows, each one exact-height tile.
                        const int64_t chunks = ceil_div(job.m, kMaxRows);
                        const uint32_t* arows = p.a + kb * kc_ / 2;
                        for (int64_t ci = 0, r = 0; ci < chunks; ++ci) {
                            const int64_t h = (job.m - r) / (chunks - ci);
                            rows_micro(static_cast<int>(h), kcpb / 2, arows + r * p.lda / 2, p.lda / 2, panel,
                                       acc + r * NR, kb > 0, sa + r, s.sb.get());
                            r += h;
                        }
                    } else {
                        const uint32_t* ablk = p.a + kb * p.mpad * kc_ / 2;
                        for (int64_t ip = 0; ip < ipanels; ++ip) {
                            float* cc = acc + ip * MR * NR;
                            const uint32_t* A = ablk + ip * MR * kcpb / 2;
                            if (promote_)
                                run_micro<true>(kcpb / 2, A, panel, cc, NR, kb > 0, sa + ip * MR, s.sb.get());
                            else
                                run_micro<false>(kcpb / 2, A, panel, cc, NR, kb > 0, nullptr, nullptr);
                        }
                    }
                }
            }
            if (p.nkb > 0) epilogue(o_, job.d_g, job.d_m0, c, job.m, nv, acc, NR);
        }
    }

    Operand a_, b_;
    Output o_;
    int64_t n_, threads_, kc_ = KC_FOLDED, npad_ = 0;
    bool promote_ = false;
    bool brgemm_ = false;   // the brgemm engine runs this problem (A plain rows)
    int64_t group_acc_ = 0;   // FP32 accumulators a group_task needs (0: no group tasks)
    bool stream_ok_ = false;  // operands stream_task takes (decode jobs go there)
    bool tr_ok_ = false;      // operands tr_task takes (few-row jobs on brgemm go there)
    int64_t stream_gb_ = 0;   // its scale block (0: no scales)
};

}  // namespace dg
