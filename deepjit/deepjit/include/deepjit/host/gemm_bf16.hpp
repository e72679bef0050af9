// The BF16 GEMM building block every library's host kernels share: packed panels, a
// register-blocked micro-kernel on the BF16 dot-product instruction (vdpbf16ps), and a simple
// threaded driver for plain row-major BF16 products.
//
// Packed format ("K-pair panels"). A panel holds W rows of an operand (W = MR for the left-hand
// side, W = NR = 32 for the right-hand side) over kc values of K, as 32-bit words: word
// [p * W + r] = bf16(x[r][2p]) | bf16(x[r][2p + 1]) << 16. The micro-kernel broadcasts one A word
// and multiplies it with 16 B words per vdpbf16ps, i.e. two K steps of 16 output columns.
// Rows past the operand's end and K past its end are packed as zeros, so the micro-kernel never
// needs edge cases; only the write-back of partial tiles does.
//
// Accumulation is FP32. The micro-kernel either accumulates into an FP32 tile (C += A.B),
// "promotes" a block product with per-row and per-column scales (C += (A.B) * sa[i] * sb[j]),
// which is how block-scaled FP8/FP4 GEMMs accumulate one scale block of K at a time, or rescales
// the rows of C first (C = C * sa[i] + A.B), which is how online-softmax attention folds in a
// block of values. The broadcast operand is either packed/strided words or BF16 row pointers.
//
// The instruction is the kernel's matrix engine (deepjit/host/matrix_engine.hpp): vdpbf16ps on
// the avx512bf16 engine; on the fma engine FP32 multiply-adds on the unpacked BF16 values, with
// AVX2 intrinsics where the target has them and portable code the compiler vectorises otherwise.
// Results agree to FP32 rounding.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include <sys/mman.h>

#include <deepjit/host/convert.hpp>
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>

// GCC 12 flags the undefined pass-through operand inside AVX-512 intrinsics as uninitialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace dj {
namespace gemm {

constexpr int NR = 32;      // columns of a right-hand panel: two 16-lane vectors
constexpr int MR = 8;       // rows of a left-hand panel in the default micro-kernel
constexpr int KC = 256;     // K values per packed block in the default driver

// 64-byte aligned scratch memory, freed by unique_ptr.
struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};
template <typename T>
using Buffer = std::unique_ptr<T[], FreeDeleter>;
template <typename T>
inline Buffer<T> alloc(int64_t n) {
    const size_t bytes = (static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return Buffer<T>(static_cast<T*>(p));
}

DJ_INLINE int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Big scratch (packed operands: tens of MB per GEMM) is recycled through a process-wide pool:
// fresh pages cost a fault and a zeroing per 4 KiB on every call (about 3 us each, 10-20% of a
// prefill GEMM). Pooled blocks are 2 MiB aligned and asked for transparent huge pages, which
// also spares the micro-kernel TLB misses when it walks the packed panels.
class ScratchPool {
public:
    static constexpr size_t kHuge = size_t(2) << 20;
    static constexpr size_t kKeep = size_t(1) << 30;   // bytes kept for reuse at most

    static ScratchPool& instance() {
        static ScratchPool pool;
        return pool;
    }
    void* take(size_t& bytes) {
        bytes = (bytes + kHuge - 1) / kHuge * kHuge;
        {
            std::lock_guard<std::mutex> lock(mu_);
            size_t best = free_.size();
            for (size_t i = 0; i < free_.size(); ++i)
                if (free_[i].bytes >= bytes && (best == free_.size() || free_[i].bytes < free_[best].bytes)) best = i;
            if (best < free_.size()) {
                const Block b = free_[best];
                free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
                kept_ -= b.bytes;
                bytes = b.bytes;
                return b.ptr;
            }
        }
        void* p = std::aligned_alloc(kHuge, bytes);
        if (p == nullptr) throw std::bad_alloc();
        madvise(p, bytes, MADV_HUGEPAGE);
        return p;
    }
    void give(void* p, size_t bytes) {
        std::lock_guard<std::mutex> lock(mu_);
        free_.push_back({p, bytes});
        kept_ += bytes;
        while (kept_ > kKeep) {   // drop the oldest blocks
            kept_ -= free_.front().bytes;
            std::free(free_.front().ptr);
            free_.erase(free_.begin());
        }
    }

private:
    struct Block {
        void* ptr;
        size_t bytes;
    };
    std::mutex mu_;
    std::vector<Block> free_;
    size_t kept_ = 0;
};

struct PoolDeleter {
    size_t bytes = 0;
    void operator()(void* p) const { ScratchPool::instance().give(p, bytes); }
};
template <typename T>
using Pooled = std::unique_ptr<T[], PoolDeleter>;
template <typename T>
inline Pooled<T> pooled(int64_t n) {
    size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T);
    void* p = ScratchPool::instance().take(bytes);
    return Pooled<T>(static_cast<T*>(p), PoolDeleter{bytes});
}

