"""UE8M0 scale bytes decode as OCP MX (and torch's float8_e8m0fnu) define them on every path: 0xFF is NaN
(not +inf) and 0x00 the subnormal 2^-127 (not 0). Oracle: torch's own float8_e8m0fnu conversion."""
import pytest
import torch

import deep_gemm
from deep_gemm import _dispatch, formats

BYTES = [0xFF, 0x00, 0x01, 127, 130, 254]


def _torch_decode(b: torch.Tensor) -> torch.Tensor:
    return b.to(torch.uint8).view(torch.float8_e8m0fnu).float()


def _words(dtype: torch.dtype) -> torch.Tensor:
    per = 4 if dtype == torch.int32 else 2
    b = torch.tensor(BYTES * per, dtype=torch.uint8)
    return b.view(dtype).view(1, -1)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16])
@pytest.mark.parametrize("backend", ["reference", "host"])
def test_unpack(monkeypatch, backend, dtype):
    monkeypatch.setenv("DG_BACKEND", backend)
    words = _words(dtype)
    want = _torch_decode(words.view(torch.uint8)).view(1, -1)
    got = torch.empty(1, want.size(1))
    _dispatch.run("sf_unpack_ue8m0", words.device, words, got)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    assert got[0, 0].isnan() and got[0, 1] == 2.0 ** -127
    torch.testing.assert_close(formats.unpack_ue8m0(words), want, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["reference", "host"])
def test_fp8_gemm_with_a_nan_scale_byte(monkeypatch, backend):
    """Row 0 of a has the NaN scale on its first K block: NaN out there, as torch-decoded scales give."""
    monkeypatch.setenv("DG_BACKEND", backend)
    m, n, k = 8, 16, 256
    a = torch.randn(m, k).to(torch.float8_e4m3fn)
    b = torch.randn(n, k).to(torch.float8_e4m3fn)
    sfa_bytes = torch.full((m, 4), 127, dtype=torch.uint8)
    sfa_bytes[0, 0], sfa_bytes[1, 1] = 0xFF, 0x00
    sfb_bytes = torch.full((1, 4), 127, dtype=torch.uint8)  # one 128 x 128 block of b
    sfa, sfb = sfa_bytes.view(torch.int32), sfb_bytes.view(torch.int32)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, recipe=(1, 128, 128))
    scale_a = _torch_decode(sfa_bytes[:, :2]).repeat_interleave(128, 1)
    want = (a.float() * scale_a) @ b.float().t()
    assert bool(d[0].isnan().all()) and not d[2:].isnan().any()
    torch.testing.assert_close(d[2:].float(), want[2:], rtol=2e-2, atol=2e-2)
