// MQA logits (the lightning indexer), non-paged and paged, on the BF16 micro-kernel:
//   logits[i, j] = sum_h w[i, h] * relu(kv_scale[j] * (q[i, h] . kv[j]))
// Heads are the rows of the left-hand panels, KV tokens the 32 columns of a right-hand panel;
// each 8 x 32 score tile is reduced over heads (ReLU, weight) right after the dot products.
// FP4 operands carry per-32 power-of-two scales, folded exactly into their BF16 conversion.
// On the brgemm matrix engine (DJ_HAVE_BRGEMM) each panel's H x 32 scores are one oneDNN call
// (AMX tiles where the CPU has them) over the query's heads as plain BF16 rows, then reduced.
#include <deepjit/host/gemm_bf16.hpp>
#include <deepjit/host/gemm_convert.hpp>
#ifdef DJ_HAVE_BRGEMM
#include <deepjit/host/brgemm.hpp>
#endif

#include <deep_gemm/host/mqa_logits_args.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

using namespace dj::gemm;

// Row `r` (D values) of an FP8 / FP4 tensor as BF16, with per-32 exponents folded for FP4.
void row_to_bf16(const uint8_t* base, int type, int64_t D, const float* sf32, const uint8_t* ue8m0, uint16_t* out) {
    to_bf16(base, type, 0, D, out);
    if (type == kE2M1)
        for (int64_t b = 0; b * 32 < D; ++b) {
            const int64_t n = std::min<int64_t>(32, D - b * 32);
            if (sf32 == nullptr && ue8m0[b] == 0xFF) {  // the UE8M0 NaN scale: every value of its block NaN
                std::fill_n(out + b * 32, n, uint16_t(0x7FC0));
                continue;
            }
            const int e = sf32 != nullptr ? scale_exponent(sf32[b]) : static_cast<int>(ue8m0[b]) - 127;
            add_exponent(out + b * 32, n, e);
        }
}

// Row stride of the query's BF16 rows. brgemm reads them in place: rows on 64-byte boundaries (AMX
// tile loads that split cache lines ran 20-25 % slower on a Xeon); the micro-kernel's K-major
// packing keeps the D + 2 stride it was tuned with.
DJ_INLINE int64_t query_ld(int64_t D) {
#ifdef DJ_HAVE_BRGEMM
    return ceil_div(D, 32) * 32;
#else
    return D + 2;
#endif
}

// The heads of one query as BF16 rows (hp rows of D, query_ld(D) apart; zero past H).
void query_rows(const uint8_t* q, int type, int64_t H, int64_t D, const float* q_sf, uint16_t* rows) {
    const int64_t row_bytes = type == kE2M1 ? D / 2 : D, hp = ceil_div(H, 32) * 32, ld = query_ld(D);
    for (int64_t h = 0; h < hp; ++h) {
        if (h < H)
            row_to_bf16(q + h * row_bytes, type, D, q_sf ? q_sf + h * (D / 32) : nullptr, nullptr, rows + h * ld);
        else
            std::memset(rows + h * ld, 0, D * 2);
    }
}

#ifdef DJ_HAVE_BRGEMM
// The query's rows are all brgemm needs (no panels).
void pack_query(const uint8_t* q, int type, int64_t H, int64_t D, const float* q_sf, uint16_t* rows, uint32_t*) {
    query_rows(q, type, H, D, q_sf, rows);
}

// 32 scores for tokens of one packed KV panel (its K-pair words are brgemm's VNNI layout of width
// 32): tile[h][j] = q_h . kv_j in one call, then sum_h w[h] * relu(scale[j] * tile[h][j]).
// qrows and tile (H x 32 floats) 64-byte aligned.
void panel_scores(const uint16_t* qrows, const uint32_t*, int64_t H, int64_t D, const uint32_t* kvpanel,
                  const float* kv_scale, const float* w, float* tile, float* out) {
    for (int j = 0; j < NR; ++j) out[j] = 0.0f;
    if (!dj::brgemm::gemm(H, NR, D, qrows, query_ld(D), kvpanel, NR, tile, NR, false)) return;
    for (int64_t h = 0; h < H; ++h) {
        const float wh = w[h];
        const float* t = tile + h * NR;
#ifdef DJ_HAVE_AVX512
        // relu as max(0, x): max_ps returns its second operand when one is NaN (torch's relu keeps NaN)
        const __m512 zero = _mm512_setzero_ps(), wv = _mm512_set1_ps(wh);
        for (int j = 0; j < NR; j += 16)
            _mm512_storeu_ps(out + j, _mm512_fmadd_ps(wv, _mm512_max_ps(zero, _mm512_mul_ps(_mm512_loadu_ps(t + j),
                                                                                        _mm512_loadu_ps(kv_scale + j))),
                                                      _mm512_loadu_ps(out + j)));
#else
        for (int j = 0; j < NR; ++j) out[j] += wh * std::max(t[j] * kv_scale[j], 0.0f);
#endif
    }
}

