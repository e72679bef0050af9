// deep_gemm/ascend/m_grouped_fp4.h — the vector side of the M-grouped FP8 x K-major FP4 GEMM
// (m_grouped_fp8_fp4_mx_gemm.asc; Mega MoE's persistent kernel mega_moe.asc): the block's vector cores walk the
// cube's tiles (m_grouped.h's TileWalk) and widen each data tile's B rows of its group into the cube's L1 stages
// (fp4_l1_widen.h); the zero tiles take no stage. Define DG_MX 1 and DG_L1_STAGES 2 before including.
#pragma once

#include <deep_gemm/ascend/m_grouped.h>
#include <deep_gemm/ascend/fp4_l1_widen.h>

namespace dg_ascend {

// ub, l1: the core's UB and its block's L1 (the entry's (__ubuf__ uint8_t *)0 / (__cbuf__ uint8_t *)0).
__aicore__ inline void grouped_widen(const DgMGroupedGemmArgs& kargs, __ubuf__ uint8_t* ub, __cbuf__ uint8_t* l1) {
  const Problem p = make_problem(kargs.m, kargs.n, kargs.k, kargs.lda, kargs.ldb);
  TileWalk walk(p, kargs.layout, uint32_t(kargs.num_groups), uint32_t(kargs.alignment));
  fused::Fp4Widener<kBlockN, kMxL1DataA> widen(ub, l1);
  __gm__ uint8_t* b = (__gm__ uint8_t*)kargs.b;  // packed FP4 rows, ldb bytes apart
  GroupTile j;
  while (walk.next(j))
    if (!j.zero) widen.tile(b + j.g * kargs.b_group_stride, kargs.ldb, j.n0, p.n, p.k);
  widen.drain();
}

}  // namespace dg_ascend
