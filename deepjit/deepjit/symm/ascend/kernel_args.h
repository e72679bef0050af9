// symm/ascend/kernel_args.h — the argument structs of the transport's own Ascend kernels (filled by
// name from Python: deepjit.kernel_args). The window fields (symm_*) are what every kernel that talks
// to peers carries: DeviceWindow.kernel_fields() fills them, dj_symm::make_window builds the window.
#pragma once

#include <stdint.h>

// dj_symm_put_signal (put_signal.asc): src [num_bytes] -> byte dst_offset of rank `peer`'s window data,
// then `value` added to flag `flag` of that window by each block once its part has landed.
struct DjSymmPutSignalArgs {
  __gm__ uint8_t* src;
  __gm__ int64_t* symm_bases;
  int64_t symm_bytes, symm_data_offset, symm_timeout_ns;
  int32_t symm_rank, symm_num_ranks;
  int64_t dst_offset, num_bytes;
  int32_t peer, flag, value, pad;
};

// dj_symm_wait_get (wait_get.asc): wait until this rank's flag `flag` reaches `value`, then bytes
// [src_offset, src_offset + num_bytes) of this rank's window data -> dst.
struct DjSymmWaitGetArgs {
  __gm__ uint8_t* dst;
  __gm__ int64_t* symm_bases;
  int64_t symm_bytes, symm_data_offset, symm_timeout_ns;
  int32_t symm_rank, symm_num_ranks;
  int64_t src_offset, num_bytes;
  int32_t flag, value;
};