using EngineScope = dj::brgemm::Scope;   // each thread's AMX tile state released after its item
#else
struct EngineScope {};
// Pack the heads of one query (H rows of D) into H/8 panels.
void pack_query(const uint8_t* q, int type, int64_t H, int64_t D, const float* q_sf, uint16_t* tmp, uint32_t* out) {
    query_rows(q, type, H, D, q_sf, tmp);
    pack_kmajor(tmp, query_ld(D), ceil_div(H, 32) * 32, MR, D, out);
}
#endif

#ifndef DJ_HAVE_BRGEMM
// 32 scores for tokens of one packed KV panel: sum_h w[h] * relu(scale[j] * q_h . kv_j).
// w holds H weights padded with zeros to a multiple of MR (padded heads have zero queries).
void panel_scores(const uint16_t*, const uint32_t* qpanels, int64_t H, int64_t D, const uint32_t* kvpanel,
                  const float* kv_scale, const float* w, float* tile, float* out) {
#ifdef DJ_HAVE_AVX512_BF16
    // Each 8-head block is reduced straight from the accumulator registers.
    (void)tile;
    const __m512 s0 = _mm512_loadu_ps(kv_scale), s1 = _mm512_loadu_ps(kv_scale + 16), zero = _mm512_setzero_ps();
    __m512 o0 = zero, o1 = zero;
    for (int64_t h0 = 0; h0 < H; h0 += MR) {
        const uint32_t* A = qpanels + h0 * D / 2;
        __m512 acc[MR][2];
        for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = zero;
        for (int64_t p = 0; p < D / 2; ++p) {
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(kvpanel + p * NR);
            const __m512bh b1 = (__m512bh)_mm512_loadu_si512(kvpanel + p * NR + 16);
            for (int i = 0; i < MR; ++i) {
                const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(A[p * MR + i]));
                acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a, b0);
                acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a, b1);
            }
        }
        // relu as max(0, x): max_ps returns its second operand when one is NaN, so a NaN score
        // (a NaN KV scale, say) stays NaN as torch's relu keeps it.
        for (int i = 0; i < MR; ++i) {
            const __m512 wi = _mm512_set1_ps(w[h0 + i]);
            o0 = _mm512_fmadd_ps(wi, _mm512_max_ps(zero, _mm512_mul_ps(acc[i][0], s0)), o0);
            o1 = _mm512_fmadd_ps(wi, _mm512_max_ps(zero, _mm512_mul_ps(acc[i][1], s1)), o1);
        }
    }
    _mm512_storeu_ps(out, o0);
    _mm512_storeu_ps(out + 16, o1);
#else
    for (int j = 0; j < NR; ++j) out[j] = 0.0f;
    for (int64_t h0 = 0; h0 < H; h0 += MR) {
        micro_kernel<MR, false>(D / 2, qpanels + h0 * D / 2, kvpanel, tile, NR, false);
        for (int64_t h = 0; h < MR; ++h) {
            const float wh = w[h0 + h];
            const float* t = tile + h * NR;
            for (int j = 0; j < NR; ++j) out[j] += wh * std::max(t[j] * kv_scale[j], 0.0f);
        }
    }
#endif
}
#endif

void store(uint8_t* logits, int ltype, int64_t idx, float v) {
    if (ltype == 1)
        reinterpret_cast<float*>(logits)[idx] = v;
    else
        reinterpret_cast<uint16_t*>(logits)[idx] = dj::f32_to_bf16(v);
}

// Pack tokens [t0, t0 + n) (n <= 32) given per-token row pointers into one KV panel.
template <typename RowFn>
void pack_kv_panel(int64_t n, int64_t D, RowFn&& row, uint16_t* tmp, uint32_t* out) {
    const int64_t ld = D + 2;
    for (int64_t t = 0; t < NR; ++t) {
        if (t < n)
            row(t, tmp + t * ld);
        else
            std::memset(tmp + t * ld, 0, D * 2);
    }
    pack_kmajor(tmp, ld, NR, NR, D, out);
}

}  // namespace

