// out[b, j, i] = x[b, i, j] for 1/2/4/8-byte elements, in 64 x 64 tiles so both sides stream
// whole cache lines. 1- and 2-byte elements move as 8x8 / 4x4 blocks transposed inside 64-bit
// words (three / two rounds of masked swaps), the rest element by element.
#include <tile_kernels/host/common.hpp>

namespace {

template <typename T>
DJ_INLINE uint64_t load64(const T* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
template <typename T>
DJ_INLINE void store64(T* p, uint64_t v) { std::memcpy(p, &v, 8); }

DJ_INLINE void swap_blocks(uint64_t& a, uint64_t& b, int shift, uint64_t mask) {
    const uint64_t t = ((a >> shift) ^ b) & mask;
    b ^= t;
    a ^= t << shift;
}

// One W x W block (W = 8 / sizeof(T)) at (i, j): rows of the source become rows of the output.
template <typename T>
DJ_INLINE void block(T* dst, const T* src, int64_t M, int64_t sm, int64_t i, int64_t j) {
    constexpr int W = 8 / sizeof(T);
    uint64_t r[W];
    for (int a = 0; a < W; ++a) r[a] = load64(src + (i + a) * sm + j);
    if (W == 8) {
        for (int a = 0; a < 4; ++a) swap_blocks(r[a], r[a + 4], 32, 0x00000000FFFFFFFFull);
        for (int a : {0, 1, 4, 5}) swap_blocks(r[a], r[a + 2], 16, 0x0000FFFF0000FFFFull);
        for (int a : {0, 2, 4, 6}) swap_blocks(r[a], r[a + 1], 8, 0x00FF00FF00FF00FFull);
    } else {
        for (int a = 0; a < 2; ++a) swap_blocks(r[a], r[a + 2], 32, 0x00000000FFFFFFFFull);
        for (int a : {0, 2}) swap_blocks(r[a], r[a + 1], 16, 0x0000FFFF0000FFFFull);
    }
    for (int a = 0; a < W; ++a) store64(dst + (j + a) * M + i, r[a]);
}

#ifdef DJ_HAVE_AVX512
// A 64-row x 16-column byte block at (i, j) as four 16 x 16 transposes, one per 128-bit lane
// (lane L holds rows i + 16 L ..): four rounds of lane-local unpacks (bytes, words, dwords,
// qwords) leave column k of every lane's rows in register k, i.e. all 64 bytes of output row
// j + k at column i: whole cache lines are written, with non-temporal stores when aligned (the
// output lines are M bytes apart: regular stores would first read each line from memory and
// keep it in a cache set that every block hits; streaming them is about 2.5x faster).
template <bool STREAM>
DJ_INLINE void block64x16(uint8_t* dst, const uint8_t* src, int64_t M, int64_t sm, int64_t i, int64_t j) {
    __m512i r[16], t[16];
    for (int a = 0; a < 16; ++a) {
        const uint8_t* p = src + (i + a) * sm + j;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * sm)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 * sm)), 2);
        r[a] = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 48 * sm)), 3);
    }
    for (int a = 0; a < 8; ++a) {  // (row 2a, row 2a+1) byte pairs; columns 0-7 / 8-15
        t[2 * a] = _mm512_unpacklo_epi8(r[2 * a], r[2 * a + 1]);
        t[2 * a + 1] = _mm512_unpackhi_epi8(r[2 * a], r[2 * a + 1]);
    }
    for (int q = 0; q < 4; ++q) {  // rows 4q .. 4q+3 per dword; register 4q + c holds columns 4c .. 4c+3
        r[4 * q + 0] = _mm512_unpacklo_epi16(t[4 * q + 0], t[4 * q + 2]);
        r[4 * q + 1] = _mm512_unpackhi_epi16(t[4 * q + 0], t[4 * q + 2]);
        r[4 * q + 2] = _mm512_unpacklo_epi16(t[4 * q + 1], t[4 * q + 3]);
        r[4 * q + 3] = _mm512_unpackhi_epi16(t[4 * q + 1], t[4 * q + 3]);
    }
    for (int o = 0; o < 2; ++o)  // rows 8o .. 8o+7 per qword; register 8o + m holds columns 2m, 2m+1
        for (int c = 0; c < 4; ++c) {
            t[8 * o + 2 * c] = _mm512_unpacklo_epi32(r[8 * o + c], r[8 * o + 4 + c]);
            t[8 * o + 2 * c + 1] = _mm512_unpackhi_epi32(r[8 * o + c], r[8 * o + 4 + c]);
        }
    for (int m = 0; m < 16; ++m) {  // all 16 rows: register k holds column k
        const __m512i v = m % 2 ? _mm512_unpackhi_epi64(t[m / 2], t[8 + m / 2]) : _mm512_unpacklo_epi64(t[m / 2], t[8 + m / 2]);
        uint8_t* o = dst + (j + m) * M + i;
        if (STREAM) _mm512_stream_si512(reinterpret_cast<__m512i*>(o), v);
        else _mm512_storeu_si512(o, v);
    }
}
#endif

