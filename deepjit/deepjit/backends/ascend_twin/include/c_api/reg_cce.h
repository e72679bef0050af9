// Ascend twin: the CCE register builtins in their destination-first form, `::vmax(dst, a, b, mask, MODE)`,
// which TileLang 0.1.15 emits for `dst = T.simd.vmax(a, b, mask, mode="MODE_MERGING")` (its
// LegalizeSimdMerging pass turns the assignment into this void call; codegen_ascend.cc calls the `::` builtin
// for the element types it marks as natively merging, simd_inst:: wrappers otherwise).
//
// Semantics: the operation is the C API one of the same instruction (vmax = asc_max, vadds =
// asc_add_scalar, vdup = asc_duplicate_scalar / asc_duplicate{,_highest}, vaxpy = asc_axpy, ...); the mode
// is AscendC's MaskMergeMode: "ZEROING: mask未选择的元素在dst中置零; MERGING: mask未选择的元素对应dst元素中
// 保留dst原值" (elements the mask leaves out keep dst's old value). The reductions (vcadd, vcmax, vcmin,
// vcgadd, vcgmax, vcgmin, vcpadd) in this form are listed in c_api/unimplemented.h: which result lanes
// their mask "selects" is not documented.
#pragma once

#include "c_api/reg_ops.h"

namespace dj_twin {
namespace vreg {
// d = result on the lanes `m` selects; elsewhere 0 (MODE_ZEROING) or d's old value (MODE_MERGING).
template <class V, class Mode> inline void merge_into(V& d, const V& result, vector_bool m, Mode mode) {
  static_assert(int(Mode{}) == int(MODE_ZEROING) || int(Mode{}) == int(MODE_MERGING),
                "CCE register builtins take MODE_ZEROING or MODE_MERGING");
  if (int(mode) == int(MODE_ZEROING)) {
    d = result;  // the C API result already has zeros on the unselected lanes
    return;
  }
  const V old = d;
  for (int i = 0; i < V::lanes; ++i) d.e[i] = active<V>(m, i) ? result.e[i] : old.e[i];
}
}  // namespace vreg
}  // namespace dj_twin

#define DJ_TWIN_CCE_BINARY(NAME, CAPI)                                                         \
  template <class V, class B, class Mode, class = dj_twin::vreg::if_reg<V>>                   \
  inline void NAME(V& d, V a, B b, vector_bool m, Mode mode) {                                 \
    V r;                                                                                       \
    CAPI(r, a, b, m);                                                                          \
    dj_twin::vreg::merge_into(d, r, m, mode);                                                  \
  }
#define DJ_TWIN_CCE_UNARY(NAME, CAPI)                                                          \
  template <class V, class Mode, class = dj_twin::vreg::if_reg<V>>                            \
  inline void NAME(V& d, V a, vector_bool m, Mode mode) {                                      \
    V r;                                                                                       \
    CAPI(r, a, m);                                                                             \
    dj_twin::vreg::merge_into(d, r, m, mode);                                                  \
  }

DJ_TWIN_CCE_BINARY(vadd, asc_add)
DJ_TWIN_CCE_BINARY(vsub, asc_sub)
DJ_TWIN_CCE_BINARY(vmul, asc_mul)
DJ_TWIN_CCE_BINARY(vdiv, asc_div)
DJ_TWIN_CCE_BINARY(vmax, asc_max)
DJ_TWIN_CCE_BINARY(vmin, asc_min)
DJ_TWIN_CCE_BINARY(vand, asc_and)
DJ_TWIN_CCE_BINARY(vor, asc_or)
DJ_TWIN_CCE_BINARY(vxor, asc_xor)
DJ_TWIN_CCE_BINARY(vshl, asc_shiftleft)
DJ_TWIN_CCE_BINARY(vshr, asc_shiftright)
DJ_TWIN_CCE_BINARY(vabsdif, asc_abs_sub)
DJ_TWIN_CCE_BINARY(vadds, asc_add_scalar)
DJ_TWIN_CCE_BINARY(vmaxs, asc_max_scalar)
DJ_TWIN_CCE_BINARY(vmins, asc_min_scalar)
DJ_TWIN_CCE_BINARY(vmuls, asc_mul_scalar)
DJ_TWIN_CCE_BINARY(vshls, asc_shiftleft_scalar)
DJ_TWIN_CCE_BINARY(vshrs, asc_shiftright_scalar)
DJ_TWIN_CCE_UNARY(vexp, asc_exp)
DJ_TWIN_CCE_UNARY(vln, asc_ln)
DJ_TWIN_CCE_UNARY(vsqrt, asc_sqrt)
DJ_TWIN_CCE_UNARY(vabs, asc_abs)
DJ_TWIN_CCE_UNARY(vneg, asc_neg)
DJ_TWIN_CCE_UNARY(vrelu, asc_relu)
DJ_TWIN_CCE_UNARY(vnot, asc_not)
#undef DJ_TWIN_CCE_BINARY
#undef DJ_TWIN_CCE_UNARY

// vaxpy: d = a * s + d on the selected lanes (the accumulator is d itself).
template <class V, class S, class Mode, class = dj_twin::vreg::if_reg<V>>
inline void vaxpy(V& d, V a, S s, vector_bool m, Mode mode) {
  V r = d;
  asc_axpy(r, a, s, m);
  dj_twin::vreg::merge_into(d, r, m, mode);
}

// vdup of a scalar (the destination's type picks the element type) ...
template <class V, class S, class Mode, class = dj_twin::vreg::if_reg<V>,
          class = std::enable_if_t<!dj_twin::vreg::is_reg<S>::value>>
inline void vdup(V& d, S s, vector_bool m, Mode mode) {
  V r;
  asc_duplicate_scalar(r, s, m);
  dj_twin::vreg::merge_into(d, r, m, mode);
}
// ... and of a vector's lowest or highest lane (TileLang's vdupv).
template <class V, class Pos, class Mode, class = dj_twin::vreg::if_reg<V>>
inline void vdup(V& d, V a, vector_bool m, Pos pos, Mode mode) {
  V r;
  if constexpr (int(Pos{}) == int(POS_LOWEST))
    asc_duplicate(r, a, m);
  else
    asc_duplicate_highest(r, a, m);
  dj_twin::vreg::merge_into(d, r, m, mode);
}
