"""cast_back reads packed UE8M0 scale bytes as OCP MX (torch's float8_e8m0fnu) defines them on every
backend: 0xFF is NaN (not +inf), 0x00 the subnormal 2^-127 (not 0). Oracle: torch's own conversion."""
import pytest
import torch

import tile_kernels

BYTES = [0xFF, 0x00, 0x01, 127, 130, 254, 100, 127]   # 8 blocks of 64 values: one row's 2 int32 words


# int16 (Ascend) packed scales are served by the reference and the Ascend kernel only
@pytest.mark.parametrize(("backend", "words"), [("reference", torch.int32), ("host", torch.int32),
                                                ("ascend", torch.int32), ("reference", torch.int16),
                                                ("ascend", torch.int16)])
def test_cast_back_special_scale_bytes(monkeypatch, backend, words):
    monkeypatch.setenv("TK_BACKEND", backend)
    rows, block = 4, 64
    q = torch.ones(rows, block * len(BYTES)).to(torch.float8_e4m3fn)
    sf_bytes = torch.tensor(BYTES, dtype=torch.uint8).repeat(rows, 1)
    sf = sf_bytes.view(words)
    if words == torch.int16:
        sf = sf.t().contiguous().t()  # the Ascend form: column-major storage
    got = tile_kernels.quant.per_token_cast_back((q, sf), "fp32", block)
    want = sf_bytes.view(torch.float8_e8m0fnu).float().repeat_interleave(block, 1)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    assert bool(got[:, :block].isnan().all()) and bool((got[:, block:2 * block] == 2.0 ** -127).all())
