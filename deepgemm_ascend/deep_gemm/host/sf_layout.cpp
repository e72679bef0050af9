// Scale-factor layout transforms: strided FP32 copies with per-row broadcast, and UE8M0 packing
// and unpacking (exponent bytes little-endian in int32 / int16 words).
//
// The usual case reads K-contiguous rows and writes an MN-major output (the TMA-aligned form):
// a transpose. With AVX-512 it runs on 16-row blocks: each input row becomes one vector (16
// K values, or 16 packed words), a 16 x 16 register transpose turns them into 16 MN-contiguous
// vectors, and those are stored with a row mask. Other strides take a scalar path that walks
// 64-row blocks; input row offsets (row i reads row i / gran) are computed once per block.
#include <deepjit/host/convert.hpp>
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>
#include <deep_gemm/host/sf_layout_args.hpp>

#include <algorithm>
#include <cstring>

// GCC 12 flags the undefined pass-through operand inside AVX-512 intrinsics as uninitialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {
enum Mode : int { kCopy = 0, kPack = 1, kUnpack = 2 };
constexpr int64_t BLOCK = 128;

struct Shape {
    int64_t MN, SK, words, gran, isb, ism, isk, osb, osm, osk;
    int per_word, mode;
    bool stream;   // output larger than the caches
};

#ifdef DJ_HAVE_AVX512
// r[i] lane j -> r[j] lane i for 16 vectors of 32-bit lanes.
inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {   // r[i + s], lane L: rows i..i+3 of column 4L + s
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int s = 0; s < 4; ++s) {
        const __m512i a01 = _mm512_shuffle_i32x4(r[s], r[4 + s], 0x44), a23 = _mm512_shuffle_i32x4(r[8 + s], r[12 + s], 0x44);
        const __m512i b01 = _mm512_shuffle_i32x4(r[s], r[4 + s], 0xEE), b23 = _mm512_shuffle_i32x4(r[8 + s], r[12 + s], 0xEE);
        t[s] = _mm512_shuffle_i32x4(a01, a23, 0x88);
        t[4 + s] = _mm512_shuffle_i32x4(a01, a23, 0xDD);
        t[8 + s] = _mm512_shuffle_i32x4(b01, b23, 0x88);
        t[12 + s] = _mm512_shuffle_i32x4(b01, b23, 0xDD);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
}

DJ_INLINE __mmask16 lanes(int64_t n) { return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1); }
// The first min(n, 16) lanes; plain (unmasked) accesses when whole, as masked ones are slower.
DJ_INLINE __m512i load16(const uint32_t* p, int64_t n) {
    if (n >= 16) return _mm512_loadu_si512(p);
    return n > 0 ? _mm512_maskz_loadu_epi32(lanes(n), p) : _mm512_setzero_si512();
}
// K values [k, k + 64) of a row (zeros past SK) -> their 64 exponent bytes, as 16 words.
DJ_INLINE __m512i exponent_bytes(const uint32_t* row, int64_t k, int64_t SK) {
    __m128i e[4];
    for (int q = 0; q < 4; ++q)   // the sign bit of a scale is 0: bits 23..30 are the exponent
        e[q] = _mm512_cvtepi32_epi8(_mm512_srli_epi32(load16(row + k + 16 * q, SK - k - 16 * q), 23));
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(e[1], e[0])), _mm256_set_m128i(e[3], e[2]), 1);
}
// Whole aligned vectors of outputs too big for the caches bypass them (no read for ownership).
DJ_INLINE void store16(uint32_t* p, int64_t n, __m512i v, bool stream) {
    if (n >= 16 && stream && reinterpret_cast<uintptr_t>(p) % 64 == 0)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v);
    else if (n >= 16)
        _mm512_storeu_si512(p, v);
    else
        _mm512_mask_storeu_epi32(p, lanes(n), v);
}

