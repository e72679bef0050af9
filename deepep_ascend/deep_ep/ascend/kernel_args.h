// deep_ep/ascend/kernel_args.h — the argument structs of deep_ep's hand-written Ascend kernels (filled by
// name from Python: deepjit.kernel_args). symm_* are the symmetric window's fields
// (deepjit.symm.DeviceWindow.kernel_fields; dj_symm/device.h).
#pragma once

#include <stdint.h>

// ep_symm_exchange_send (symm_exchange.asc): row i of rows goes to every rank d with pos[i, d] >= 0, into
// d's inbox: row pos[i, d] of region `rank` (regions are region_bytes apart: max_rows of the widest rows
// the window serves, so exchanges of different row widths never overlap another source's region);
// counts[d] rows in all go to d, announced in d's window.
struct EpSymmSendArgs {
  __gm__ uint8_t* rows;
  __gm__ int32_t* pos;
  __gm__ int32_t* counts;
  __gm__ int64_t* symm_bases;
  int64_t symm_bytes, symm_data_offset, symm_timeout_ns;
  int32_t symm_rank, symm_num_ranks;
  int64_t num_rows, row_bytes, max_rows, region_bytes;
  int32_t seq, pad;
};

// ep_symm_exchange_recv (symm_exchange.asc): the rows every source put into this rank's inbox, source by
// source, back to back into out; row_start [R + 1] their first rows (the last: the total).
struct EpSymmRecvArgs {
  __gm__ uint8_t* out;
  __gm__ int32_t* row_start;
  __gm__ int64_t* symm_bases;
  int64_t symm_bytes, symm_data_offset, symm_timeout_ns;
  int32_t symm_rank, symm_num_ranks;
  int64_t out_rows, row_bytes, max_rows, region_bytes;
  int32_t seq, pad;
};

// ep_ll_send (ll_send.asc): row i of rows goes to every unmasked rank d with pos[i, d] >= 0, at slot
// pos[i, d] of region `rank` of d's inbox (ll_window.h). shrink: a timed-out wait masks the peer.
struct EpLLSendArgs {
  __gm__ uint8_t* rows;
  __gm__ int32_t* pos;
  __gm__ int64_t* symm_bases;
  int64_t symm_bytes, symm_data_offset, symm_timeout_ns;
  int32_t symm_rank, symm_num_ranks;
  int64_t num_rows, row_bytes, max_rows, region_bytes;
  int32_t seq, shrink;
};

// ep_ll_recv (ll_recv.asc): the first rows_per_source slots of every unmasked source's region into out,
// source s at rows [s * rows_per_source, ...).
struct EpLLRecvArgs {
  __gm__ uint8_t* out;
  __gm__ int64_t* symm_bases;
  int64_t symm_bytes, symm_data_offset, symm_timeout_ns;
  int32_t symm_rank, symm_num_ranks;
  int64_t rows_per_source, row_bytes, max_rows, region_bytes;
  int32_t seq, shrink;
};

// ep_ll_mask (ll_mask.asc): op 0 mask[rank] := value, op 1 buf := mask, op 2 mask := buf (R int32 words);
// ranks left unmasked learn that this rank has consumed their rows up to exchange seq.
struct EpLLMaskArgs {
  __gm__ int32_t* buf;
  __gm__ int64_t* symm_bases;
  int64_t symm_bytes, symm_data_offset, symm_timeout_ns;
  int32_t symm_rank, symm_num_ranks;
  int32_t op, rank, value, seq;
};

// ep_bucket (bucket.asc): one step of a BucketBuffer collective over the symmetric window
// (deep_ep/ascend/bucket_window.py). op 0: tell every rank this rank reached step seq (its flag
// flag_base + rank := seq), then wait for every rank's flag flag_base + p to reach seq. op 1 (gather):
// rank p's num_bytes at data byte src_offset + p * src_step of its window to out + p * num_bytes, for
// every p but skip_rank. op 2 (reduce): out[i] = scale * (sum over p in rank order of rank p's FP32 element
// i at data byte src_offset), accumulated in FP32 from 0; bf16: each term rounded to BF16 first.
struct EpBucketArgs {
  __gm__ uint8_t* out;
  __gm__ int64_t* symm_bases;
  int64_t symm_bytes, symm_data_offset, symm_timeout_ns;
  int32_t symm_rank, symm_num_ranks;
  int64_t src_offset, src_step, num_bytes, num_elems;
  float scale;
  int32_t op, flag_base, seq, bf16, skip_rank;
};
