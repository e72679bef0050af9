// Block-scaled cast of a 2-D BF16/FP32 tensor to E4M3 or packed E2M1 (per-token, per-block and
// per-channel casts are all this kernel with different block shapes).
//
// One-row blocks (per-token) go row by row (cast_row); taller blocks by work item = (row block,
// column chunk): pass 1 takes the column-wise |x| maximum over the block's rows, reduces it per
// scale block and writes the scales; pass 2 quantises every row of the chunk with the
// per-column multiplier (cast_item_fast with AVX-512, cast_item for the rest). mode 0: data +
// scales, 1: scales only, 2: data from the caller's FP32 scales (row-major (Mb, Kb)), using 1/sf.
#include <cfloat>
#include <vector>

#include <tile_kernels/host/cast_args.hpp>
#include <tile_kernels/host/quant.hpp>

namespace {

// |x| maxima that keep NaN, as the reference's amax does (max_ps drops it; tk::amax_step is the scalar form).
#ifdef DJ_HAVE_AVX512
DJ_INLINE __m512 nan_max16(__m512 a, __m512 b) {
    return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), _mm512_set1_ps(NAN));
}
#endif

template <int32_t DT, int32_t FMT>
void cast_item(void* q, void* sf, const void* x, int64_t M, int64_t K, int64_t ldx, int64_t BM, int64_t BK,
               bool round_sf, float clamp_min, bool packed, int64_t sm, int64_t sk, int32_t mode, int64_t r,
               int64_t c0, int64_t c1, float* colmax, float* inv) {
    const int64_t r0 = r * BM, r1 = std::min(M, r0 + BM);
    const float fmax = tk::fmt_max(FMT);
    if (mode == 2) {
        for (int64_t j = c0; j < c1; j += BK) {
            const float s = static_cast<const float*>(sf)[r * sm + (j / BK) * sk];
            const float v = 1.0f / s;
            for (int64_t jj = j; jj < std::min(c1, j + BK); ++jj) inv[jj - c0] = v;
        }
    } else {
        const int64_t w = c1 - c0;
        std::fill(colmax, colmax + w, 0.0f);
        for (int64_t i = r0; i < r1; ++i) {
            const char* row = static_cast<const char*>(x) + i * ldx * (DT == tk::kInBF16 ? 2 : 4);
            int64_t j = 0;
#ifdef DJ_HAVE_AVX512
            for (; j + 16 <= w; j += 16)
                _mm512_storeu_ps(colmax + j, nan_max16(_mm512_loadu_ps(colmax + j), tk::abs16(tk::load16(row, DT, c0 + j))));
#endif
            for (; j < w; ++j) colmax[j] = tk::amax_step(colmax[j], std::fabs(tk::load1(row, DT, c0 + j)));
        }
        for (int64_t j = c0; j < c1; j += BK) {
            const int64_t je = std::min(c1, j + BK);
            float amax = 0.0f;
            int64_t jj = j;
#ifdef DJ_HAVE_AVX512
            __m512 m = _mm512_setzero_ps();
            for (; jj + 16 <= je; jj += 16) m = nan_max16(m, _mm512_loadu_ps(colmax + jj - c0));
            amax = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q) ? NAN : _mm512_reduce_max_ps(m);
#endif
            for (; jj < je; ++jj) amax = tk::amax_step(amax, colmax[jj - c0]);
            // torch's amax down a column (across rows) gives the all-ones NaN (as cast_item_fast)
            if (BK == 1 && amax != amax) amax = dj::bits_f32(0xFFFFFFFFu);
            const tk::Scale s = tk::block_scale(amax, clamp_min, fmax, round_sf);
            tk::store_sf(sf, packed, sm, sk, r, j / BK, s.sf);
            std::fill(inv + (j - c0), inv + (je - c0), s.inv);
        }
        if (mode == 1) return;
    }
    const int64_t w = c1 - c0;
    for (int64_t i = r0; i < r1; ++i) {
        const char* row = static_cast<const char*>(x) + i * ldx * (DT == tk::kInBF16 ? 2 : 4);
        int64_t j = 0;
        if (FMT == tk::kE4M3) {
            uint8_t* out = static_cast<uint8_t*>(q) + i * K + c0;
#ifdef DJ_HAVE_AVX512
            for (; j + 16 <= w; j += 16)
                tk::store_e4m3x16(out + j, _mm512_mul_ps(tk::load16(row, DT, c0 + j), _mm512_loadu_ps(inv + j)));
#endif
            for (; j < w; ++j) out[j] = tk::enc_e4m3(tk::scaled(tk::load1(row, DT, c0 + j), inv[j]));
        } else {
            uint8_t* out = static_cast<uint8_t*>(q) + i * (K / 2) + c0 / 2;
#ifdef DJ_HAVE_AVX512
            for (; j + 16 <= w; j += 16)
                tk::store_e2m1x16(out + j / 2, _mm512_mul_ps(tk::load16(row, DT, c0 + j), _mm512_loadu_ps(inv + j)));
#endif
            for (; j < w; j += 2) {
                const uint8_t lo = dj::f32_to_e2m1(tk::scaled(tk::load1(row, DT, c0 + j), inv[j]));
                const uint8_t hi = dj::f32_to_e2m1(tk::scaled(tk::load1(row, DT, c0 + j + 1), inv[j + 1]));
                out[j / 2] = static_cast<uint8_t>(lo | (hi << 4));
            }
        }
    }
}