// Copy or pack rows [m_begin, m_end) (at most BLOCK) of one batch entry: K-contiguous in,
// MN-contiguous out. Up to 64 output columns at a time: 16-row groups are read once (each row's
// values stay in L1 across the column chunks), transposed into an L1 buffer, and the buffer
// leaves as one contiguous run per column (the columns are a multiple of 4 KiB apart, so
// writing 16 of them per transpose would thrash the cache sets and the write combining).
void transpose_block(const Shape& s, const uint32_t* src, uint32_t* dst, int64_t m_begin, int64_t m_end) {
    constexpr int64_t GROUP = 64;
    const int64_t cols = s.mode == kCopy ? s.SK : s.words;   // output columns (K values or words)
    alignas(64) uint32_t buf[GROUP * BLOCK];
    const uint32_t* rows_in[BLOCK];
    for (int64_t m = m_begin, q = m_begin / s.gran, rem = m_begin % s.gran; m < m_end; ++m) {
        rows_in[m - m_begin] = src + q * s.ism;
        if (++rem == s.gran) rem = 0, ++q;
    }
    for (int64_t g0 = 0; g0 < cols; g0 += GROUP) {
        const int64_t gcols = std::min(GROUP, cols - g0);
        for (int64_t m0 = m_begin; m0 < m_end; m0 += 16) {
            const int64_t rows = std::min<int64_t>(16, m_end - m0);
            for (int64_t c0 = g0; c0 < g0 + gcols; c0 += 16) {
                // Rows past the end repeat the last row (their lanes are never stored), so the
                // loads unroll without branches and r stays in registers.
                __m512i r[16];
                if (s.mode == kCopy) {
#pragma GCC unroll 16
                    for (int i = 0; i < 16; ++i) r[i] = load16(rows_in[m0 - m_begin + std::min<int64_t>(i, rows - 1)] + c0, s.SK - c0);
                } else {
#pragma GCC unroll 16
                    for (int i = 0; i < 16; ++i) r[i] = exponent_bytes(rows_in[m0 - m_begin + std::min<int64_t>(i, rows - 1)], c0 * 4, s.SK);
                }
                transpose16(r);
                for (int c = 0; c < 16; ++c) _mm512_store_si512(buf + (c0 - g0 + c) * BLOCK + (m0 - m_begin), r[c]);
            }
        }
        for (int64_t c = 0; c < gcols; ++c) {
            uint32_t* out = dst + (g0 + c) * s.osk;
            for (int64_t m = m_begin; m < m_end; m += 16)
                store16(out + m, m_end - m, _mm512_load_si512(buf + c * BLOCK + (m - m_begin)), s.stream);
        }
    }
}
#endif

