// c_api/asc_simd.h — the twin's AscendC C API umbrella: runtime, system variables, synchronisation,
// scalar GM stores, data movement, the cube unit, the vector register API (c_api/reg.h) and, last, the
// compile-time "not implemented on the Ascend twin" fallbacks for every other asc_* name.
#pragma once

#include "dj_twin/runtime.h"
#include "c_api/utils_enum.h"
#include "c_api/sys_var.h"
#include "c_api/sync.h"
#include "c_api/atomic.h"
#include "c_api/scalar_compute.h"
#include "c_api/cache_ctrl.h"
#include "c_api/datamove.h"
#include "c_api/cube.h"
#include "c_api/reg.h"
#include "c_api/unimplemented.h"

// AscendC's C++ namespace: TileLang's tl_templates/ascend/nd2nz_copy.h says `using namespace AscendC;`
// (and uses nothing from it); the twin models the C API only, so the namespace is empty.
namespace AscendC {}