// ---- packing ----------------------------------------------------------------------------------
#ifdef DJ_HAVE_AVX512
// Words of 16 consecutive rows r0..r0+15 at K-pair p, stored into the panels of width W (8 or a
// multiple of 16) that hold those rows; panels are W * kp words apart.
DJ_INLINE void store_rows16(uint32_t* out, int W, int64_t kp, int64_t r0, int64_t p, __m512i v) {
    if (W % 16 == 0) {
        _mm512_storeu_si512(out + (r0 / W) * W * kp + p * W + r0 % W, v);
    } else {  // W == 8
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (r0 / 8) * 8 * kp + p * 8), _mm512_castsi512_si256(v));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (r0 / 8 + 1) * 8 * kp + p * 8),
                            _mm512_extracti64x4_epi64(v, 1));
    }
}

// 16 vectors of 16 words (v[row][col]) -> t[col][row]; v is clobbered.
DJ_INLINE void transpose16_words(__m512i* v, __m512i* t) {
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    // v[4q + s] holds, in each 128-bit lane L, words of rows 4q..4q+3 at column 4L + s; gather
    // lane L of the four q into one vector per column.
    for (int s = 0; s < 4; ++s) {
        const __m512i a01 = _mm512_shuffle_i32x4(v[s], v[4 + s], 0x44);
        const __m512i a23 = _mm512_shuffle_i32x4(v[8 + s], v[12 + s], 0x44);
        const __m512i b01 = _mm512_shuffle_i32x4(v[s], v[4 + s], 0xEE);
        const __m512i b23 = _mm512_shuffle_i32x4(v[8 + s], v[12 + s], 0xEE);
        t[s] = _mm512_shuffle_i32x4(a01, a23, 0x88);
        t[4 + s] = _mm512_shuffle_i32x4(a01, a23, 0xDD);
        t[8 + s] = _mm512_shuffle_i32x4(b01, b23, 0x88);
        t[12 + s] = _mm512_shuffle_i32x4(b01, b23, 0xDD);
    }
}
#endif

// Rows [0, nrows) of K-contiguous BF16 (row r at rows + r * ld, kc values, kc even) into
// nrows / W consecutive K-pair panels of width W. A transpose of 32-bit words per panel.
inline void pack_kmajor(const uint16_t* rows, int64_t ld, int64_t nrows, int W, int64_t kc, uint32_t* DJ_RESTRICT out) {
    const int64_t kp = kc / 2;
#ifdef DJ_HAVE_AVX512
    if (nrows % 16 == 0 && (W == 8 || W % 16 == 0) && kp % 16 == 0 && ld % 2 == 0) {
        for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
            for (int64_t p0 = 0; p0 < kp; p0 += 16) {
                __m512i v[16], t[16];
                for (int i = 0; i < 16; ++i)
                    v[i] = _mm512_loadu_si512(reinterpret_cast<const uint32_t*>(rows + (r0 + i) * ld) + p0);
                transpose16_words(v, t);
                for (int c = 0; c < 16; ++c) store_rows16(out, W, kp, r0, p0 + c, t[c]);
            }
        }
        return;
    }
