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

// fmla_kv_relayout (kv_relayout.asc): a V4.1 cache `in` (`num_blocks` page blocks of `page` tokens,
// `in_block_stride` bytes apart) rewritten into `out` (compact blocks) in the other placement;
// to_block_split: interleaved -> block-split, else block-split -> interleaved.
struct FmlaKvRelayoutArgs {
  __gm__ uint8_t* in;
  __gm__ uint8_t* out;
  int64_t num_blocks, page, in_block_stride, data_bytes, scale_bytes, to_block_split;
};
