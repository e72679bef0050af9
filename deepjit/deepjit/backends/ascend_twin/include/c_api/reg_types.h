// Ascend twin: the dav-3510 vector register file (VL = 256 bytes), its mask register and the enum-like
// constants of the register API (PAT_*, MODE_*, ROUND_*, RS_*, PART_*, ...).
//
// A data register holds 256 bytes of lanes stored as raw bits; the lane kind (float32, bf16, fp8, int8, ...)
// is part of the C++ type so overloads and TileLang's vec<T> mapping see distinct types, and
// reinterpret_cast between register types re-reads the same bytes as on the chip.
// The mask register (vector_bool) is VL/8 = 256 bits; a lane of a b8/b16/b32/b64 operand uses bit
// lane*sizeof(element) and ignores the other bits of its group (AscendC "reg数据类型定义").
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dj_twin/runtime.h"
#include "dj_twin/types.h"

namespace dj_twin {
namespace vreg {

constexpr int VL = 256;  // bytes per vector register on dav-3510

// Lane kinds: the element interpretation of a register.
enum class Kind : uint8_t {
  F32, F16, BF16, E4M3, E5M2, E8M0, E2M1X2, E1M2X2, HIF8, S4X2,
  S8, U8, S16, U16, S32, U32, S64, U64,
};

template <Kind K> struct lane;
#define DJ_TWIN_LANE(K, BITS, IS_FLOAT, IS_SIGNED)                                 \
  template <> struct lane<Kind::K> {                                               \
    using bits_t = BITS;                                                           \
    static constexpr bool is_float = IS_FLOAT;                                     \
    static constexpr bool is_signed = IS_SIGNED;                                   \
  };
DJ_TWIN_LANE(F32, uint32_t, true, true)
DJ_TWIN_LANE(F16, uint16_t, true, true)
DJ_TWIN_LANE(BF16, uint16_t, true, true)
DJ_TWIN_LANE(E4M3, uint8_t, true, true)
DJ_TWIN_LANE(E5M2, uint8_t, true, true)
DJ_TWIN_LANE(E8M0, uint8_t, true, false)
DJ_TWIN_LANE(E2M1X2, uint8_t, true, true)
DJ_TWIN_LANE(E1M2X2, uint8_t, true, true)
DJ_TWIN_LANE(HIF8, uint8_t, true, true)
DJ_TWIN_LANE(S4X2, uint8_t, false, true)
DJ_TWIN_LANE(S8, int8_t, false, true)
DJ_TWIN_LANE(U8, uint8_t, false, false)
DJ_TWIN_LANE(S16, int16_t, false, true)
DJ_TWIN_LANE(U16, uint16_t, false, false)
DJ_TWIN_LANE(S32, int32_t, false, true)
DJ_TWIN_LANE(U32, uint32_t, false, false)
DJ_TWIN_LANE(S64, int64_t, false, true)
DJ_TWIN_LANE(U64, uint64_t, false, false)
#undef DJ_TWIN_LANE

template <Kind K> struct reg {
  using bits_t = typename lane<K>::bits_t;
  static constexpr Kind kind = K;
  static constexpr int width = sizeof(bits_t);  // bytes per lane
  static constexpr int lanes = VL / width;
  alignas(64) bits_t e[lanes] = {};
  uint64_t step = 0;  // the dataflow step its value is ready at (dj_twin/timeline.h VecDataflow)
};

template <class V> struct is_reg : std::false_type {};
template <Kind K> struct is_reg<reg<K>> : std::true_type {};

// The 256-bit predicate register.
struct mask {
  alignas(32) uint8_t b[VL / 8] = {};
  uint64_t step = 0;  // the dataflow step its value is ready at (dj_twin/timeline.h VecDataflow)
  bool bit(int i) const { return (b[i >> 3] >> (i & 7)) & 1; }
  void set(int i, bool v) {
    if (v) b[i >> 3] |= uint8_t(1u << (i & 7));
    else b[i >> 3] &= uint8_t(~(1u << (i & 7)));
  }
  // Lane `i` of an operand whose elements are `width` bytes wide.
  bool lane(int i, int width) const { return bit(i * width); }
  void set_lane(int i, int width, bool v) {
    for (int k = 0; k < width; ++k) set(i * width + k, false);
    set(i * width, v);
  }
};

// Enum-like constants of the register API. Each is an object of its own empty type so TileLang's
// `if constexpr (part == HIGHER)` on a by-value parameter is a constant expression, and so overloads can
// tell the families apart; each converts to its integer value.
template <int Family, int V> struct konst {
  static constexpr int value = V;
  constexpr operator int() const { return V; }
  template <int W> constexpr bool operator==(konst<Family, W>) const { return V == W; }
  template <int W> constexpr bool operator!=(konst<Family, W>) const { return V != W; }
};
enum Family { PAT, MODE, ROUND, RS, PART, HL, POST, POS, ORDER, BIN, MEMBAR, DIST };
template <class T, int F> struct is_family : std::false_type {};
template <int F, int V> struct is_family<konst<F, V>, F> : std::true_type {};

// Patterns of asc_create_mask (values are ours; only their meaning is documented).
enum Pattern {
  P_ALL, P_VL1, P_VL2, P_VL3, P_VL4, P_VL8, P_VL16, P_VL32, P_VL64, P_VL128, P_M3, P_M4, P_H, P_Q, P_ALLF,
};
// Rounding modes: R = nearest-even (rint), A = nearest, ties away (round), F = floor, C = ceil,
// Z = toward zero (trunc), O = round to odd, H = nearest ties away (hifloat8).
enum RoundCode { R_R, R_A, R_F, R_C, R_Z, R_O, R_H };

}  // namespace vreg
}  // namespace dj_twin

