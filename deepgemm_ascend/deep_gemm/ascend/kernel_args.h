// deep_gemm/ascend/kernel_args.h — the one argument struct of each hand-written Ascend kernel.
//
// Each kernel takes `__gm__ const <Struct>* args` and copies the struct out of global memory once at its
// start (the tiling-data pattern); Python fills it BY NAME from this declaration (deepjit.kernel_args:
// descriptors.struct_type(LIB.source("ascend/kernel_args.h"), "<Struct>")), so a field renamed, added
// or removed here fails the Python call that does not name it, and the twin compares this layout with
// ctypes' at first launch. Plain fields only (no arrays, no bit-fields, no packing pragmas). A pointer
// whose element type a kernel picks by define (DType, ABType, ...) is `__gm__ void*` here and cast there.
#pragma once

#include <stdint.h>

// dg_bf16_gemm (bf16_gemm.asc): D [m, n] = A [m, k] . B [n, k]^T; d is DType (DG_D_FP32).
struct DgBf16GemmArgs {
  __gm__ bfloat16_t* a;
  __gm__ bfloat16_t* b;
  __gm__ void* d;
  int64_t m, n, k, lda, ldb, ldd;
};

// dg_bf16_gemm_epilogue (bf16_gemm_epilogue.asc): D[g] = alpha * A . B^T (+ C[g]); d, c are DType, a, b ABType.
struct DgBf16GemmEpilogueArgs {
  __gm__ void* a;
  __gm__ void* b;
  __gm__ void* d;
  __gm__ void* c;
  __gm__ int32_t* k_groups;
  int64_t num_groups, m, n, k, lda, ldb, ldd, ldc, d_group_stride, c_group_stride;
  float alpha;
  __gm__ uint16_t* sfa;
  __gm__ uint16_t* sfb;
  int64_t ld_sfa, ld_sfb;
};

// dg_fp4_to_fp8 (fp4_to_fp8.asc): packed FP4 rows of src widened to FP8 rows of dst.
struct DgFp4ToFp8Args {
  __gm__ uint8_t* src;
  __gm__ uint8_t* dst;
  int64_t rows, cols, ld_src, ld_dst;
};

// dg_fp8_mx_gemm (fp8_mx_gemm.asc): MX block-scaled D = A . B^T; a, b are MxLoad, d DType.
struct DgFp8MxGemmArgs {
  __gm__ void* a;
  __gm__ void* b;
  __gm__ uint16_t* sfa;
  __gm__ uint16_t* sfb;
  __gm__ void* d;
  int64_t m, n, k, lda, ldb, ld_sfa, ld_sfb, ldd;
};

// dg_m_grouped_bf16_gemm (m_grouped_bf16_gemm.asc): M-grouped GEMM over layout's groups; a, b are ABType, d DType.
// Also dg_m_grouped_fp8_fp4_mx_gemm (m_grouped_fp8_fp4_mx_gemm.asc), whose b is packed FP4: ldb and
// b_group_stride count bytes there.
struct DgMGroupedGemmArgs {
  __gm__ void* a;
  __gm__ void* b;
  __gm__ void* d;
  __gm__ int32_t* layout;
  int64_t m, n, k, num_groups, alignment, lda, ldb, b_group_stride, ldd, a_group_stride;
  int64_t d_group_stride;
  __gm__ uint16_t* sfa;
  __gm__ uint16_t* sfb;
  int64_t ld_sfa, ld_sfb, sfa_group_stride, sfb_group_stride;
};

// dg_fp8_mqa_logits (mqa_logits.asc): logits (LogitT) of q against kv rows [ks, ke).
struct DgMqaLogitsArgs {
  __gm__ fp8_e4m3fn_t* q;
  __gm__ fp8_e4m3fn_t* kv;
  __gm__ float* kv_sf;      // per-token FP32 KV scales (DG_KV_TOKEN_SF)
  __gm__ uint16_t* q_mx_sf;   // DG_MX: UE8M0 int16 pairs, MN-major (pair p of row r at p * ld + r)
  __gm__ uint16_t* kv_mx_sf;
  __gm__ float* weights;
  __gm__ int32_t* ks;
  __gm__ int32_t* ke;
  __gm__ void* logits;
  int64_t seq_len, seq_len_kv, width, ld_logits, ld_q_mx_sf, ld_kv_mx_sf;
};