#endif
    for (int64_t r = 0; r < nrows; ++r) {
        uint32_t* panel = out + (r / W) * W * kp + r % W;
        const uint16_t* s16 = rows + r * ld;
        for (int64_t p = 0; p < kp; ++p) panel[p * W] = s16[2 * p] | (static_cast<uint32_t>(s16[2 * p + 1]) << 16);
    }
}

// kc rows of MN-contiguous BF16 (K index k at rows + k * ld, nrows values each) into nrows / W
// consecutive K-pair panels of width W: rows 2p and 2p+1 interleaved word by word.
inline void pack_mnmajor(const uint16_t* rows, int64_t ld, int64_t nrows, int W, int64_t kc, uint32_t* DJ_RESTRICT out) {
    const int64_t kp = kc / 2;
#ifdef DJ_HAVE_AVX512
    if (nrows % 32 == 0 && (W == 8 || W % 16 == 0)) {
        const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
        const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
        for (int64_t p = 0; p < kp; ++p) {
            const uint16_t* r0 = rows + (2 * p) * ld;
            const uint16_t* r1 = r0 + ld;
            for (int64_t c = 0; c < nrows; c += 32) {
                const __m512i x = _mm512_loadu_si512(r0 + c), y = _mm512_loadu_si512(r1 + c);
                store_rows16(out, W, kp, c, p, _mm512_permutex2var_epi16(x, lo, y));
                store_rows16(out, W, kp, c + 16, p, _mm512_permutex2var_epi16(x, hi, y));
            }
        }
        return;
    }
#endif
    for (int64_t p = 0; p < kp; ++p)
        for (int64_t r = 0; r < nrows; ++r)
            out[(r / W) * W * kp + p * W + r % W] =
                rows[(2 * p) * ld + r] | (static_cast<uint32_t>(rows[(2 * p + 1) * ld + r]) << 16);
}

// ---- micro-kernel -----------------------------------------------------------------------------
// C[i][j] for i < R, j < 32 (row stride ldc) over kp K-pairs of a broadcast operand A and a
// packed B panel (width 32). How the block product P = A.B meets C (row i, column j):
enum class Combine {
    Add,       // C = (accumulate ? C : 0) + P
    Promote,   // C = (accumulate ? C : 0) + P * sa[i] * sb[j]   (one scale block of FP8/FP4 K)
    Rescale,   // C = (accumulate ? C * sa[i] : 0) + P            (online softmax: O * rescale + P.V)
};

// Where the broadcast operand's words are: word(p, i) is row i's word at K-pair p.
// StridedRows: A[p * step + i * row]. A packed panel of width R is (step, row) = (R, 1); plain
// K-contiguous BF16 rows `lda` words apart are (1, lda), which spares packing the operand.
struct StridedRows {
    const uint32_t* A;
    int64_t step, row;
    DJ_INLINE uint32_t word(int64_t p, int i) const { return A[p * step + i * row]; }
};
// PointerRows: BF16 rows anywhere in memory (gathered tokens), row i at rows[i], K contiguous;
// word p of row i is rows[i][2p] | rows[i][2p + 1] << 16. Rows need only 2-byte alignment.
struct PointerRows {
    const uint16_t* const* rows;
    DJ_INLINE uint32_t word(int64_t p, int i) const {
        uint32_t w;
        std::memcpy(&w, rows[i] + 2 * p, 4);
        return w;
    }
};

#ifdef DJ_HAVE_AVX2_FMA
// The fma engine on AVX2: rows [R0, R0 + G) by 16 columns [c0, c0 + 16) of C, G <= 4 so the 2G
// accumulators, 4 B vectors and the broadcast A word fit the 16 registers. A BF16 value is the
// high half of its FP32 value: the even-K half of a word is shifted up, the odd-K half masked.
template <int G, Combine kMode, typename Rows>
DJ_INLINE void fma_block(int64_t kp, const Rows& a, int R0, const uint32_t* DJ_RESTRICT B, int c0,
                         float* DJ_RESTRICT C, int64_t ldc, bool accumulate, const float* sa, const float* sb) {
    const __m256i odd = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m256 acc[G][2];
    for (int i = 0; i < G; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < kp; ++p) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(B + p * NR + c0));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(B + p * NR + c0 + 8));
        const __m256 be0 = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));
        const __m256 bo0 = _mm256_castsi256_ps(_mm256_and_si256(w0, odd));
        const __m256 be1 = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));
        const __m256 bo1 = _mm256_castsi256_ps(_mm256_and_si256(w1, odd));
