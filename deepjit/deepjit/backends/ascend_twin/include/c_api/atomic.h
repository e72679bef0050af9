// c_api/atomic.h — store-mode atomics on the twin: asc_set_atomic_{add,max,min}_<type>() make every later
// data-mover store to GM (MTE3 UB -> GM, FixPipe L0C -> GM) combine with the GM data instead of
// overwriting it, until asc_set_atomic_none() (asc-devkit docs/zh/api/SIMD-API/C-API/simd_atomic/
// asc_set_atomic_add.md / _max.md / _min.md / _none.md: types int8, int16, int (int32), bfloat16,
// half, float; "not supported L1 -> GM on Ascend 950", which the twin has no route for anyway). The
// GM bytes are read as the configured type whatever the copy's element type is (the mode is a core
// register: impl/c_api/instr_impl/npu_arch_3510/atomic_impl/*: set_atomic_<type>() + set_atomic_<op>()).
// Each element is one read-modify-write that is atomic across the twin's concurrently running cores
// (a compare-exchange loop), so blocks that accumulate into one tile add up whatever their order.
// Narrow float sums are computed in float and rounded once to the element type (nearest-even, the
// twin's rounding for every float narrowing: dj_twin/types.h).
#pragma once

#include <cstring>
#include <type_traits>

#include "dj_twin/runtime.h"
#include "dj_twin/types.h"

namespace dj_twin {

enum class StoreAtomicOp : uint8_t { None = 0, Add, Max, Min };
enum class StoreAtomicType : uint8_t { None = 0, I8, I16, I32, BF16, F16, F32 };
inline constexpr const char* kStoreAtomicOpName[] = {"none", "add", "max", "min"};

inline void set_store_atomic(StoreAtomicOp op, StoreAtomicType type) {
  poll();
  Core& c = core();
  c.store_atomic_op = uint8_t(op);
  c.store_atomic_type = uint8_t(type);
}

template <typename T>
inline T combine_atomic(T old_value, T value, StoreAtomicOp op) {
  if constexpr (std::is_integral_v<T>) {
    // Integer sums wrap like the device's two's-complement adders.
    using U = std::make_unsigned_t<T>;
    if (op == StoreAtomicOp::Add) return T(U(old_value) + U(value));
    if (op == StoreAtomicOp::Max) return old_value < value ? value : old_value;
    return value < old_value ? value : old_value;
  } else {
    float a = float(old_value), b = float(value);
    if (op == StoreAtomicOp::Add) return T(a + b);
    if (op == StoreAtomicOp::Max) return a < b ? value : old_value;
    return b < a ? value : old_value;
  }
}

// One element at `to` combined with `value` atomically (bits compared, so NaN payloads cannot loop).
template <typename T>
inline void atomic_rmw(uint8_t* to, T value, StoreAtomicOp op) {
  using Bits = std::conditional_t<sizeof(T) == 1, uint8_t, std::conditional_t<sizeof(T) == 2, uint16_t, uint32_t>>;
  static_assert(sizeof(T) == sizeof(Bits), "store-mode atomics act on 1-, 2- or 4-byte elements");
  auto* word = reinterpret_cast<Bits*>(to);
  Bits expected = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    T old_value;
    std::memcpy(&old_value, &expected, sizeof(T));
    T next = combine_atomic(old_value, value, op);
    Bits desired;
    std::memcpy(&desired, &next, sizeof(T));
    if (__atomic_compare_exchange_n(word, &expected, desired, true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
  }
}

template <typename T>
inline void atomic_store_elems(uint8_t* to, const uint8_t* from, size_t bytes, StoreAtomicOp op) {
  for (size_t i = 0; i < bytes; i += sizeof(T)) {
    T value;
    std::memcpy(&value, from + i, sizeof(T));
    atomic_rmw<T>(to + i, value, op);
  }
}

// A data mover's store of `bytes` bytes to GM: a plain copy, or with a store-mode atomic set, one atomic
// read-modify-write per element of the configured type.
inline void gm_store(uint8_t* to, const void* from, size_t bytes, const char* op) {
  Core& c = core();
  auto aop = StoreAtomicOp(c.store_atomic_op);
  if (aop == StoreAtomicOp::None) {
    std::memcpy(to, from, bytes);
    return;
  }
  static constexpr size_t kSize[] = {0, 1, 2, 4, 2, 2, 4};
  const size_t elem = kSize[c.store_atomic_type];
  if (bytes % elem || reinterpret_cast<uintptr_t>(to) % elem)
    fail("%s: atomic %s store of %zu bytes at a GM address %% %zu = %zu does not cover whole %zu-byte elements of "
         "the configured atomic type", op, kStoreAtomicOpName[int(aop)], bytes, elem,
         size_t(reinterpret_cast<uintptr_t>(to) % elem), elem);
  const auto* src = static_cast<const uint8_t*>(from);
  switch (StoreAtomicType(c.store_atomic_type)) {
    case StoreAtomicType::I8: atomic_store_elems<int8_t>(to, src, bytes, aop); break;
    case StoreAtomicType::I16: atomic_store_elems<int16_t>(to, src, bytes, aop); break;
    case StoreAtomicType::I32: atomic_store_elems<int32_t>(to, src, bytes, aop); break;
    case StoreAtomicType::BF16: atomic_store_elems<bfloat16>(to, src, bytes, aop); break;
    case StoreAtomicType::F16: atomic_store_elems<float16>(to, src, bytes, aop); break;
    case StoreAtomicType::F32: atomic_store_elems<float>(to, src, bytes, aop); break;
    default: fail("%s: store-mode atomic type %d is not a type", op, int(c.store_atomic_type));
  }
}

}  // namespace dj_twin

#define DJ_TWIN_STORE_ATOMIC(NAME, OP, TYPE) \
  inline void NAME() { ::dj_twin::set_store_atomic(::dj_twin::StoreAtomicOp::OP, ::dj_twin::StoreAtomicType::TYPE); }
#define DJ_TWIN_STORE_ATOMIC_TYPES(op, OP)                   \
  DJ_TWIN_STORE_ATOMIC(asc_set_atomic_##op##_int8, OP, I8)    \
  DJ_TWIN_STORE_ATOMIC(asc_set_atomic_##op##_int16, OP, I16)  \
  DJ_TWIN_STORE_ATOMIC(asc_set_atomic_##op##_int, OP, I32)    \
  DJ_TWIN_STORE_ATOMIC(asc_set_atomic_##op##_int32, OP, I32)  \
  DJ_TWIN_STORE_ATOMIC(asc_set_atomic_##op##_bfloat, OP, BF16) \
  DJ_TWIN_STORE_ATOMIC(asc_set_atomic_##op##_float16, OP, F16) \
  DJ_TWIN_STORE_ATOMIC(asc_set_atomic_##op##_float, OP, F32)
// asc-devkit spells the 32-bit integer forms _int; TileLang 0.1.15's codegen (codegen_ascend.cc,
// tl.ascend_set_atomic) prints _int32: both name the same mode here.
DJ_TWIN_STORE_ATOMIC_TYPES(add, Add)
DJ_TWIN_STORE_ATOMIC_TYPES(max, Max)
DJ_TWIN_STORE_ATOMIC_TYPES(min, Min)
#undef DJ_TWIN_STORE_ATOMIC_TYPES
#undef DJ_TWIN_STORE_ATOMIC
inline void asc_set_atomic_none() { ::dj_twin::set_store_atomic(::dj_twin::StoreAtomicOp::None, ::dj_twin::StoreAtomicType::None); }
