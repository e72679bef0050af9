// deep_ep/ascend/symm_exchange.h — the layout both sides of the window exchange agree on
// (symm_send.asc writes it, symm_recv.asc reads it; deep_ep/ascend/symm_exchange.py sizes it).
//
// In rank d's window (deepjit.symm.DeviceWindow, data bytes):
//   [0, kCountBytes)     counts: int32 slot (seq & 1) * R + s = the rows source s put in d's inbox in
//                        exchange seq. Two banks: a receiving block reads the counts of every lower
//                        source, so source s may be told its region is free (by block s) before a
//                        higher block has read s's count; s's next exchange writes the other bank, and
//                        the one after waits for this exchange's receive kernel to have ended.
//   [kCountBytes, ...)   inbox: R regions of region_bytes (max_rows of the widest rows), region s written
//                        only by source s, rows row_stride(row_bytes) apart (32-byte aligned: whole
//                        data-mover blocks)
// Flags (int32, monotonic exchange numbers `seq`): flag s of d = the last exchange whose rows source s
// has put in d's inbox; flag R + d of s = the last exchange whose rows from s rank d has consumed (s
// may overwrite its region of d's inbox only after that: no exchange overtakes the previous one).
#pragma once

#include <stdint.h>

#include <c_api/asc_simd.h>

namespace ep_symm {

constexpr int64_t kCountBytes = 512;          // two banks of up to 64 ranks
constexpr int64_t kRowBufferBytes = 96 * 1024;  // UB staging of one row (RowPipe keeps two)
constexpr int64_t kWordsAt = 2 * kRowBufferBytes;  // UB offset of the count / row_start / mask words

__aicore__ inline int64_t row_stride(int64_t row_bytes) { return (row_bytes + 31) / 32 * 32; }

// Rows GM -> UB -> GM (either end may be a window) through two UB row buffers, so the load of a row
// overlaps the store of the one before: buffer b's load waits for its previous store (MTE3 -> MTE2 flag b),
// its store for its load (MTE2 -> MTE3 flag b). drain() ends the run: every store done, as the scalar unit
// sees it (it may then signal a peer, or tell a source its region is free: the loads came before). The
// buffers are the kernel's UB bytes [0, 2 * kRowBufferBytes) (`ub`: its UB base; the .asc owns the literal).
struct RowPipe {
  __ubuf__ uint8_t* ub;
  int32_t b = 0;
  __aicore__ inline explicit RowPipe(__ubuf__ uint8_t* ub_base) : ub(ub_base) {
    asc_sync_notify(PIPE_MTE3, PIPE_MTE2, 0);
    asc_sync_notify(PIPE_MTE3, PIPE_MTE2, 1);
  }
  __aicore__ inline void move(__gm__ uint8_t* dst, __gm__ uint8_t* src, uint32_t bytes) {
    __ubuf__ uint8_t* buf = ub + b * kRowBufferBytes;
    asc_sync_wait(PIPE_MTE3, PIPE_MTE2, b);
    asc_copy_gm2ub_align(buf, src, bytes);
    asc_sync_notify(PIPE_MTE2, PIPE_MTE3, b);
    asc_sync_wait(PIPE_MTE2, PIPE_MTE3, b);
    asc_copy_ub2gm_align(dst, buf, bytes);
    asc_sync_notify(PIPE_MTE3, PIPE_MTE2, b);
    b ^= 1;
  }
  __aicore__ inline void drain() {
    asc_sync_wait(PIPE_MTE3, PIPE_MTE2, 0);
    asc_sync_wait(PIPE_MTE3, PIPE_MTE2, 1);
    asc_sync_notify(PIPE_MTE3, PIPE_S, 2);
    asc_sync_wait(PIPE_MTE3, PIPE_S, 2);
  }
};

// Region `source` of the inbox: a fixed place whatever this exchange's row width (a source may write its
// region for the next exchange while a receiving block still reads another source's region of this one).
__aicore__ inline int64_t inbox_offset(int64_t data_offset, int32_t source, int64_t region_bytes) {
  return data_offset + kCountBytes + int64_t(source) * region_bytes;
}

__aicore__ inline int64_t count_offset(int64_t data_offset, int32_t seq, int32_t num_ranks, int32_t source) {
  return data_offset + 4 * (int64_t(seq & 1) * num_ranks + source);
}

}  // namespace ep_symm
