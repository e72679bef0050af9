// Ascend twin: the subset of AscendC's C++ class library (kernel_operator.h) that hand-scheduled C API
// kernels call, e.g. through TileLang's T.import_source: global state initialisation and the SSBuffer.
// Anything else of the class library is not modelled (the twin implements the C API).
#pragma once

#include "c_api/asc_simd.h"

namespace AscendC {

// InitSocState (basic_api; docs: 工具接口/系统初始化/InitSocState.md) initialises the core's global state
// registers: on the twin the modelled ones return to their launch values (CTRL, store-mode atomics, the
// FixPipe NZ2ND parameters).
inline void InitSocState() {
  ::dj_twin::Core& c = ::dj_twin::core();
  c.ctrl = 0;
  c.store_atomic_op = c.store_atomic_type = 0;
  c.l0c_nd_num = 1;
  c.l0c_src_nd_stride = c.l0c_dst_nd_stride = 0;
}

// GetSsbufBaseAddr (docs: 工具接口/系统资源与变量/GetSsbufBaseAddr.md): the SSBuffer of this core's block,
// scalar-accessed, shared by the AIC and both AIVs of a MIX block (3 KB), 1 KB per core otherwise.
inline __ssbuf__ void* GetSsbufBaseAddr() { return ::dj_twin::core().block->ssbuf; }

}  // namespace AscendC
