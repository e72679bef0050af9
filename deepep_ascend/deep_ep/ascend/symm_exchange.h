// deep_ep/ascend/symm_exchange.h — the layout both sides of the window exchange agree on
// (symm_send.asc writes it, symm_recv.asc reads it; deep_ep/ascend/symm_exchange.py sizes it).
//
// In rank d's window (deepjit.symm.DeviceWindow, data bytes):
//   [0, kCountBytes)     counts: int32 slot s = the rows source s put in d's inbox this exchange
//   [kCountBytes, ...)   inbox: R regions of max_rows rows, region s written only by source s, rows
//                        row_stride(row_bytes) apart (32-byte aligned: whole data-mover blocks)
// Flags (int32, monotonic exchange numbers `seq`): flag s of d = the last exchange whose rows source s
// has put in d's inbox; flag R + d of s = the last exchange whose rows from s rank d has consumed (s
// may overwrite its region of d's inbox only after that: no exchange overtakes the previous one).
#pragma once

#include <stdint.h>

namespace ep_symm {

constexpr int64_t kCountBytes = 512;          // up to 128 ranks
constexpr int64_t kRowBufferBytes = 96 * 1024;  // UB staging of one row
constexpr int64_t kWordsAt = 128 * 1024;        // UB offset of the count / row_start words

__aicore__ inline int64_t row_stride(int64_t row_bytes) { return (row_bytes + 31) / 32 * 32; }

__aicore__ inline int64_t inbox_offset(int64_t data_offset, int32_t source, int64_t max_rows, int64_t row_bytes) {
  return data_offset + kCountBytes + int64_t(source) * max_rows * row_stride(row_bytes);
}

}  // namespace ep_symm