// One kernel per shared object: DG_PAGED selects which of the two this build exports.
#if !DG_PAGED
DJ_KERNEL(dg_mqa_logits, "ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,i64")
void dg_mqa_logits(const dg::MqaLogitsParams* p, const uint8_t* q, const float* q_sf, const uint8_t* kv,
                   const float* kv_sf, const float* weights, const int32_t* ks, const int32_t* ke, uint8_t* logits,
                   int64_t threads) {
    const int64_t S = p->S, H = p->H, D = p->D, SKV = p->SKV, ld = p->ld, W = p->width;
    const int qt = static_cast<int>(p->q_type), kt = static_cast<int>(p->kv_type), lt = static_cast<int>(p->logits_f32);
    const bool compressed = p->compressed != 0, clean = p->clean != 0;
    const int64_t kv_row = kt == kE2M1 ? D / 2 : D, q_row = qt == kE2M1 ? D / 2 : D;
    const int64_t kv_nsf = kt == kE2M1 ? D / 32 : 1;
    const int64_t npanels = ceil_div(SKV, NR), hp = ceil_div(H, 32) * 32;

    // All KV tokens packed once, with their per-token scales (FP8) padded to whole panels.
    auto kvp = alloc<uint32_t>(npanels * NR * D / 2);
    auto kscale = alloc<float>(npanels * NR);
    dj::parallel_for_dynamic(npanels, threads, [&](int64_t pi) {
        std::vector<uint16_t> tmp(NR * (D + 2));
        const int64_t t0 = pi * NR, n = std::min<int64_t>(NR, SKV - t0);
        pack_kv_panel(n, D, [&](int64_t t, uint16_t* out) {
            row_to_bf16(kv + (t0 + t) * kv_row, kt, D, kt == kE2M1 ? kv_sf + (t0 + t) * kv_nsf : nullptr, nullptr, out);
        }, tmp.data(), kvp.get() + pi * NR * D / 2);
        for (int64_t t = 0; t < NR; ++t) kscale[pi * NR + t] = (kt == kE4M3 && t < n) ? kv_sf[t0 + t] : 1.0f;
    });

    dj::parallel_for_dynamic(S, threads, [&](int64_t i) {
        EngineScope engine_scope;
        auto qrows = alloc<uint16_t>(hp * query_ld(D));
        auto qp = alloc<uint32_t>(hp * D / 2);
        auto tile = alloc<float>(hp * NR);
        alignas(64) float sc[NR];
        pack_query(q + i * H * q_row, qt, H, D, q_sf ? q_sf + i * H * (D / 32) : nullptr, qrows.get(), qp.get());
        std::vector<float> w(hp, 0.0f);   // zero weights for the padded heads
        std::copy(weights + i * H, weights + (i + 1) * H, w.begin());
        const int64_t lo = std::clamp<int64_t>(ks[i], 0, SKV), hi = std::clamp<int64_t>(ke[i], lo, SKV);
        const int64_t row = i * ld;
        for (int64_t pi = lo / NR; pi * NR < hi; ++pi) {
            panel_scores(qrows.get(), qp.get(), H, D, kvp.get() + pi * NR * D / 2, kscale.get() + pi * NR, w.data(),
                         tile.get(), sc);
            for (int64_t j = std::max(lo, pi * NR); j < std::min(hi, (pi + 1) * NR); ++j) {
                const int64_t col = compressed ? j - lo : j;
                if (col < W) store(logits, lt, row + col, sc[j - pi * NR]);
            }
        }
        if (clean && !compressed) {
            const float ninf = -std::numeric_limits<float>::infinity();
            for (int64_t j = 0; j < std::min(lo, W); ++j) store(logits, lt, row + j, ninf);
            for (int64_t j = hi; j < W; ++j) store(logits, lt, row + j, ninf);
        }
    });
}

