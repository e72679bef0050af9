// Ascend twin: the register-based vector API of dav-3510 (`__simd_vf__` functions): register types,
// masks, register loads/stores, element ops, compare/select, reductions, rearrangement and conversions.
// c_api/asc_simd.h includes this file, then c_api/unimplemented.h.
#pragma once

#include "c_api/reg_types.h"
#include "c_api/reg_mask.h"
#include "c_api/reg_lane.h"
#include "c_api/reg_ops.h"
#include "c_api/reg_reduce.h"
#include "c_api/reg_shuffle.h"
#include "c_api/reg_mem.h"
#include "c_api/reg_cvt.h"
#include "c_api/reg_cce.h"