// Rows [m0, m1) of one batch entry, any strides.
void scalar_block(const Shape& s, const void* in, void* out, int64_t m0, int64_t m1) {
    int64_t row_off[BLOCK];
    for (int64_t m = m0; m < m1; ++m) row_off[m - m0] = (m / s.gran) * s.ism;
    if (s.mode == kCopy) {
        const float* src = static_cast<const float*>(in);
        float* dst = static_cast<float*>(out);
        for (int64_t k = 0; k < s.SK; ++k)
            for (int64_t m = m0; m < m1; ++m) dst[m * s.osm + k * s.osk] = src[row_off[m - m0] + k * s.isk];
    } else if (s.mode == kPack && s.isk == 1) {
        // K-contiguous rows: pack each row's words into a small buffer (in-order reads the compiler
        // vectorises), then store the buffer transposed, instead of walking the input word by word.
        const uint32_t* src = static_cast<const uint32_t*>(in);
        constexpr int64_t kWords = 32;
        uint32_t buf[BLOCK * kWords];
        const int64_t full = s.SK / s.per_word;   // words with every byte inside SK
        for (int64_t w0 = 0; w0 < s.words; w0 += kWords) {
            const int64_t nw = std::min(kWords, s.words - w0);
            for (int64_t m = m0; m < m1; ++m) {
                const uint32_t* row = src + row_off[m - m0] + w0 * s.per_word;
                uint32_t* b = buf + (m - m0) * kWords;
                const int64_t nfull = std::max<int64_t>(0, std::min(nw, full - w0));
                if (s.per_word == 4) {
                    for (int64_t w = 0; w < nfull; ++w)
                        b[w] = ((row[4 * w] >> 23) & 0xFFu) | (((row[4 * w + 1] >> 23) & 0xFFu) << 8) |
                               (((row[4 * w + 2] >> 23) & 0xFFu) << 16) | (((row[4 * w + 3] >> 23) & 0xFFu) << 24);
                } else {
                    for (int64_t w = 0; w < nfull; ++w)
                        b[w] = ((row[2 * w] >> 23) & 0xFFu) | (((row[2 * w + 1] >> 23) & 0xFFu) << 8);
                }
                for (int64_t w = nfull; w < nw; ++w) {   // the last word: bytes past SK are 0
                    uint32_t word = 0;
                    for (int j = 0; j < s.per_word; ++j)
                        if ((w0 + w) * s.per_word + j < s.SK) word |= ((row[w * s.per_word + j] >> 23) & 0xFFu) << (8 * j);
                    b[w] = word;
                }
            }
            for (int64_t w = 0; w < nw; ++w) {
                const int64_t o = (w0 + w) * s.osk;
                if (s.per_word == 4) {
                    uint32_t* dst = static_cast<uint32_t*>(out) + o;
                    for (int64_t m = m0; m < m1; ++m) dst[m * s.osm] = buf[(m - m0) * kWords + w];
                } else {
                    uint16_t* dst = static_cast<uint16_t*>(out) + o;
                    for (int64_t m = m0; m < m1; ++m) dst[m * s.osm] = static_cast<uint16_t>(buf[(m - m0) * kWords + w]);
                }
            }
        }
    } else if (s.mode == kPack) {
        const uint32_t* src = static_cast<const uint32_t*>(in);
        for (int64_t w = 0; w < s.words; ++w)
            for (int64_t m = m0; m < m1; ++m) {
                uint32_t word = 0;
                for (int j = 0; j < s.per_word; ++j) {
                    const int64_t k = w * s.per_word + j;
                    if (k < s.SK) word |= ((src[row_off[m - m0] + k * s.isk] >> 23) & 0xFFu) << (8 * j);
                }
                const int64_t o = m * s.osm + w * s.osk;
                if (s.per_word == 4)
                    static_cast<uint32_t*>(out)[o] = word;
                else
                    static_cast<uint16_t*>(out)[o] = static_cast<uint16_t>(word);
            }
    } else {
        float* dst = static_cast<float*>(out);
        const int shift = s.per_word == 4 ? 2 : 1;
        for (int64_t k = 0; k < s.SK; ++k) {
            const int64_t w = k >> shift, byte = k & (s.per_word - 1);
            for (int64_t m = m0; m < m1; ++m) {
                const int64_t i = m * s.ism + w * s.isk;
                const uint32_t word = s.per_word == 4 ? static_cast<const uint32_t*>(in)[i] : static_cast<const uint16_t*>(in)[i];
                dst[m * s.osm + k * s.osk] = dj::ue8m0_to_f32(static_cast<uint8_t>(word >> (8 * byte)));
            }
        }
    }
}

}  // namespace

DJ_KERNEL(dg_sf_layout, "ptr,ptr,ptr,i64")
void dg_sf_layout(const dg::SfLayoutArgs* p, const void* in, void* out, int64_t threads) {
    const int64_t B = p->batch;
    const int mode = static_cast<int>(p->mode), per_word = static_cast<int>(p->per_word);
    const int64_t out_bytes = B * p->mn * (mode == kPack ? p->words * per_word : p->sk * 4);
    const Shape s{p->mn, p->sk, p->words, std::max<int64_t>(p->gran, 1), p->in_b, p->in_mn, p->in_k, p->out_b,
                  p->out_mn, p->out_k, per_word, mode, out_bytes > (int64_t(8) << 20)};
    const int64_t blocks = (s.MN + BLOCK - 1) / BLOCK;
    const int64_t in_elem = s.mode == kUnpack ? s.per_word : 4, out_elem = s.mode == kPack ? s.per_word : 4;
#ifdef DJ_HAVE_AVX512
    const bool fast = s.mode != kUnpack && s.isk == 1 && s.osm == 1 && (s.mode == kCopy || s.per_word == 4);
#endif
    // Blocks of BLOCK rows per item: enough work to amortise the item, few enough to balance threads.
    dj::parallel_for(B * blocks, threads, [&](int64_t item) {
        const int64_t b = item / blocks, m0 = (item % blocks) * BLOCK, m1 = std::min(s.MN, m0 + BLOCK);
        const void* src = static_cast<const uint8_t*>(in) + b * s.isb * in_elem;
        void* dst = static_cast<uint8_t*>(out) + b * s.osb * out_elem;
#ifdef DJ_HAVE_AVX512
        if (fast) {
            transpose_block(s, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), m0, m1);
            if (s.stream) _mm_sfence();   // streamed stores visible before the kernel returns
            return;
        }
#endif
        scalar_block(s, src, dst, m0, m1);
    });
}