#pragma GCC unroll 4
        for (int i = 0; i < G; ++i) {
            const __m256i w = _mm256_set1_epi32(static_cast<int>(a.word(p, R0 + i)));
            const __m256 ae = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
            const __m256 ao = _mm256_castsi256_ps(_mm256_and_si256(w, odd));
            acc[i][0] = _mm256_fmadd_ps(ao, bo0, _mm256_fmadd_ps(ae, be0, acc[i][0]));
            acc[i][1] = _mm256_fmadd_ps(ao, bo1, _mm256_fmadd_ps(ae, be1, acc[i][1]));
        }
    }
    for (int i = 0; i < G; ++i) {
        float* c = C + (R0 + i) * ldc + c0;
        for (int h = 0; h < 2; ++h) {
            __m256 v = acc[i][h];
            if (kMode == Combine::Promote)
                v = _mm256_mul_ps(v, _mm256_mul_ps(_mm256_loadu_ps(sb + c0 + 8 * h), _mm256_set1_ps(sa[R0 + i])));
            if (accumulate) {
                const __m256 old = _mm256_loadu_ps(c + 8 * h);
                v = kMode == Combine::Rescale ? _mm256_fmadd_ps(old, _mm256_set1_ps(sa[R0 + i]), v)
                                              : _mm256_add_ps(old, v);
            }
            _mm256_storeu_ps(c + 8 * h, v);
        }
    }
}

// Rows [R0, R) in groups of up to 4, each over both 16-column halves of the panel.
template <int R, int R0, Combine kMode, typename Rows>
DJ_INLINE void fma_rows(int64_t kp, const Rows& a, const uint32_t* DJ_RESTRICT B, float* DJ_RESTRICT C,
                        int64_t ldc, bool accumulate, const float* sa, const float* sb) {
    if constexpr (R0 < R) {
        constexpr int G = R - R0 < 4 ? R - R0 : 4;
        fma_block<G, kMode>(kp, a, R0, B, 0, C, ldc, accumulate, sa, sb);
        fma_block<G, kMode>(kp, a, R0, B, 16, C, ldc, accumulate, sa, sb);
        fma_rows<R, R0 + G, kMode>(kp, a, B, C, ldc, accumulate, sa, sb);
    }
}
#endif

// The one loop body every micro-kernel variant runs; Rows is StridedRows or PointerRows.
template <int R, Combine kMode, typename Rows>
DJ_INLINE void micro_kernel_core(int64_t kp, const Rows& a, const uint32_t* DJ_RESTRICT B, float* DJ_RESTRICT C,
                                 int64_t ldc, bool accumulate, const float* sa, const float* sb) {
#ifdef DJ_HAVE_AVX512_BF16
    // Accumulators start at zero and C is added after the loop: loading C first (often from L2)
    // would hold up the first products of every call.
    __m512 acc[R][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kp; ++p) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(B + p * NR);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(B + p * NR + 16);
        _mm_prefetch(reinterpret_cast<const char*>(B + (p + 8) * NR), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(B + (p + 8) * NR + 16), _MM_HINT_T0);
#pragma GCC unroll 16
        for (int i = 0; i < R; ++i) {
            const __m512bh w = (__m512bh)_mm512_set1_epi32(static_cast<int>(a.word(p, i)));
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w, b1);
        }
    }
    if (kMode == Combine::Promote) {
        const __m512 s0 = _mm512_loadu_ps(sb), s1 = _mm512_loadu_ps(sb + 16);
        for (int i = 0; i < R; ++i) {
            const __m512 si = _mm512_set1_ps(sa[i]);
            __m512 c0 = accumulate ? _mm512_loadu_ps(C + i * ldc) : _mm512_setzero_ps();
            __m512 c1 = accumulate ? _mm512_loadu_ps(C + i * ldc + 16) : _mm512_setzero_ps();
            c0 = _mm512_fmadd_ps(acc[i][0], _mm512_mul_ps(s0, si), c0);
            c1 = _mm512_fmadd_ps(acc[i][1], _mm512_mul_ps(s1, si), c1);
            _mm512_storeu_ps(C + i * ldc, c0);
            _mm512_storeu_ps(C + i * ldc + 16, c1);
        }
    } else {
        for (int i = 0; i < R; ++i) {
            __m512 c0 = acc[i][0], c1 = acc[i][1];
            if (accumulate && kMode == Combine::Rescale) {
                const __m512 si = _mm512_set1_ps(sa[i]);
                c0 = _mm512_fmadd_ps(_mm512_loadu_ps(C + i * ldc), si, c0);
                c1 = _mm512_fmadd_ps(_mm512_loadu_ps(C + i * ldc + 16), si, c1);
            } else if (accumulate) {
                c0 = _mm512_add_ps(c0, _mm512_loadu_ps(C + i * ldc));
                c1 = _mm512_add_ps(c1, _mm512_loadu_ps(C + i * ldc + 16));
            }
            _mm512_storeu_ps(C + i * ldc, c0);
            _mm512_storeu_ps(C + i * ldc + 16, c1);
        }
    }