#else
DJ_KERNEL(dg_paged_mqa_logits, "ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,i64")
void dg_paged_mqa_logits(const dg::MqaLogitsParams* p, const uint8_t* q, const float* q_sf, const uint8_t* cache,
                         const float* weights, const int32_t* context_lens, const int32_t* block_table,
                         uint8_t* logits, int64_t threads) {
    const int64_t H = p->H, D = p->D, ld = p->ld, W = p->width, next_n = p->next_n;
    const int64_t block_kv = p->block_kv, page = p->page_stride, max_blocks = p->max_blocks, B = p->batch;
    const int qt = static_cast<int>(p->q_type), kt = static_cast<int>(p->kv_type), lt = static_cast<int>(p->logits_f32);
    const bool clean = p->clean != 0;
    const int64_t kv_row = kt == kE2M1 ? D / 2 : D, q_row = qt == kE2M1 ? D / 2 : D, hp = ceil_div(H, 32) * 32;
    // Work items: (batch, run of up to CHUNKS chunks of 32 positions), so each query is packed
    // once per run rather than once per chunk. A chunk never straddles a page (block_kv % 32 == 0
    // upstream; smaller pages are handled token by token below).
    constexpr int64_t CHUNKS = 8;
    std::vector<int64_t> items;
    for (int64_t b = 0; b < B; ++b) {
        int64_t ctx = 0;
        for (int64_t t = 0; t < next_n; ++t) ctx = std::max<int64_t>(ctx, context_lens[b * next_n + t]);
        ctx = std::min(ctx, max_blocks * block_kv);
        for (int64_t c = 0; c < ceil_div(ctx, NR); c += CHUNKS) items.push_back(b << 32 | c);
    }
    dj::parallel_for_dynamic(static_cast<int64_t>(items.size()), threads, [&](int64_t it) {
        const int64_t b = items[it] >> 32, first = items[it] & 0xFFFFFFFF;
        EngineScope engine_scope;
        std::vector<uint16_t> tmp(NR * (D + 2));
        auto qrows = alloc<uint16_t>(next_n * hp * query_ld(D));
        auto qp = alloc<uint32_t>(next_n * hp * D / 2);
        auto kvp = alloc<uint32_t>(NR * D / 2);
        auto tile = alloc<float>(hp * NR);
        alignas(64) float sc[NR], kscale[NR];
        int64_t ctx_max = 0;
        for (int64_t t = 0; t < next_n; ++t) ctx_max = std::max<int64_t>(ctx_max, context_lens[b * next_n + t]);
        ctx_max = std::min(ctx_max, max_blocks * block_kv);
        std::vector<float> w(next_n * hp, 0.0f);   // zero weights for the padded heads
        for (int64_t t = 0; t < next_n; ++t) {
            const int64_t r = b * next_n + t;
            std::copy(weights + r * H, weights + (r + 1) * H, w.begin() + t * hp);
            pack_query(q + r * H * q_row, qt, H, D, q_sf ? q_sf + r * H * (D / 32) : nullptr,
                       qrows.get() + t * hp * query_ld(D), qp.get() + t * hp * D / 2);
        }
        for (int64_t c0 = first * NR; c0 < std::min(ctx_max, (first + CHUNKS) * NR); c0 += NR) {
            const int64_t n = std::min<int64_t>(NR, ctx_max - c0);
            // Page and offset of the chunk's first position; later ones count on (no division per token).
            int64_t page_idx = c0 / block_kv, off0 = c0 % block_kv;
            pack_kv_panel(n, D, [&](int64_t t, uint16_t* out) {
                int64_t off = off0 + t;
                if (off >= block_kv) off0 -= block_kv, off -= block_kv, ++page_idx;
                const int64_t blk = block_table[b * max_blocks + page_idx];
                const uint8_t* pg = cache + blk * page;
                const uint8_t* scale = pg + block_kv * kv_row + off * 4;
                row_to_bf16(pg + off * kv_row, kt, D, nullptr, scale, out);
                float s;
                std::memcpy(&s, scale, 4);
                kscale[t] = kt == kE4M3 ? s : 1.0f;
            }, tmp.data(), kvp.get());
            for (int64_t t = n; t < NR; ++t) kscale[t] = 1.0f;
            for (int64_t t = 0; t < next_n; ++t) {
                const int64_t r = b * next_n + t, ctx = context_lens[r];
                panel_scores(qrows.get() + t * hp * query_ld(D), qp.get() + t * hp * D / 2, H, D, kvp.get(), kscale,
                             w.data() + t * hp, tile.get(), sc);
                for (int64_t j = 0; j < NR && c0 + j < W; ++j) {
                    const bool valid = c0 + j < ctx && j < n;
                    if (valid)
                        store(logits, lt, r * ld + c0 + j, sc[j]);
                    else if (clean)
                        store(logits, lt, r * ld + c0 + j, -std::numeric_limits<float>::infinity());
                }
            }
        }
    });
    if (clean)   // positions past every chunk of the row
        dj::parallel_for(B * next_n, threads, [&](int64_t r) {
            const int64_t b = r / next_n;
            int64_t ctx_max = 0;
            for (int64_t t = 0; t < next_n; ++t) ctx_max = std::max<int64_t>(ctx_max, context_lens[b * next_n + t]);
            const int64_t done = ceil_div(std::min(ctx_max, max_blocks * block_kv), NR) * NR;
            for (int64_t j = std::max<int64_t>(done, 0); j < W; ++j)
                store(logits, lt, r * ld + j, -std::numeric_limits<float>::infinity());
        });
}
#endif