// ---- register types: TileLang's short names and AscendC's documented names ----
using vector_f32 = dj_twin::vreg::reg<dj_twin::vreg::Kind::F32>;
using vector_f16 = dj_twin::vreg::reg<dj_twin::vreg::Kind::F16>;
using vector_bf16 = dj_twin::vreg::reg<dj_twin::vreg::Kind::BF16>;
using vector_f8e4m3 = dj_twin::vreg::reg<dj_twin::vreg::Kind::E4M3>;
using vector_f8e5m2 = dj_twin::vreg::reg<dj_twin::vreg::Kind::E5M2>;
using vector_f8e8m0 = dj_twin::vreg::reg<dj_twin::vreg::Kind::E8M0>;
using vector_f4e2m1x2 = dj_twin::vreg::reg<dj_twin::vreg::Kind::E2M1X2>;
using vector_f4e1m2x2 = dj_twin::vreg::reg<dj_twin::vreg::Kind::E1M2X2>;
using vector_hif8 = dj_twin::vreg::reg<dj_twin::vreg::Kind::HIF8>;
using vector_s4x2 = dj_twin::vreg::reg<dj_twin::vreg::Kind::S4X2>;
using vector_s8 = dj_twin::vreg::reg<dj_twin::vreg::Kind::S8>;
using vector_u8 = dj_twin::vreg::reg<dj_twin::vreg::Kind::U8>;
using vector_s16 = dj_twin::vreg::reg<dj_twin::vreg::Kind::S16>;
using vector_u16 = dj_twin::vreg::reg<dj_twin::vreg::Kind::U16>;
using vector_s32 = dj_twin::vreg::reg<dj_twin::vreg::Kind::S32>;
using vector_u32 = dj_twin::vreg::reg<dj_twin::vreg::Kind::U32>;
using vector_s64 = dj_twin::vreg::reg<dj_twin::vreg::Kind::S64>;
using vector_u64 = dj_twin::vreg::reg<dj_twin::vreg::Kind::U64>;

using vector_float = vector_f32;
using vector_half = vector_f16;
using vector_bfloat16_t = vector_bf16;
using vector_fp8_e4m3fn_t = vector_f8e4m3;
using vector_fp8_e5m2_t = vector_f8e5m2;
using vector_fp8_e8m0_t = vector_f8e8m0;
using vector_fp4x2_e2m1_t = vector_f4e2m1x2;
using vector_fp4x2_e1m2_t = vector_f4e1m2x2;
using vector_hifloat8_t = vector_hif8;
using vector_int4x2_t = vector_s4x2;
using vector_int8_t = vector_s8;
using vector_uint8_t = vector_u8;
using vector_int16_t = vector_s16;
using vector_uint16_t = vector_u16;
using vector_int32_t = vector_s32;
using vector_uint32_t = vector_u32;
using vector_int64_t = vector_s64;
using vector_uint64_t = vector_u64;

using vector_bool = dj_twin::vreg::mask;

// Unaligned-access buffers and the address register (their ops are not implemented on the twin).
struct vector_load_unalign { alignas(32) uint8_t b[64] = {}; };
struct vector_store_unalign { alignas(32) uint8_t b[64] = {}; };
struct addr_reg { uint32_t offset = 0; };