#ifdef DJ_HAVE_AVX512
// Pass 2 of a row: every block times its multiplier, stored in the output format. Pass 2 reads
// the row from L1 and leaves the memory bus idle, so it prefetches the next row (`next`, one line
// per 32 values): pass 1 of that row then finds it in cache (about 1.2x per row on one core).
template <int32_t DT, int32_t FMT, bool IN_RANGE>
void quantize_row(void* q, const char* row, int64_t K, int64_t BK, int64_t i, const float* inv, const char* next) {
    uint8_t* out = static_cast<uint8_t*>(q) + (FMT == tk::kE4M3 ? i * K : i * (K / 2));
    for (int64_t b = 0; b < K / BK; ++b) {
        const __m512 vinv = _mm512_set1_ps(inv[b]);
        int64_t jj = b * BK;
        if (DT == tk::kInBF16)
            for (; jj + 32 <= (b + 1) * BK; jj += 32) {
                _mm_prefetch(next + 2 * jj, _MM_HINT_T0);
                tk::quantize_bf16x32<FMT, IN_RANGE>(out + (FMT == tk::kE4M3 ? jj : jj / 2),
                                                    reinterpret_cast<const uint16_t*>(row) + jj, vinv, vinv);
            }
        for (; jj < (b + 1) * BK; jj += 16) {
            const __m512 v = _mm512_mul_ps(tk::load16(row, DT, jj), vinv);
            if (FMT == tk::kE4M3) tk::store_e4m3x16(out + jj, v);
            else tk::store_e2m1x16(out + jj / 2, v);
        }
    }
}
#endif

// One row, scale blocks of BK (a multiple of 16) columns, in two passes over the row (it stays
// in L1): the block maxima, 16 blocks reduced at a time, then the scales and multipliers in
// `inv`; then the quantisation. Splitting the passes keeps the reduce -> divide -> quantise
// latency of one block off the critical path.
template <int32_t DT, int32_t FMT>
void cast_row(void* q, void* sf, const void* x, int64_t K, int64_t ldx, int64_t BK, bool round_sf, float clamp_min,
              bool packed, int64_t sm, int64_t sk, int32_t mode, int64_t i, float* inv) {
#ifdef DJ_HAVE_AVX512
    const char* row = static_cast<const char*>(x) + i * ldx * (DT == tk::kInBF16 ? 2 : 4);
    const int64_t nb = K / BK;
    // Multipliers from the row's own finite maxima keep every |x * inv| within the format
    // (at most fmax * (1 + 2^-23)) and NaN-free: the conversion may skip those lanes.
    bool in_range = mode != 2;
    if (mode == 2) {
        for (int64_t b = 0; b < nb; ++b) inv[b] = 1.0f / static_cast<const float*>(sf)[i * sm + b * sk];
    } else {
        for (int64_t b0 = 0; b0 < nb; b0 += 16) {
            __m512i part[16];
            for (int n = 0; n < 16; ++n)
                part[n] = b0 + n < nb ? tk::absmax_bits_span<DT>(_mm512_setzero_si512(), row, (b0 + n) * BK, BK)
                                      : _mm512_setzero_si512();
            __m512 vsf, vinv;
            const __m512 amax = tk::reduce_absmax16<DT>(part);
            tk::block_scale16(amax, clamp_min, tk::fmt_max(FMT), round_sf, vsf, vinv);
            const __m512 big = _mm512_set1_ps(FLT_MAX);
            in_range = in_range && _mm512_cmp_ps_mask(amax, big, _CMP_LE_OQ) == 0xFFFF &&
                       _mm512_cmp_ps_mask(vinv, big, _CMP_LE_OQ) == 0xFFFF;
            _mm512_storeu_ps(inv + b0, vinv);
            tk::store_sf16(sf, packed, sm, sk, i, b0, static_cast<int>(std::min<int64_t>(16, nb - b0)), vsf);
        }
        if (mode == 1) return;
    }
    const char* next = row + ldx * (DT == tk::kInBF16 ? 2 : 4);  // only prefetched: no fault past the end
    if (in_range) quantize_row<DT, FMT, true>(q, row, K, BK, i, inv, next);
    else quantize_row<DT, FMT, false>(q, row, K, BK, i, inv, next);
#else
    (void)q; (void)sf; (void)x; (void)K; (void)ldx; (void)BK; (void)round_sf; (void)clamp_min; (void)packed;
    (void)sm; (void)sk; (void)mode; (void)i; (void)inv;
#endif
}