// dg_fp8_paged_mqa_logits (paged_mqa_logits.asc): logits (LogitT) of q against paged cache through block_table.
struct DgPagedMqaLogitsArgs {
  __gm__ fp8_e4m3fn_t* q;
  __gm__ uint8_t* cache;
  __gm__ uint16_t* q_mx_sf;  // DG_MX: q's UE8M0 int16 pairs, MN-major (pair p of row r at p * ld + r)
  __gm__ uint16_t* kv_unit_sf;  // DG_KV_UNIT_SF: block_kv rows of kQkPairs int16 pairs of 2^0 (0x7F7F)
  __gm__ float* weights;
  __gm__ int32_t* context_lens;
  __gm__ int32_t* block_table;
  __gm__ void* logits;
  int64_t batch, next_n, width, ld_logits, bt_ld, bt_cols, num_pages, page_stride, ld_q_mx_sf;
};

// dg_sf_transform (sf_layout.asc): scale factors of src (SrcT) to the packed UE8M0 layout in out.
struct DgSfTransformArgs {
  __gm__ void* src;
  __gm__ uint16_t* out;
  __gm__ int32_t* ends;
  __gm__ int32_t* status;
  int64_t batch, mn, words, k_blocks, gran_mn, sb, sr, sc, num_groups, alignment;
};


// dg_hc_prenorm_gemm (hc_prenorm_gemm.asc): per K split s, D[s] = A[:, split] . B[:, split]^T (HF32 cube)
// and sqr_sum[s, m] = sum over the split of A[m, k]^2.
struct DgHcPrenormGemmArgs {
  __gm__ bfloat16_t* a;
  __gm__ float* b;
  __gm__ float* d;
  __gm__ float* sqr_sum;
  int64_t m, n, k, num_splits, split_k, lda, ldb, ldd, d_split_stride, sqr_split_stride;
};

// dg_bf16_einsum (bf16_einsum.asc): for each batch g, D[g] (+)= sum_r A[g, r] . B[g, r]^T; d is DType.
struct DgBf16EinsumArgs {
  __gm__ bfloat16_t* a;
  __gm__ bfloat16_t* b;
  __gm__ void* d;
  int64_t batches, k_batches, m, n, k, lda, ldb, ldd;
  int64_t a_batch_stride, b_batch_stride, d_batch_stride, a_k_batch_stride, b_k_batch_stride;
};

// dg_permute_rows (permute_rows.asc): out[g, i] = src[g, perm[i]] (perm clamped into [0, rows)), rows of
// row_words Word elements (Word picked by DG_WORD_BYTES), both tensors dense.
struct DgPermuteRowsArgs {
  __gm__ void* src;
  __gm__ void* out;
  __gm__ int64_t* perm;
  int64_t groups, rows, row_words;
};

// dg_sf_layout (sf_layout_ops.asc): the sf_copy / sf_pack_ue8m0 / sf_unpack_ue8m0 ops (DG_SF_MODE 0 / 1 / 2)
// between src and out [B, MN, cols] at any element strides (is* / os*); row m of out reads row m / gran of src.
struct DgSfLayoutArgs {
  __gm__ void* src;
  __gm__ void* out;
  int64_t batch, mn, cols, sk, gran, isb, ism, isk, osb, osm, osk;
};

// dg_paged_mqa_metadata (paged_mqa_metadata.asc): out [num_sms + 1, 2] int32, the paged MQA logits schedule
// of context_lens [rows] (requests grouped by DG_META_GROUPING; indices read only for grouping 2).
struct DgPagedMqaMetadataArgs {
  __gm__ int32_t* context_lens;
  __gm__ int32_t* indices;
  __gm__ int32_t* out;
  int64_t rows, next_n, num_sms;
};

