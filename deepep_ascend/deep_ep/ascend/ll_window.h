// deep_ep/ascend/ll_window.h — the low-latency window layout that ll_send.asc, ll_recv.asc and ll_mask.asc
// agree on (deep_ep/ascend/ll_window.py sizes it). Slots are fixed (rank pair, slot), so a receiver needs
// no counts: it copies a fixed number of rows from each source's region, wherever the sender put them.
//
// In rank d's window (deepjit.symm.DeviceWindow, data bytes):
//   [0, kMaskBytes)     mask: int32 [R], 1 = rank r is masked for d's low-latency kernels (shrink mode):
//                       d neither sends to r nor waits for it. Written by ll_mask.asc (the buffer's
//                       update / clean calls) and by d's own send / receive kernels when a wait for r times out.
//   [kMaskBytes, ...)   inbox: R regions of region_bytes, region s written only by source s, row slot p
//                       at p * row_stride(row_bytes)
// Flags (int32, monotonic exchange numbers `seq`): flag s of d = the last exchange whose rows source s has
// put in d's inbox; flag R + d of s = the last exchange of s's rows that d has copied out (s writes its
// region of d's inbox again only after that).
#pragma once

#include <stdint.h>

#include <deep_ep/ascend/symm_exchange.h>

namespace ep_ll {

constexpr int64_t kMaskBytes = 512;   // up to 128 ranks (int32 words), padded to whole data-mover blocks

__aicore__ inline int64_t inbox_offset(int64_t data_offset, int32_t source, int64_t region_bytes) {
  return data_offset + kMaskBytes + int64_t(source) * region_bytes;
}

// The mask words of this rank's window into UB (`words`, R int32), read in order after the copy.
__aicore__ inline void load_mask(const dj_symm::Window& w, __ubuf__ int32_t* words) {
  asc_copy_gm2ub_align((__ubuf__ uint8_t*)words, dj_symm::remote(w, w.rank, w.data_offset), uint32_t(4 * w.num_ranks));
  asc_sync_notify(PIPE_MTE2, PIPE_S, 1);
  asc_sync_wait(PIPE_MTE2, PIPE_S, 1);
}

// Mask rank `peer` in this rank's window (a wait for it timed out); `word`: one int32 of UB scratch.
__aicore__ inline void mask_peer(const dj_symm::Window& w, int32_t peer, __ubuf__ int32_t* word) {
  word[0] = 1;
  asc_sync_notify(PIPE_S, PIPE_MTE3, 1);
  asc_sync_wait(PIPE_S, PIPE_MTE3, 1);
  asc_copy_ub2gm_align(dj_symm::remote(w, w.rank, w.data_offset + 4 * int64_t(peer)), (__ubuf__ uint8_t*)word, 4u);
  asc_sync_notify(PIPE_MTE3, PIPE_S, 1);
  asc_sync_wait(PIPE_MTE3, PIPE_S, 1);
}

// Wait until this rank's flag `flag` reaches `seq`: without shrink a timeout fails the launch (naming rank
// and flag); with shrink it masks `peer` and answers false.
__aicore__ inline bool wait_or_mask(const dj_symm::Window& w, int32_t flag, int32_t seq, int32_t shrink, int32_t peer,
                                    __ubuf__ int32_t* word) {
  if (!shrink) {
    dj_symm::signal_wait_until_ge(w, flag, seq);
    return true;
  }
  if (dj_symm::signal_wait_until_ge_for(w, flag, seq, 0)) return true;
  mask_peer(w, peer, word);
  return false;
}

}  // namespace ep_ll