#ifdef DJ_HAVE_AVX512
// Scratch of one thread for cast_item_fast, sized for a column chunk of `chunk` columns.
struct ItemScratch {
    explicit ItemScratch(int64_t chunk) : cmax(chunk + 32), inv(chunk + 32), inv_split(chunk + 32) {}
    std::vector<uint32_t> cmax;              // column |x| maxima as BF16 (u16) or FP32 (u32) bits
    std::vector<float> inv, inv_split;       // multipliers per block / per column (even-odd split per 32)
};

// cast_item for modes 0/1 with BK a multiple of 16 (per-block) or BK == 1 (per-channel) and a
// chunk width w that is a multiple of 32. Pass 1 keeps the column maxima as integers in an L1
// buffer (5 operations per 32 BF16 values), then reduces them per block (or converts them per
// column); pass 2 re-reads the item's rows from L2 and quantises them, meanwhile prefetching the
// thread's next item (`next_rows` rows at `next`) into L2 line by line, so memory keeps streaming
// while the core computes (about 1.5x on one core).
template <int32_t DT, int32_t FMT>
void cast_item_fast(void* q, void* sf, const void* x, int64_t M, int64_t K, int64_t ldx, int64_t BM, int64_t BK,
                    bool round_sf, float clamp_min, bool packed, int64_t sm, int64_t sk, int32_t mode, int64_t r,
                    int64_t c0, int64_t c1, ItemScratch& s, const char* next, int64_t next_rows) {
    const int64_t r0 = r * BM, r1 = std::min(M, r0 + BM), w = c1 - c0;
    const int64_t esize = DT == tk::kInBF16 ? 2 : 4;
    const float fmax = tk::fmt_max(FMT);
    char* cmax = reinterpret_cast<char*>(s.cmax.data());
    std::memset(cmax, 0, w * esize);
    for (int64_t i = r0; i < r1; ++i) {
        const char* row = static_cast<const char*>(x) + (i * ldx + c0) * esize;
        for (int64_t j = 0; j < w * esize; j += 64) {
            const __m512i a = tk::absmax_bits<DT>(_mm512_loadu_si512(cmax + j), row, j / esize);
            _mm512_storeu_si512(cmax + j, a);
        }
    }
    bool in_range = true;
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    if (BK == 1) {  // per column: scales straight from the maxima, 16 columns at a time
        for (int64_t j = 0; j < w; j += 16) {
            const __m512 amax = tk::canonical_nan(
                DT == tk::kInBF16 ? tk::bf16x16_bits_to_f32(cmax + 2 * j) : _mm512_loadu_ps(reinterpret_cast<float*>(cmax) + j),
                0xFFFFFFFFu);
            __m512 vsf, vinv;
            tk::block_scale16(amax, clamp_min, fmax, round_sf, vsf, vinv);
            in_range = in_range && _mm512_cmp_ps_mask(amax, big, _CMP_LE_OQ) == 0xFFFF &&
                       _mm512_cmp_ps_mask(vinv, big, _CMP_LE_OQ) == 0xFFFF;
            _mm512_storeu_ps(s.inv.data() + j, vinv);
            tk::store_sf16(sf, packed, sm, sk, r, c0 + j, 16, vsf);
        }
    } else {  // per block: 16 blocks of the maxima buffer reduced at a time
        const int64_t nb = w / BK;
        for (int64_t b0 = 0; b0 < nb; b0 += 16) {
            __m512i part[16];
            for (int n = 0; n < 16; ++n)
                part[n] = b0 + n < nb ? tk::absmax_bits_span<DT>(_mm512_setzero_si512(), cmax, (b0 + n) * BK, BK)
                                      : _mm512_setzero_si512();
            const __m512 amax = tk::reduce_absmax16<DT>(part);
            __m512 vsf, vinv;
            tk::block_scale16(amax, clamp_min, fmax, round_sf, vsf, vinv);
            in_range = in_range && _mm512_cmp_ps_mask(amax, big, _CMP_LE_OQ) == 0xFFFF &&
                       _mm512_cmp_ps_mask(vinv, big, _CMP_LE_OQ) == 0xFFFF;
            alignas(64) float v[16];
            _mm512_store_ps(v, vinv);
            for (int n = 0; n < 16 && b0 + n < nb; ++n) std::fill(s.inv.data() + (b0 + n) * BK, s.inv.data() + (b0 + n + 1) * BK, v[n]);
            tk::store_sf16(sf, packed, sm, sk, r, c0 / BK + b0, static_cast<int>(std::min<int64_t>(16, nb - b0)), vsf);
        }
    }
    if (mode == 1) return;
    if (DT == tk::kInBF16) {  // per 32 columns: the even columns' multipliers, then the odd ones'
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        for (int64_t j = 0; j < w; j += 32) {
            const __m512 lo = _mm512_loadu_ps(s.inv.data() + j), hi = _mm512_loadu_ps(s.inv.data() + j + 16);
            _mm512_storeu_ps(s.inv_split.data() + j, _mm512_permutex2var_ps(lo, even, hi));
            _mm512_storeu_ps(s.inv_split.data() + j + 16, _mm512_permutex2var_ps(lo, odd, hi));
        }
    }
    for (int64_t i = r0; i < r1; ++i) {
        const char* row = static_cast<const char*>(x) + (i * ldx + c0) * esize;
        uint8_t* out = static_cast<uint8_t*>(q) + (FMT == tk::kE4M3 ? i * K + c0 : (i * K + c0) / 2);
        const char* pf = i - r0 < next_rows ? next + (i - r0) * ldx * esize : nullptr;
        if (DT == tk::kInBF16) {
            const float* sp = s.inv_split.data();
            for (int64_t j = 0; j < w; j += 32) {
                if (pf) _mm_prefetch(pf + 2 * j, _MM_HINT_T1);
                uint8_t* o = out + (FMT == tk::kE4M3 ? j : j / 2);
                const uint16_t* src = reinterpret_cast<const uint16_t*>(row) + j;
                if (in_range) tk::quantize_bf16x32<FMT, true>(o, src, _mm512_loadu_ps(sp + j), _mm512_loadu_ps(sp + j + 16));
                else tk::quantize_bf16x32<FMT, false>(o, src, _mm512_loadu_ps(sp + j), _mm512_loadu_ps(sp + j + 16));
            }
        } else {
            for (int64_t j = 0; j < w; j += 16) {
                if (pf) _mm_prefetch(pf + 4 * j, _MM_HINT_T1);
                const __m512 v = _mm512_mul_ps(tk::load16(row, DT, j), _mm512_loadu_ps(s.inv.data() + j));
                if (FMT == tk::kE4M3) tk::store_e4m3x16(out + j, v);
                else tk::store_e2m1x16(out + j / 2, v);
            }
        }
    }
}
#endif

