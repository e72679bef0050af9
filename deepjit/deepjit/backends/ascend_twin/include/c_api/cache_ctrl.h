// c_api/cache_ctrl.h — the scalar DCache controls on the twin (asc-devkit docs/zh/api/SIMD-API/C-API/cache_ctrl/
// asc_dcci.md, PIPE_S). On the chip the scalar unit reads and writes GM through its core's DCache, which other
// cores' and the data movers' writes do not update: a core that reads GM another core may have written cleans and
// invalidates the line (asc_dcci_single) or the whole cache (asc_dcci_entire_out / _all / _atomic) first, or reads
// with asc_load_dev. The twin's scalar GM accesses go straight to memory (no cache: every read is fresh), so
// asc_dcci_single checks its address and the others do nothing (no timeline event); a kernel that relies on a stale line being refreshed
// behaves the same on both. Not on the 950 (asc_dcci.md): asc_dcci_entire_ub, which fails to compile naming it.
#pragma once

#include <cstdint>

#include "dj_twin/runtime.h"

namespace dj_twin {
template <class T> inline constexpr bool dcci_unsupported = false;
}  // namespace dj_twin

inline void asc_dcci_single(__gm__ void* dst) {
  dj_twin::poll();
  dj_twin::check_gm(dst, 1, "asc_dcci_single");
}
inline void asc_dcci_entire_all() { dj_twin::poll(); }
inline void asc_dcci_entire_out() { dj_twin::poll(); }
inline void asc_dcci_entire_atomic() { dj_twin::poll(); }
template <class DjTwinUnsupported = void>
inline void asc_dcci_entire_ub() {
  static_assert(dj_twin::dcci_unsupported<DjTwinUnsupported>,
                "asc_dcci_entire_ub is not supported on the Ascend 950 (asc-devkit asc_dcci.md)");
}
