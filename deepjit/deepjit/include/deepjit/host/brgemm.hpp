// The brgemm matrix engine: oneDNN's batch-reduce GEMM micro-kernel as torch's CPU library exports
// it (at::native::cpublas::brgemm). oneDNN generates the tile code for the CPU at run time: AMX
// tiles where the CPU has AMX BF16, else AVX-512 BF16 / AVX-512 / AVX2. Available to kernels built
// on the brgemm engine (DJ_HAVE_BRGEMM; DJ_HOST_MATRIX=brgemm, see matrix_engine.hpp), which link
// libtorch_cpu with an rpath to the installed torch.
//
// The declarations below are torch's, written out (no ATen headers: a kernel compiles in well under a
// second). The BF16 types are only pointed to, so incomplete declarations are enough.
//
// API (all noexcept; oneDNN's c10::Error is caught here and reported through dj::report_error, so
// the launch raises DeepJITError and the process lives on):
//   dj::brgemm::gemm(M, N, K, A, lda, B, ldb, C, ldc, accumulate)
//       C[M x N] (FP32, row stride ldc) = (accumulate ? C : 0) + A . B
//       A: BF16 rows, K contiguous, row stride lda (elements).
//       B: VNNI layout = deepjit's K-pair panels (gemm_bf16.hpp) of width ldb: K / 2 rows of ldb
//          32-bit words, word [p * ldb + n] = bf16(b[2p][n]) | bf16(b[2p + 1][n]) << 16.
//       K must be even (callers zero-pad K, as the packed panels do anyway); M, N, K any size
//       otherwise. Each distinct (M, N, K, lda, ldb, ldc, accumulate) is a kernel oneDNN generates
//       once per thread and caches; a call costs about 0.2 us, so K of 128 or more per call.
//       Returns false after reporting the error.
//   dj::brgemm::guarded(what, fn)   runs fn (e.g. another cpublas call), exceptions reported as above.
//   dj::brgemm::Scope    held by each thread that calls gemm (e.g. inside an OpenMP region): its
//                        destructor releases the thread's AMX tile state.
//   dj::brgemm::vnni_packing()    whether oneDNN wants B packed (could_pack(BF16)).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>

#include <deepjit/host/kernel.hpp>
#include <deepjit/host/matrix_engine.hpp>

#ifndef DJ_HAVE_BRGEMM
#error "deepjit/host/brgemm.hpp needs the brgemm matrix engine (DJ_HOST_MATRIX=brgemm)"
#endif

namespace c10 {
struct BFloat16;
enum class ScalarType : int8_t;
}  // namespace c10

namespace at::native::cpublas {
void brgemm(int64_t M, int64_t N, int64_t K, int64_t ld_a, int64_t ld_b, int64_t ld_c, bool add_C,
            const c10::BFloat16* A, const c10::BFloat16* B, float* C, bool is_vnni);
void brgemm_release(bool is_vnni);
void pack(int64_t K, int64_t N, int64_t ld_in, int64_t ld_out, c10::ScalarType dt_in, c10::ScalarType dt_out,
          const void* in, void* out);
bool could_pack(c10::ScalarType dt_in);
}  // namespace at::native::cpublas

namespace dj {
namespace brgemm {

constexpr int kScalarBFloat16 = 15;   // c10::ScalarType::BFloat16

// "<what>: <exception message>", cut before c10's backtrace.
inline void report(const char* what, const char* message) {
    char buf[1024];
    const char* cut = std::strstr(message, "\nException raised from");
    const int len = cut ? static_cast<int>(cut - message) : static_cast<int>(std::strlen(message));
    std::snprintf(buf, sizeof(buf), "%s: %.*s", what, len, message);
    report_error(buf);
}

// Runs fn(); an exception it throws (c10::Error from torch/oneDNN included) is reported as
// "<what>: <message>" and turned into false.
template <typename F>
inline bool guarded(const char* what, F&& fn) noexcept {
    try {
        fn();
        return true;
    } catch (const std::exception& e) {
        report(what, e.what());
    } catch (...) {
        report(what, "unknown exception");
    }
    return false;
}

inline bool gemm(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint32_t* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate) noexcept {
    // oneDNN's generated code does not check leading dimensions (ldb < N runs into an illegal
    // instruction): sizes are checked here. Messages are only formatted on failure.
    char what[160];
    const auto describe = [&](const char* who) {
        std::snprintf(what, sizeof(what), "%s(M=%lld, N=%lld, K=%lld, lda=%lld, ldb=%lld, ldc=%lld)", who, (long long)M,
                      (long long)N, (long long)K, (long long)lda, (long long)ldb, (long long)ldc);
        return what;
    };
    if (M <= 0 || N <= 0 || K <= 0 || K % 2 != 0 || lda < K || ldb < N || ldc < N) {
        report(describe("dj::brgemm::gemm"), "positive sizes, even K and leading dimensions at least K, N, N expected");
        return false;
    }
    try {
        at::native::cpublas::brgemm(M, N, K, lda, ldb, ldc, accumulate, reinterpret_cast<const c10::BFloat16*>(A),
                                    reinterpret_cast<const c10::BFloat16*>(B), C, true);
        return true;
    } catch (const std::exception& e) {
        report(describe("oneDNN brgemm"), e.what());
    } catch (...) {
        report(describe("oneDNN brgemm"), "unknown exception");
    }
    return false;
}

inline void release() noexcept {
    try {
        at::native::cpublas::brgemm_release(true);
    } catch (...) {
    }
}

struct Scope {
    Scope() = default;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { release(); }
};

inline bool vnni_packing() noexcept {
    try {
        return at::native::cpublas::could_pack(static_cast<c10::ScalarType>(kScalarBFloat16));
    } catch (...) {
        return false;
    }
}

}  // namespace brgemm
}  // namespace dj