// ---- constants ----
#define DJ_TWIN_K(NAME, FAM, V) inline constexpr dj_twin::vreg::konst<dj_twin::vreg::FAM, V> NAME{};
DJ_TWIN_K(PAT_ALL, PAT, dj_twin::vreg::P_ALL)
DJ_TWIN_K(PAT_VL1, PAT, dj_twin::vreg::P_VL1)
DJ_TWIN_K(PAT_VL2, PAT, dj_twin::vreg::P_VL2)
DJ_TWIN_K(PAT_VL3, PAT, dj_twin::vreg::P_VL3)
DJ_TWIN_K(PAT_VL4, PAT, dj_twin::vreg::P_VL4)
DJ_TWIN_K(PAT_VL8, PAT, dj_twin::vreg::P_VL8)
DJ_TWIN_K(PAT_VL16, PAT, dj_twin::vreg::P_VL16)
DJ_TWIN_K(PAT_VL32, PAT, dj_twin::vreg::P_VL32)
DJ_TWIN_K(PAT_VL64, PAT, dj_twin::vreg::P_VL64)
DJ_TWIN_K(PAT_VL128, PAT, dj_twin::vreg::P_VL128)
DJ_TWIN_K(PAT_M3, PAT, dj_twin::vreg::P_M3)
DJ_TWIN_K(PAT_M4, PAT, dj_twin::vreg::P_M4)
DJ_TWIN_K(PAT_H, PAT, dj_twin::vreg::P_H)
DJ_TWIN_K(PAT_Q, PAT, dj_twin::vreg::P_Q)
DJ_TWIN_K(PAT_ALLF, PAT, dj_twin::vreg::P_ALLF)

DJ_TWIN_K(MODE_ZEROING, MODE, 0)
DJ_TWIN_K(MODE_MERGING, MODE, 1)
DJ_TWIN_K(MODE_STORED, MODE, 2)

DJ_TWIN_K(ROUND_R, ROUND, dj_twin::vreg::R_R)
DJ_TWIN_K(ROUND_A, ROUND, dj_twin::vreg::R_A)
DJ_TWIN_K(ROUND_F, ROUND, dj_twin::vreg::R_F)
DJ_TWIN_K(ROUND_C, ROUND, dj_twin::vreg::R_C)
DJ_TWIN_K(ROUND_Z, ROUND, dj_twin::vreg::R_Z)
DJ_TWIN_K(ROUND_O, ROUND, dj_twin::vreg::R_O)
DJ_TWIN_K(ROUND_H, ROUND, dj_twin::vreg::R_H)

DJ_TWIN_K(RS_DISABLE, RS, 0)
DJ_TWIN_K(RS_ENABLE, RS, 1)

DJ_TWIN_K(PART_EVEN, PART, 0)
DJ_TWIN_K(PART_ODD, PART, 1)
DJ_TWIN_K(PART_P0, PART, 0)
DJ_TWIN_K(PART_P1, PART, 1)
DJ_TWIN_K(PART_P2, PART, 2)
DJ_TWIN_K(PART_P3, PART, 3)

DJ_TWIN_K(LOWER, HL, 0)
DJ_TWIN_K(HIGHER, HL, 1)

DJ_TWIN_K(POST_UPDATE, POST, 1)
DJ_TWIN_K(NO_POST_UPDATE, POST, 0)

DJ_TWIN_K(POS_LOWEST, POS, 0)
DJ_TWIN_K(POS_HIGHEST, POS, 1)

DJ_TWIN_K(INC_ORDER, ORDER, 0)
DJ_TWIN_K(DEC_ORDER, ORDER, 1)

DJ_TWIN_K(Bin_N0, BIN, 0)
DJ_TWIN_K(Bin_N1, BIN, 1)

DJ_TWIN_K(VV_ALL, MEMBAR, 0)
DJ_TWIN_K(VST_VLD, MEMBAR, 1)
DJ_TWIN_K(VLD_VST, MEMBAR, 2)
DJ_TWIN_K(VST_VST, MEMBAR, 3)
DJ_TWIN_K(VS_ALL, MEMBAR, 4)
DJ_TWIN_K(VST_LD, MEMBAR, 5)
DJ_TWIN_K(VLD_ST, MEMBAR, 6)
DJ_TWIN_K(VST_ST, MEMBAR, 7)
DJ_TWIN_K(SV_ALL, MEMBAR, 8)
DJ_TWIN_K(ST_VLD, MEMBAR, 9)
DJ_TWIN_K(LD_VST, MEMBAR, 10)
DJ_TWIN_K(ST_VST, MEMBAR, 11)
DJ_TWIN_K(SS_ALL, MEMBAR, 12)
DJ_TWIN_K(ST_LD, MEMBAR, 13)
DJ_TWIN_K(LD_ST, MEMBAR, 14)
DJ_TWIN_K(ST_ST, MEMBAR, 15)

DJ_TWIN_K(DIST_DINTLV_B8, DIST, 1)
DJ_TWIN_K(DIST_DINTLV_B16, DIST, 2)
DJ_TWIN_K(DIST_DINTLV_B32, DIST, 4)
// The same distributions under the bare names of the CCE compiler's builtin dist enum, which TileLang
// 0.1.15's codegen prints for S.vld2(addr, "DINTLV_B32") (codegen_ascend.cc, tl::simd_vld2).
DJ_TWIN_K(DINTLV_B8, DIST, 1)
DJ_TWIN_K(DINTLV_B16, DIST, 2)
DJ_TWIN_K(DINTLV_B32, DIST, 4)
#undef DJ_TWIN_K
