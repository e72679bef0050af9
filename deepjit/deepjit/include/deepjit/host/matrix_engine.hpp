// Which matrix engine a host kernel's BF16 products run on, fixed per compiled kernel.
//
// deepjit's host toolchain passes -DDJ_HOST_MATRIX_ENGINE=DJ_MATRIX_ENGINE_<NAME>, chosen from the
// CPU's flags or forced by DJ_HOST_MATRIX (see deepjit/backends/host/matrix_engine.py); the define
// is one of the compiler flags, so it is part of every kernel's cache key.
//   DJ_MATRIX_ENGINE_FMA         FP32 multiply-add on the unpacked BF16 values (AVX2 + FMA
//                                intrinsics where the target has them, portable code otherwise)
//   DJ_MATRIX_ENGINE_AVX512BF16  the BF16 dot-product instruction (vdpbf16ps)
//   DJ_MATRIX_ENGINE_BRGEMM      oneDNN's brgemm micro-kernel from torch's CPU library
//                                (deepjit/host/brgemm.hpp; AMX tiles where the CPU has them). Kernels
//                                test DJ_HAVE_BRGEMM for their brgemm paths; their other loops run on
//                                vdpbf16ps where the target has it, FMA otherwise.
// Kernels test DJ_HAVE_AVX512_BF16 for their own vdpbf16ps loops; it is not defined on the fma
// engine, so forcing fma on a CPU that has the dot product runs the FMA path everywhere.
// Compiled outside deepjit (no define), the best engine the compiler's target has is used.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define DJ_HAVE_AVX512 1
#endif

#define DJ_MATRIX_ENGINE_FMA 1
#define DJ_MATRIX_ENGINE_AVX512BF16 2
#define DJ_MATRIX_ENGINE_BRGEMM 3

#ifndef DJ_HOST_MATRIX_ENGINE
#if defined(DJ_HAVE_AVX512) && defined(__AVX512BF16__)
#define DJ_HOST_MATRIX_ENGINE DJ_MATRIX_ENGINE_AVX512BF16
#else
#define DJ_HOST_MATRIX_ENGINE DJ_MATRIX_ENGINE_FMA
#endif
#endif

#if DJ_HOST_MATRIX_ENGINE == DJ_MATRIX_ENGINE_BRGEMM
#define DJ_HAVE_BRGEMM 1
#if defined(DJ_HAVE_AVX512) && defined(__AVX512BF16__)
#define DJ_HAVE_AVX512_BF16 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DJ_HAVE_AVX2_FMA 1
#endif
#define DJ_MATRIX_ENGINE_NAME "brgemm"
#elif DJ_HOST_MATRIX_ENGINE == DJ_MATRIX_ENGINE_AVX512BF16
#if !(defined(DJ_HAVE_AVX512) && defined(__AVX512BF16__))
#error "matrix engine avx512bf16: the compiler target lacks AVX-512 F/BW/BF16 (check DJ_JIT_HOST_MARCH)"
#endif
#define DJ_HAVE_AVX512_BF16 1
#define DJ_MATRIX_ENGINE_NAME "avx512bf16"
#elif DJ_HOST_MATRIX_ENGINE == DJ_MATRIX_ENGINE_FMA
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define DJ_HAVE_AVX2_FMA 1
#endif
#define DJ_MATRIX_ENGINE_NAME "fma"
#else
#error "DJ_HOST_MATRIX_ENGINE must be DJ_MATRIX_ENGINE_FMA, DJ_MATRIX_ENGINE_AVX512BF16 or DJ_MATRIX_ENGINE_BRGEMM"
#endif
