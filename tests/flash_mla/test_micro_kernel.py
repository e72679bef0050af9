"""The shared BF16 micro-kernel's entry points the attention engine runs on (deepjit/host/gemm_bf16.hpp):
a broadcast operand given by row pointers (the gathered K rows of QK) or by strided words (P of PV),
in each combine mode, checked against FP64 products of the same BF16 values."""
import pytest
import torch

import deepjit

SOURCE = r"""
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/gemm_bf16.hpp>
using namespace dj::gemm;
// C (8 x 32, row stride ldc) from A rows a + off + i * lda and a packed B panel of kp K-pairs.
// mode 0/1/2: row pointers with Combine Add/Promote/Rescale; 3: strided words with Rescale.
DJ_KERNEL(micro, "ptr,i64,i64,ptr,ptr,i64,i64,i64,ptr,ptr,i64")
void micro(const uint16_t* a, int64_t lda, int64_t off, const uint32_t* b, float* c, int64_t ldc, int64_t kp,
           int64_t mode, const float* sa, const float* sb, int64_t accumulate) {
    const uint16_t* rows[8];
    for (int i = 0; i < 8; ++i) rows[i] = a + off + i * lda;
    const bool acc = accumulate != 0;
    if (mode == 0) micro_kernel_rows<8, Combine::Add>(kp, rows, b, c, ldc, acc);
    if (mode == 1) micro_kernel_rows<8, Combine::Promote>(kp, rows, b, c, ldc, acc, sa, sb);
    if (mode == 2) micro_kernel_rows<8, Combine::Rescale>(kp, rows, b, c, ldc, acc, sa);
    if (mode == 3)
        micro_kernel_core<8, Combine::Rescale>(kp, StridedRows{reinterpret_cast<const uint32_t*>(a + off), 1, lda / 2},
                                               b, c, ldc, acc, sa, nullptr);
}
"""


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    runtime = deepjit.Runtime(deepjit.Config(str(tmp_path_factory.mktemp("micro")), "FMLATEST"), "host")
    compiled = runtime.compile("micro", SOURCE)
    return lambda *args: runtime.launch(compiled, None, *args)


# off 1: rows only 2-byte aligned (row pointers allow it; strided words do not, so mode 3 gets none)
@pytest.mark.parametrize("mode,kp,off", [(m, kp, off) for m in range(4) for kp, off in ((1, 0), (37, 1), (64, 0))
                                         if not (m == 3 and off)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_micro_kernel_modes(micro, mode, accumulate, kp, off):
    g = torch.Generator().manual_seed(100 * mode + kp + off)
    lda, ldc = 2 * kp + 6, 40
    a = torch.randn(8 * lda + off, generator=g).bfloat16()
    bmat = torch.randn(32, 2 * kp, generator=g).bfloat16()
    panel = bmat.view(torch.int32).t().contiguous()             # word [p][j] = b[j][2p] | b[j][2p + 1] << 16
    c0 = torch.randn(8, ldc, generator=g)
    sa, sb = torch.rand(8, generator=g) + 0.5, torch.rand(32, generator=g) + 0.5
    sa[3] = 0.0                                                  # a row whose running sum is dropped
    c = c0.clone()
    micro(a, lda, off, panel, c, ldc, kp, mode, sa, sb, int(accumulate))

    arows = torch.stack([a[off + i * lda: off + i * lda + 2 * kp] for i in range(8)]).double()
    prod = arows @ bmat.double().t()
    base = c0[:, :32].double() if accumulate else torch.zeros(8, 32, dtype=torch.float64)
    if mode == 1:
        prod = prod * sa.double()[:, None] * sb.double()[None, :]
    if mode in (2, 3) and accumulate:
        base = base * sa.double()[:, None]
    torch.testing.assert_close(c[:, :32].double(), base + prod, rtol=1e-5, atol=1e-5 * (1 + kp) ** 0.5)
    assert torch.equal(c[:, 32:], c0[:, 32:]), "columns past the tile were written"
