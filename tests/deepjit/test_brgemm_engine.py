"""The brgemm matrix engine (deepjit/host/brgemm.hpp): oneDNN's micro-kernel from torch's CPU library,
linked into a host kernel; tails of M, N, K against FP64 products of the same BF16 values; an
exception thrown by torch/oneDNN inside a kernel (and inside its OpenMP region) becomes a
DeepJITError and the process lives on; bad sizes are reported before oneDNN sees them."""
import pytest
import torch

import deepjit
from deepjit.backends.host import HostCompilerOptions, cpu_identity
from deepjit.backends.host import matrix_engine as me

WHY = me.unavailable("brgemm", cpu_identity()[1], "DJ_HOST_MATRIX")
pytestmark = pytest.mark.skipif(WHY is not None, reason=str(WHY))

PRELUDE = r"""
#include <deepjit/host/brgemm.hpp>
#include <deepjit/host/parallel.hpp>
"""
SOURCES = {"tile": r"""
// C = (acc ? C : 0) + A . B with B in VNNI words (K / 2 rows of ldb words).
DJ_KERNEL(tile, "i64,i64,i64,ptr,i64,ptr,i64,ptr,i64,i64")
void tile(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint32_t* b, int64_t ldb, float* c,
          int64_t ldc, int64_t acc) {
    dj::brgemm::Scope scope;
    dj::brgemm::gemm(m, n, k, a, lda, b, ldb, c, ldc, acc != 0);
}
""", "throw_in_threads": r"""
// A c10::Error from torch (pack() of a dtype oneDNN lacks) thrown on every thread of an OpenMP region.
DJ_KERNEL(throw_in_threads, "i64,ptr") void throw_in_threads(int64_t threads, int64_t* ran) {
    dj::parallel_for(threads, threads, [&](int64_t t) {
        float in[4] = {}, out[4];
        dj::brgemm::guarded("pack", [&] {
            at::native::cpublas::pack(2, 2, 2, 2, static_cast<c10::ScalarType>(7), static_cast<c10::ScalarType>(7), in, out);
        });
        ran[t] = 1;
    });
}
""", "capabilities": r"""
DJ_KERNEL(capabilities, "ptr") void capabilities(int64_t* out) {
    out[0] = dj::brgemm::vnni_packing();
    out[1] = DJ_HOST_MATRIX_ENGINE;
}
"""}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    return deepjit.Runtime(deepjit.Config(str(tmp_path_factory.mktemp("brgemm")), "DJBRG"), "host")


def _kernel(runtime, name):
    return runtime.compile(name, PRELUDE + SOURCES[name], HostCompilerOptions(matrix_engine="brgemm"))


def vnni(b: torch.Tensor, ldb: int) -> torch.Tensor:
    """[K, N] BF16 -> K / 2 rows of ldb int32 words, word [p][n] = b[2p][n] | b[2p + 1][n] << 16."""
    k, n = b.shape
    out = torch.zeros(k // 2, ldb, 2, dtype=torch.bfloat16)
    out[:, :n] = b.view(k // 2, 2, n).permute(0, 2, 1)
    return out.view(torch.int32).view(k // 2, ldb)


@pytest.mark.parametrize("m,n,k", [(1, 1, 2), (17, 35, 66), (33, 64, 130), (5, 100, 256), (40, 16, 18)])
def test_tile_gemm_tails(runtime, m, n, k):
    kernel = _kernel(runtime, "tile")
    g = torch.Generator().manual_seed(m * 10007 + n * 101 + k)
    lda, ldb, ldc = k + 6, n + 3, n + 5
    a = torch.randn(m, lda, generator=g).bfloat16()
    b = torch.randn(k, n, generator=g).bfloat16()
    c0 = torch.randn(m, ldc, generator=g)
    ref = a[:, :k].double() @ b.double()
    for accumulate in (False, True):
        c = c0.clone()
        runtime.launch(kernel, None, m, n, k, a, lda, vnni(b, ldb), ldb, c, ldc, int(accumulate))
        want = ref + (c0[:, :n].double() if accumulate else 0)
        torch.testing.assert_close(c[:, :n].double(), want, rtol=1e-5, atol=1e-5 * k ** 0.5)
        assert torch.equal(c[:, n:], c0[:, n:]), "columns past N were written"


@pytest.mark.parametrize("m,n,k,lda,ldb,ldc,what", [
    (4, 16, 33, 40, 16, 16, "K=33"),        # odd K
    (4, 32, 64, 64, 16, 32, "ldb=16"),      # oneDNN itself would run into an illegal instruction
    (4, 16, 64, 32, 16, 16, "lda=32"),
    (0, 16, 64, 64, 16, 16, "M=0"),
])
def test_bad_sizes_are_reported(runtime, m, n, k, lda, ldb, ldc, what):
    kernel = _kernel(runtime, "tile")
    a = torch.zeros(max(m, 1), lda, dtype=torch.bfloat16)
    b = torch.zeros(k, ldb, dtype=torch.int32)
    c = torch.full((max(m, 1), ldc), 7.0)
    with pytest.raises(deepjit.DeepJITError, match=f"kernel tile failed: dj::brgemm::gemm.*{what}"):
        runtime.launch(kernel, None, m, n, k, a, lda, b, ldb, c, ldc, 0)
    assert torch.equal(c, torch.full_like(c, 7.0))
    # the error was consumed: the next good launch succeeds
    good = torch.zeros(2, 16)
    runtime.launch(kernel, None, 2, 16, 2, torch.ones(2, 2, dtype=torch.bfloat16), 2,
                   vnni(torch.ones(2, 16, dtype=torch.bfloat16), 16), 16, good, 16, 0)
    assert torch.equal(good, torch.full_like(good, 2.0))


def test_c10_error_in_threads_is_a_deepjit_error(runtime):
    kernel = _kernel(runtime, "throw_in_threads")
    ran = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(deepjit.DeepJITError, match="kernel throw_in_threads failed: pack: Unsupported dtype") as info:
        runtime.launch(kernel, None, 2, ran)
    assert "Exception raised from" not in str(info.value)   # c10's backtrace is cut
    assert ran.tolist() == [1, 1], "every thread went on after catching"
    assert isinstance(info.value, RuntimeError)


def test_capabilities(runtime):
    out = torch.zeros(2, dtype=torch.int64)
    runtime.launch(_kernel(runtime, "capabilities"), None, out)
    assert out[1].item() == 3                     # DJ_MATRIX_ENGINE_BRGEMM
    flags = set(cpu_identity()[1].split())
    if {"amx_tile", "amx_bf16"} <= flags:
        assert out[0].item() == 1                 # AMX wants B in VNNI panels


def test_link_flags_join_the_key(runtime):
    opts = HostCompilerOptions(optimize_level="3", matrix_engine="brgemm")
    assert "-ltorch_cpu" in opts.get_link_flags() and "-ltorch_cpu" not in opts.get_flags()
    assert f"-Wl,-rpath,{me.torch_lib_dir()}" in opts.get_link_flags()
    assert "-ltorch_cpu" in opts.hash_components()[0]
    assert HostCompilerOptions(optimize_level="3", matrix_engine="fma").get_link_flags() == []
