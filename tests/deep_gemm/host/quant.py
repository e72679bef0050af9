"""Test-side quantisers and float64 dequantisation, written independently of deep_gemm."""
from __future__ import annotations

import torch

E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                           dtype=torch.float64)


def pow2_ceil(x: torch.Tensor) -> torch.Tensor:
    return torch.exp2(torch.ceil(torch.log2(x)))


def cast_fp8(x: torch.Tensor, gran: tuple[int, int], pow2: bool):
    """x [MN, K] -> (FP8 [MN, K], FP32 sf [ceil(MN/g0), ceil(K/g1)]) with sf = amax / 448 per tile."""
    mn, k = x.shape
    g0, g1 = gran
    pm, pk = -(-mn // g0) * g0, -(-k // g1) * g1
    xp = torch.zeros(pm, pk, dtype=torch.float32)
    xp[:mn, :k] = x.float()
    tiles = xp.view(pm // g0, g0, pk // g1, g1)
    sf = tiles.abs().amax(dim=(1, 3)).clamp(min=1e-4) / 448.0
    if pow2:
        sf = pow2_ceil(sf)
    q = (tiles / sf[:, None, :, None]).view(pm, pk)[:mn, :k].to(torch.float8_e4m3fn)
    return q, sf.float()


def cast_fp4(x: torch.Tensor, gran_k: int = 32):
    """x [MN, K] -> (uint8 [MN, K/2] low nibble first, FP32 power-of-two sf [MN, ceil(K/gran_k)])."""
    mn, k = x.shape
    pk = -(-k // gran_k) * gran_k
    xp = torch.zeros(mn, pk)
    xp[:, :k] = x.float()
    blocks = xp.view(mn, pk // gran_k, gran_k)
    sf = pow2_ceil(blocks.abs().amax(-1).clamp(min=1e-4) / 6.0)
    v = (blocks / sf[..., None]).view(mn, pk)[:, :k]
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    code = (v.abs()[..., None] > mids).sum(-1)
    code = code + 8 * ((v < 0) & (code > 0))
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)
    return packed, sf.float()


def unpack_fp4(p: torch.Tensor) -> torch.Tensor:
    """uint8 [MN, K/2] -> float64 [MN, K]."""
    lo, hi = (p & 0xF).long(), (p >> 4).long()
    return torch.stack([E2M1_VALUES[lo], E2M1_VALUES[hi]], dim=-1).flatten(-2)


def dequant(q: torch.Tensor, sf, gran: tuple[int, int]) -> torch.Tensor:
    """float64 [MN, K] from FP8/BF16 or (K-packed) FP4 data and FP32 scales."""
    x = unpack_fp4(q) if q.dtype == torch.uint8 else q.double()
    if sf is None:
        return x
    mn, k = x.shape
    s = sf.double().repeat_interleave(gran[0], 0)[:mn].repeat_interleave(gran[1], 1)[:, :k]
    return x * s
