// c_api/scalar_compute.h — scalar-unit GM access on the twin.
//
// asc_store_dev(addr, value) (asc-devkit docs/zh/api/SIMD-API/C-API/scalar_compute/asc_store_dev.md, PIPE_S):
// writes one 1/2/4/8-byte integer to GM without going through the scalar core's DCache, so cores writing
// neighbouring GM bytes that share a cache line do not overwrite each other. asc_load_dev(addr) (asc_load_dev.md)
// reads one the same way, so it sees what other cores wrote (a plain scalar read may hit a stale DCache line;
// asc_dcci, cache_ctrl.h, is the other remedy). The twin's scalar GM accesses never pass through a cache, so
// these are range-checked plain accesses (TileLang's tl::write_gm_bypass_dcache / its bypassing reads bit-cast
// every scalar GM access of a SIMD kernel to one of these overloads).
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
template <class T>
inline T load_dev(T* addr) {
  poll();
  check_gm(addr, sizeof(T), "asc_load_dev");
  return *reinterpret_cast<volatile T*>(addr);
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
inline int8_t asc_load_dev(__gm__ int8_t* addr) { return dj_twin::load_dev(addr); }
inline uint8_t asc_load_dev(__gm__ uint8_t* addr) { return dj_twin::load_dev(addr); }
inline int16_t asc_load_dev(__gm__ int16_t* addr) { return dj_twin::load_dev(addr); }
inline uint16_t asc_load_dev(__gm__ uint16_t* addr) { return dj_twin::load_dev(addr); }
inline int32_t asc_load_dev(__gm__ int32_t* addr) { return dj_twin::load_dev(addr); }
inline uint32_t asc_load_dev(__gm__ uint32_t* addr) { return dj_twin::load_dev(addr); }
inline int64_t asc_load_dev(__gm__ int64_t* addr) { return dj_twin::load_dev(addr); }
inline uint64_t asc_load_dev(__gm__ uint64_t* addr) { return dj_twin::load_dev(addr); }
