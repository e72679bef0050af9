// deep_gemm/ascend/kernel_args.h — the one argument struct of each hand-written Ascend kernel.
//
// Each kernel takes `__gm__ const <Struct>* args` and copies the struct out of global memory once at its
// start (the tiling-data pattern); Python fills it BY NAME from this declaration (deepjit.kernel_args:
// descriptors.struct_type(LIB.source("ascend/kernel_args.h"), "<Struct>")), so a field renamed, added
// or removed here fails the Python call that does not name it, and the twin compares this layout with
// ctypes' at first launch. Plain fields only (no arrays, no bit-fields, no packing pragmas). A pointer
// whose element type a kernel picks by define (DType, ABType, ...) is `__gm__ void*` here and cast there.
#pragma once

#include <stdint.h>

// dg_bf16_gemm (bf16_gemm.asc): D [m, n] = A [m, k] . B [n, k]^T; d is DType (DG_D_FP32).
struct DgBf16GemmArgs {
  __gm__ bfloat16_t* a;
  __gm__ bfloat16_t* b;
  __gm__ void* d;
  int64_t m, n, k, lda, ldb, ldd;
};

