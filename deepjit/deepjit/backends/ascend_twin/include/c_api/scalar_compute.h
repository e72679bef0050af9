// c_api/scalar_compute.h — scalar-unit GM access on the twin.
//
// asc_store_dev(addr, value) (asc-devkit docs/zh/api/SIMD-API/C-API/scalar_compute/asc_store_dev.md, PIPE_S):
// writes one 1/2/4/8-byte integer to GM without going through the scalar core's DCache, so cores writing
// neighbouring GM bytes that share a cache line do not overwrite each other. The twin's scalar GM accesses
// never pass through a cache, so this is a range-checked plain store (TileLang's tl::write_gm_bypass_dcache
// bit-casts every scalar GM store of a SIMD kernel to one of these overloads).
#pragma once

#include <cstdint>

#include "dj_twin/runtime.h"

namespace dj_twin {
template <class T>
inline void store_dev(T* addr, T value) {
  poll();
  check_gm(addr, sizeof(T), "asc_store_dev");
  *reinterpret_cast<volatile T*>(addr) = value;
}
}  // namespace dj_twin

inline void asc_store_dev(__gm__ int8_t* addr, int8_t value) { dj_twin::store_dev(addr, value); }
inline void asc_store_dev(__gm__ uint8_t* addr, uint8_t value) { dj_twin::store_dev(addr, value); }
inline void asc_store_dev(__gm__ int16_t* addr, int16_t value) { dj_twin::store_dev(addr, value); }
inline void asc_store_dev(__gm__ uint16_t* addr, uint16_t value) { dj_twin::store_dev(addr, value); }
inline void asc_store_dev(__gm__ int32_t* addr, int32_t value) { dj_twin::store_dev(addr, value); }
inline void asc_store_dev(__gm__ uint32_t* addr, uint32_t value) { dj_twin::store_dev(addr, value); }
inline void asc_store_dev(__gm__ int64_t* addr, int64_t value) { dj_twin::store_dev(addr, value); }
inline void asc_store_dev(__gm__ uint64_t* addr, uint64_t value) { dj_twin::store_dev(addr, value); }