// dg_mega_swiglu (mega_swiglu.asc): Mega MoE's SwiGLU step. Rows [0, clamp(ends[num_groups - 1], 0, m)) of l1_out
// (BF16 [m, 2 * inter], gate / up interleaved in blocks of gran columns) times weights[row] to act: FP8 E4M3
// [m, inter] with UE8M0 bytes per 32 columns in act_sf (int32 [m, inter / 128]), or BF16 [m, inter] (to_fp8 0,
// act_sf unused); the other rows are not written. max_tile_rows sizes the UB stages (the host's choice).
struct DgMegaSwigluArgs {
  __gm__ bfloat16_t* l1_out;
  __gm__ float* weights;
  __gm__ int32_t* ends;
  __gm__ void* act;
  __gm__ uint32_t* act_sf;
  int64_t m, inter, num_groups, gran, max_tile_rows, to_fp8, has_clamp, alignment;
  float clamp;
};

// dg_mega_moe_comm (mega_moe_comm.asc): Mega MoE's window steps (op 0 dispatch, 1 combine;
// deep_gemm/ascend/mega_moe.py). off_* are byte offsets of the SymmBuffer views in the window's data, in_* the
// rank's inputs in its own tensors (x, x_sf, topk_idx, topk_weights: the dispatch copies rows [0, num_tokens)
// into the window before it announces them). The
// experts' rows lie in a psum layout of m_cap rows (ends [num_experts / R]: its end rows), processed in waves of
// ring rows (a multiple of alignment): wave w holds layout rows [w * ring, (w + 1) * ring), whose end rows relative
// to the wave are wave_ends [waves, num_experts / R]; a [ring, row_bytes] pulled x rows, a_sf [ring, sf_words]
// (sf_words 0 in BF16 mode), weights / src [ring] per pulled row, counts [R * units_per_rank, num_experts / R],
// stats [num_experts / R], l2_out [ring, hidden] BF16, y [num_tokens, hidden] BF16.
struct DgMegaMoeCommArgs {
  __gm__ uint8_t* in_x;
  __gm__ uint8_t* in_x_sf;
  __gm__ uint8_t* in_topk_idx;
  __gm__ uint8_t* in_topk_weights;
  __gm__ uint8_t* a;
  __gm__ int32_t* a_sf;
  __gm__ float* weights;
  __gm__ int32_t* src;
  __gm__ int32_t* counts;
  __gm__ int32_t* ends;
  __gm__ int32_t* wave_ends;
  __gm__ int32_t* stats;
  __gm__ uint8_t* l2_out;
  __gm__ uint8_t* y;
  __gm__ int64_t* symm_bases;
  int64_t symm_bytes, symm_data_offset, symm_timeout_ns;
  int32_t symm_rank, symm_num_ranks;
  int64_t off_num_tokens, off_x, off_x_sf, off_topk_idx, off_topk_weights, off_combine;
  int64_t num_tokens, max_tokens, m_cap, ring, hidden, row_bytes, sf_words, topk;
  int32_t num_experts, alignment, seq, op, has_stats, units_per_rank;
};

// dg_mega_moe (mega_moe.asc): one Mega MoE call in one persistent launch (deep_gemm/ascend/mega_moe.py): the
// dispatch (comm; its op unused), then for each wave of ring rows its pull, the L1 grouped GEMM (l1), the SwiGLU
// step (swiglu), the L2 grouped GEMM (l2) and the sends, then the combine's sum (the GEMMs' layout and the SwiGLU ends
// are the wave's wave_ends row, set by the kernel). The vector steps run on the first dispatch_grid / swiglu_grid /
// combine_grid of the launch's vector cores; every core meets the others between steps on window flag meet_flag
// of its own rank (0 between calls).
struct DgMegaMoeArgs {
  DgMegaMoeCommArgs comm;
  DgMGroupedGemmArgs l1;
  DgMGroupedGemmArgs l2;
  DgMegaSwigluArgs swiglu;
  int64_t dispatch_grid, swiglu_grid, combine_grid;
  int32_t meet_flag, pad;
};