#elif defined(DJ_HAVE_AVX2_FMA)
    fma_rows<R, 0, kMode>(kp, a, B, C, ldc, accumulate, sa, sb);
#else
    float acc[R][NR];
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = 0.0f;
    for (int64_t p = 0; p < kp; ++p) {
        float b0[NR], b1[NR];
        for (int j = 0; j < NR; ++j) {
            b0[j] = bf16_to_f32(static_cast<uint16_t>(B[p * NR + j]));
            b1[j] = bf16_to_f32(static_cast<uint16_t>(B[p * NR + j] >> 16));
        }
        for (int i = 0; i < R; ++i) {
            const uint32_t w = a.word(p, i);
            const float a0 = bf16_to_f32(static_cast<uint16_t>(w));
            const float a1 = bf16_to_f32(static_cast<uint16_t>(w >> 16));
            for (int j = 0; j < NR; ++j) acc[i][j] += a0 * b0[j] + a1 * b1[j];
        }
    }
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < NR; ++j) {
            float base = accumulate ? C[i * ldc + j] : 0.0f;
            if (kMode == Combine::Rescale && accumulate) base *= sa[i];
            C[i * ldc + j] = kMode == Combine::Promote ? base + acc[i][j] * sa[i] * sb[j] : base + acc[i][j];
        }
#endif
}

// The micro-kernel on strided A words (see StridedRows).
//   kPromote == false: C = (accumulate ? C : 0) + A.B
//   kPromote == true:  C = (accumulate ? C : 0) + (A.B) * sa[i] * sb[j]
template <int R, bool kPromote>
DJ_INLINE void micro_kernel_strided(int64_t kp, const uint32_t* DJ_RESTRICT A, int64_t a_step, int64_t a_row,
                                    const uint32_t* DJ_RESTRICT B, float* DJ_RESTRICT C, int64_t ldc,
                                    bool accumulate, const float* sa, const float* sb) {
    micro_kernel_core<R, kPromote ? Combine::Promote : Combine::Add>(kp, StridedRows{A, a_step, a_row}, B, C, ldc,
                                                                     accumulate, sa, sb);
}

// The micro-kernel on R BF16 rows given by pointers (see PointerRows), any combine mode.
template <int R, Combine kMode>
DJ_INLINE void micro_kernel_rows(int64_t kp, const uint16_t* const* rows, const uint32_t* DJ_RESTRICT B,
                                 float* DJ_RESTRICT C, int64_t ldc, bool accumulate, const float* sa = nullptr,
                                 const float* sb = nullptr) {
    micro_kernel_core<R, kMode>(kp, PointerRows{rows}, B, C, ldc, accumulate, sa, sb);
}