template <int32_t DT, int32_t FMT>
void run(void* q, void* sf, const void* x, int64_t M, int64_t K, int64_t ldx, int64_t BM, int64_t BK, bool round_sf,
         float clamp_min, bool packed, int64_t sm, int64_t sk, int32_t mode, int64_t threads) {
    // Column chunks are whole scale blocks of about 1024 columns (one block when BK is wider).
#ifdef DJ_HAVE_AVX512
    if (BM == 1 && BK % 16 == 0 && K % BK == 0) {
        dj::parallel_threads(dj::thread_count(threads, M), [&](int64_t t, int64_t nt) {
            std::vector<float> inv(K / BK + 16);  // + 16: whole vectors of multipliers
            const dj::Range rg = dj::split_range(M, nt, t);
            for (int64_t i = rg.begin; i < rg.end; ++i)
                cast_row<DT, FMT>(q, sf, x, K, ldx, BK, round_sf, clamp_min, packed, sm, sk, mode, i, inv.data());
        });
        return;
    }
#endif
    const int64_t chunk = BK >= 1024 ? BK : (1024 / BK) * BK;
    const int64_t nchunks = (K + chunk - 1) / chunk, mb = (M + BM - 1) / BM;
#ifdef DJ_HAVE_AVX512
    // chunks (hence every item) are whole blocks of 32 columns and at most 16 * 1024 columns wide
    const bool fast = mode != 2 && (BK == 1 || BK % 16 == 0) && chunk % 32 == 0 && K % 32 == 0 && chunk <= 16 * 1024;
#endif
    dj::parallel_threads(dj::thread_count(threads, mb * nchunks), [&](int64_t t, int64_t nt) {
        std::vector<float> colmax(chunk), inv(chunk);
#ifdef DJ_HAVE_AVX512
        ItemScratch scratch(fast ? chunk : 0);
#endif
        const dj::Range rg = dj::split_range(mb * nchunks, nt, t);
        for (int64_t item = rg.begin; item < rg.end; ++item) {
            const int64_t r = item / nchunks, c0 = (item % nchunks) * chunk, c1 = std::min(K, c0 + chunk);
#ifdef DJ_HAVE_AVX512
            if (fast && (c1 - c0) % BK == 0) {
                // the thread's next item, whose rows pass 2 prefetches while it works on this one
                const int64_t rn = (item + 1) / nchunks, cn = ((item + 1) % nchunks) * chunk;
                const int64_t next_rows = item + 1 < rg.end ? std::min(M, rn * BM + BM) - rn * BM : 0;
                const char* next = static_cast<const char*>(x) + (rn * BM * ldx + cn) * (DT == tk::kInBF16 ? 2 : 4);
                cast_item_fast<DT, FMT>(q, sf, x, M, K, ldx, BM, BK, round_sf, clamp_min, packed, sm, sk, mode, r, c0, c1,
                                        scratch, next, next_rows);
                continue;
            }
#endif
            cast_item<DT, FMT>(q, sf, x, M, K, ldx, BM, BK, round_sf, clamp_min, packed, sm, sk, mode, r, c0, c1,
                               colmax.data(), inv.data());
        }
    });
}

}  // namespace

