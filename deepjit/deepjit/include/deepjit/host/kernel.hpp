// Declaring a host kernel for DeepJIT's host toolchain.
//
//   DJ_KERNEL(my_add, "ptr,ptr,i64") void my_add(float* out, const float* x, int64_t n) { ... }
//
// The signature string lists one type per argument (ptr, i8..i64, u8..u64, f32, f64); the runtime
// finds the kernel by its exported `<name>__dj_signature` symbol and checks every launch against it.
#pragma once

#include <cstddef>
#include <cstdint>

#define DJ_EXPORT extern "C" __attribute__((visibility("default")))

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