template <typename T>
void run(T* out, const T* x, int64_t B, int64_t M, int64_t N, int64_t sb, int64_t sm, int64_t threads) {
    constexpr int64_t kTile = 64, W = sizeof(T) <= 2 ? 8 / sizeof(T) : 1;
    const int64_t tm = (M + kTile - 1) / kTile, tn = (N + kTile - 1) / kTile;
    dj::parallel_for(B * tm * tn, threads, [&](int64_t item) {
        const int64_t b = item / (tm * tn), i0 = (item / tn) % tm * kTile, j0 = item % tn * kTile;
        const int64_t i1 = std::min(M, i0 + kTile), j1 = std::min(N, j0 + kTile);
        const T* src = x + b * sb;
        T* dst = out + b * M * N;
#ifdef DJ_HAVE_AVX512
        if (sizeof(T) == 1 && i1 - i0 == kTile && j1 - j0 == kTile) {  // whole byte tiles: 4 blocks of 16 columns
            uint8_t* d = reinterpret_cast<uint8_t*>(dst);
            const uint8_t* s = reinterpret_cast<const uint8_t*>(src);
            if (M % 64 == 0 && reinterpret_cast<uintptr_t>(d) % 64 == 0) {
                for (int64_t j = j0; j < j1; j += 16) block64x16<true>(d, s, M, sm, i0, j);
                _mm_sfence();  // order the streamed lines before the kernel returns
            } else {
                for (int64_t j = j0; j < j1; j += 16) block64x16<false>(d, s, M, sm, i0, j);
            }
            return;
        }
#endif
        const int64_t iw = W > 1 ? i0 + (i1 - i0) / W * W : i0, jw = W > 1 ? j0 + (j1 - j0) / W * W : j0;
        if (W > 1)
            for (int64_t j = j0; j < jw; j += W)
                for (int64_t i = i0; i < iw; i += W) block(dst, src, M, sm, i, j);
        // the ragged right and bottom edges (everything, for wide types)
        for (int64_t j = j0; j < j1; ++j)
            for (int64_t i = (j < jw ? iw : i0); i < i1; ++i) dst[j * M + i] = src[i * sm + j];
    });
}

}  // namespace

DJ_KERNEL(tk_transpose, "ptr,ptr,i64,i64,i64,i64,i64,i64,i64")
void tk_transpose(void* out, const void* x, int64_t B, int64_t M, int64_t N, int64_t sb, int64_t sm, int64_t esize,
                  int64_t threads) {
    switch (esize) {
        case 1: run(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(x), B, M, N, sb, sm, threads); break;
        case 2: run(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(x), B, M, N, sb, sm, threads); break;
        case 4: run(static_cast<uint32_t*>(out), static_cast<const uint32_t*>(x), B, M, N, sb, sm, threads); break;
        default: run(static_cast<uint64_t*>(out), static_cast<const uint64_t*>(x), B, M, N, sb, sm, threads); break;
    }
}
