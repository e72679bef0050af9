// flash_mla/ascend/kernel_args.h — the argument structs of the Ascend kernels, one per kernel:
// FmlaSparseMlaArgs of fmla_sparse_mla (sparse_mla.asc), FmlaKvRelayoutArgs of fmla_kv_relayout (kv_relayout.asc).
//
// Each kernel takes `__gm__ const <its struct>* args` and copies it out of global memory once at its
// start (the tiling-data pattern); ascend/sparse_attn.py / kv_relayout.py fill it BY NAME from this declaration
// (deepjit.kernel_args), and the twin compares this layout with ctypes' at first launch. Plain fields only.
#pragma once

#include <stdint.h>

// One token scope: a KV cache (records of format `fmt`, `page` tokens per block, blocks `block_stride`
// bytes apart, `ntok` tokens; `block_split`: a block holds its tokens' data rows, then their scale
// rows) and its `[rows, topk]` indices (rows `idx_stride` apart; -1 = none), with the per-row valid
// widths `len` where `has_len`.
struct FmlaScopeArgs {
  __gm__ uint8_t* cache;
  __gm__ int32_t* idx;
  __gm__ int32_t* len;
  int64_t fmt, block_stride, page, ntok, idx_stride, topk, has_len, block_split;
};

// out / lse / max_logits ([rows, h_q, 512] bf16, [rows, h_q] fp32) from q ([rows, h_q, d_qk], strides given)
// over scope0 then scope1 (topk 0: empty), with an attention sink per head where has_sink.
struct FmlaSparseMlaArgs {
  __gm__ bfloat16_t* q;
  __gm__ bfloat16_t* out;
  __gm__ float* lse;
  __gm__ float* max_logits;
  __gm__ float* sink;
  FmlaScopeArgs scope0, scope1;
  int64_t rows, s_q, h_q, q_row_stride, q_head_stride, has_sink, has_max;
  float sm_scale;
};

// The one argument struct of fmla_dense_attn (dense_attn.asc): dense attention of q over the keys of
// one sequence per batch entry, for the paged decode cache (`paged`: k = [num_blocks, page, h_kv, d_qk]
// through block_table / seqlens, v = its first d_v dims) or the packed varlen k / v (cu_q / cu_k prefix
// sums over total_q / total_k tokens). Element (b, s, h) of q / out / lse sits at
// b * *_seq + tok * *_tok + h * *_head, tok = s (paged) or cu_q[b] + s (varlen); strides in elements.
// A work item is (b, kv head, block m_block of the s x heads_per_kv query rows).
// q / k / v / out hold BF16, or FP16 where the kernel is built with FMLA_FP16.
struct FmlaDenseAttnArgs {
  __gm__ void* q;
  __gm__ void* k;
  __gm__ void* v;
  __gm__ void* out;
  __gm__ float* lse;
  __gm__ int32_t* block_table;
  __gm__ int32_t* seqlens;
  __gm__ int32_t* cu_q;
  __gm__ int32_t* cu_k;
  int64_t paged, causal, batch, h_kv, heads_per_kv, max_s_q, m_blocks;
  int64_t q_seq, q_tok, q_head, out_seq, out_tok, out_head, lse_seq, lse_tok, lse_head;
  int64_t k_tok, k_head, k_block, v_tok, v_head;
  int64_t page, bt_row, bt_cols, num_blocks, total_q, total_k;
  float sm_scale;
};

// fmla_kv_relayout (kv_relayout.asc): a V4.1 cache `in` (`num_blocks` page blocks of `page` tokens,
// `in_block_stride` bytes apart) rewritten into `out` (compact blocks) in the other placement;
// to_block_split: interleaved -> block-split, else block-split -> interleaved.
struct FmlaKvRelayoutArgs {
  __gm__ uint8_t* in;
  __gm__ uint8_t* out;
  int64_t num_blocks, page, in_block_stride, data_bytes, scale_bytes, to_block_split;
};
