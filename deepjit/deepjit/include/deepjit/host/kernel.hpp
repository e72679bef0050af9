// Declaring a host kernel for DeepJIT's host toolchain.
//
//   DJ_KERNEL(my_add, "ptr,ptr,i64") void my_add(float* out, const float* x, int64_t n) { ... }
//
// The signature string lists one type per argument (ptr, i8..i64, u8..u64, f32, f64); the runtime
// finds the kernel by its exported `<name>__dj_signature` symbol and checks every launch against it.
//
// A kernel fails without throwing (an exception leaving a kernel, or an OpenMP region, aborts the
// process): it calls dj::report_error(message) and returns; the launcher raises DeepJITError with
// the first message reported during the launch (dj_kernel_error, one buffer per loaded kernel;
// deepjit serialises launches of one kernel so concurrent launches cannot see each other's error).
#pragma once

#include <cstddef>
#include <cstdint>

#define DJ_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {
__attribute__((weak, visibility("default"))) char dj_kernel_error[1024] = {};
}

namespace dj {
// Records `message` as the launch's error unless one is recorded already; any thread may call it.
// The first byte is claimed atomically (the launcher resets it to 0 after reading the message).
inline void report_error(const char* message) {
    char expected = 0;
    if (!__atomic_compare_exchange_n(&dj_kernel_error[0], &expected, '\1', false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    size_t n = 0;
    while (message[n] != 0 && n + 1 < sizeof(dj_kernel_error)) ++n;
    for (size_t i = 1; i < n; ++i) dj_kernel_error[i] = message[i];
    dj_kernel_error[n > 0 ? n : 1] = 0;
    __atomic_store_n(&dj_kernel_error[0], n > 0 ? message[0] : '?', __ATOMIC_RELEASE);
}
// Whether an error was reported during this launch (workers stop early on it).
inline bool failed() { return __atomic_load_n(&dj_kernel_error[0], __ATOMIC_ACQUIRE) != 0; }
}  // namespace dj

#define DJ_KERNEL(name, signature)                                                        \
    DJ_EXPORT __attribute__((used)) const char name##__dj_signature[] = signature;       \
    DJ_EXPORT

#if defined(__GNUC__)
#define DJ_INLINE inline __attribute__((always_inline))
#define DJ_RESTRICT __restrict__
#else
#define DJ_INLINE inline
#define DJ_RESTRICT
#endif
