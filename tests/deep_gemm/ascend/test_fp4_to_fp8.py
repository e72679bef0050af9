"""deep_gemm's Ascend FP4 -> FP8 widening (deep_gemm/ascend/fp4_to_fp8.*, vector cores) on deepjit's
Ascend twin, against the E2M1 decoding of deep_gemm.formats: every code, K-major and MN-major
(packed along MN) operands, grouped 3-D operands, rows and byte columns past the kernel's tile."""
import pytest
import torch

from deep_gemm import formats
from deep_gemm.ascend.fp4_to_fp8 import CHUNK, ROWS, widen


def _codes(*shape) -> torch.Tensor:
    return torch.randint(0, 16, shape, dtype=torch.uint8)


def test_every_code_is_exact():
    codes = torch.arange(16, dtype=torch.uint8).repeat(2, 2)
    out = widen(formats.pack_fp4_codes(codes))
    assert out.dtype == torch.float8_e4m3fn and out.shape == (2, 32)
    assert torch.equal(out.float(), formats.fp4_codes_to_float(codes))


@pytest.mark.parametrize("shape", [(3 * ROWS + 5, 2 * (CHUNK + 70)), (1, 64)])
def test_k_major_past_the_tile(shape):
    data = formats.pack_fp4_codes(_codes(*shape))
    assert torch.equal(widen(data).float(), formats.unpack_fp4(data))


def test_mn_major_and_grouped():
    packed = formats.pack_fp4_codes(_codes(2, 96, 80))   # [G, K, MN/2]: an MN-major [G, MN/2, K] transposed
    data = packed.transpose(1, 2)
    out = widen(data)
    assert out.shape == (2, 80, 96) and out.stride(-2) == 1
    assert torch.equal(out.float(), formats.unpack_fp4(packed).transpose(1, 2))
    k_major = formats.pack_fp4_codes(_codes(3, 20, 64))
    assert torch.equal(widen(k_major).float(), formats.unpack_fp4(k_major))