DJ_KERNEL(tk_block_cast, "ptr,i64")
void tk_block_cast(const tk::BlockCastArgs* args, int64_t threads) {
    const tk::BlockCastArgs a = *args;
    void *q = a.q, *sf = a.sf;
    const void* x = a.x;
    const int64_t M = a.M, K = a.K, ldx = a.ldx, BM = a.BM, BK = a.BK, sm = a.sm, sk = a.sk;
    const int32_t in_dtype = a.in_dtype, fmt = a.fmt, round_sf = a.round_sf, packed = a.packed, mode = a.mode;
    const float clamp_min = a.clamp_min;
    const bool rs = round_sf != 0, pk = packed != 0;
    if (in_dtype == tk::kInBF16) {
        if (fmt == tk::kE4M3) run<tk::kInBF16, tk::kE4M3>(q, sf, x, M, K, ldx, BM, BK, rs, clamp_min, pk, sm, sk, mode, threads);
        else run<tk::kInBF16, tk::kE2M1>(q, sf, x, M, K, ldx, BM, BK, rs, clamp_min, pk, sm, sk, mode, threads);
    } else {
        if (fmt == tk::kE4M3) run<tk::kInF32, tk::kE4M3>(q, sf, x, M, K, ldx, BM, BK, rs, clamp_min, pk, sm, sk, mode, threads);
        else run<tk::kInF32, tk::kE2M1>(q, sf, x, M, K, ldx, BM, BK, rs, clamp_min, pk, sm, sk, mode, threads);
    }
}