// The micro-kernel on a packed A panel of width R.
template <int R, bool kPromote>
DJ_INLINE void micro_kernel(int64_t kp, const uint32_t* DJ_RESTRICT A, const uint32_t* DJ_RESTRICT B,
                            float* DJ_RESTRICT C, int64_t ldc, bool accumulate, const float* sa = nullptr,
                            const float* sb = nullptr) {
    micro_kernel_strided<R, kPromote>(kp, A, R, 1, B, C, ldc, accumulate, sa, sb);
}

// ---- BF16 row conversion helpers --------------------------------------------------------------
// FP32 -> BF16 for n values (round to nearest even).
inline void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n) {
    int64_t i = 0;
#ifdef DJ_HAVE_AVX512
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), f32x16_to_bf16(_mm512_loadu_ps(src + i)));
#endif
    for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

// ---- a simple single-threaded BF16 product for other kernels' inner loops ---------------------
// C[M x N] (FP32, row stride ldc) = (accumulate ? C : 0) + A[M x K] . B[N x K]^T, both BF16 with
// K contiguous (row strides lda, ldb). Scratch is allocated per call; callers inside hot loops
// should size blocks so M, N, K are at least a few dozen.
inline void bf16_gemm_nt(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* B,
                         int64_t ldb, float* C, int64_t ldc, bool accumulate) {
    if (M <= 0 || N <= 0) return;
    const int64_t kc_max = std::min<int64_t>(KC, (K + 1) / 2 * 2);
    const int64_t mp = ceil_div(M, 16) * 16;   // whole 16-row groups let packing use vector transposes
    auto tmp = alloc<uint16_t>(std::max<int64_t>(mp, NR) * (kc_max + 32));
    auto apack = alloc<uint32_t>(mp * kc_max / 2 + 16);
    auto bpack = alloc<uint32_t>(NR * kc_max / 2 + 16);
    alignas(64) float ctile[MR * NR];
    const int64_t ld_tmp = kc_max + 32;
    for (int64_t k0 = 0; k0 < std::max<int64_t>(K, 1); k0 += KC) {
        const int64_t kv = std::min<int64_t>(KC, K - k0), kc = (kv + 1) / 2 * 2;
        const bool acc_k = accumulate || k0 > 0;
        // Left-hand rows, zero padded to mp rows and kc columns.
        for (int64_t r = 0; r < mp; ++r) {
            uint16_t* t = tmp.get() + r * ld_tmp;
            if (r < M && kv > 0) std::memcpy(t, A + r * lda + k0, kv * 2);
            for (int64_t k = (r < M ? kv : 0); k < kc; ++k) t[k] = 0;
        }
        pack_kmajor(tmp.get(), ld_tmp, mp, MR, kc, apack.get());
        for (int64_t n0 = 0; n0 < N; n0 += NR) {
            const int64_t nv = std::min<int64_t>(NR, N - n0);
            for (int64_t r = 0; r < NR; ++r) {
                uint16_t* t = tmp.get() + r * ld_tmp;
                if (r < nv && kv > 0) std::memcpy(t, B + (n0 + r) * ldb + k0, kv * 2);
                for (int64_t k = (r < nv ? kv : 0); k < kc; ++k) t[k] = 0;
            }
            pack_kmajor(tmp.get(), ld_tmp, NR, NR, kc, bpack.get());
            for (int64_t m0 = 0; m0 < M; m0 += MR) {
                const int64_t mv = std::min<int64_t>(MR, M - m0);
                const bool full = mv == MR && nv == NR;
                float* c = full ? C + m0 * ldc + n0 : ctile;
                const int64_t ld = full ? ldc : NR;
                if (!full && acc_k)
                    for (int64_t i = 0; i < mv; ++i) std::memcpy(ctile + i * NR, C + (m0 + i) * ldc + n0, nv * 4);
                micro_kernel<MR, false>(kc / 2, apack.get() + m0 * kc / 2, bpack.get(), c, ld, acc_k);
                if (!full)
                    for (int64_t i = 0; i < mv; ++i) std::memcpy(C + (m0 + i) * ldc + n0, ctile + i * NR, nv * 4);
            }
        }
        if (K <= 0) break;
    }
}

}  // namespace gemm
}  // namespace dj
