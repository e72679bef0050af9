"""What every ``make ascend-check`` case module of tile_kernels shares (twin_checks.py and the family
modules it gathers): the DeepSeek-V3/V4 shapes and the comparison against the reference."""
from __future__ import annotations

import torch

TOKENS, DECODE, HIDDEN, EXPERTS, TOPK, GROUPS, TOPK_GROUPS, INTER = 4096, 128, 7168, 256, 8, 8, 4, 2048


def _canonical(t: torch.Tensor) -> torch.Tensor:
    """Bits to compare: every NaN one pattern (a NaN's sign and payload are no part of the contract)."""
    if t.dtype == torch.float8_e4m3fn:
        b = t.view(torch.uint8)
        return torch.where((b & 0x7F) == 0x7F, torch.full_like(b, 0x7F), b)
    if t.is_floating_point():
        return torch.where(torch.isnan(t), torch.full_like(t, float("nan")), t).float().nan_to_num(nan=7.5e37)
    return t


def differences(name: str, got, want, atol: float | None = None) -> list[str]:
    """Where ``got`` differs from ``want`` (tensors, tuples of them, plain values)."""
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return [f"{name}: {type(got).__name__} of {len(got) if hasattr(got, '__len__') else '?'} items, "
                    f"expected {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True)) for d in differences(f"{name}[{i}]", g, w, atol)]
    if not torch.is_tensor(want):
        return [] if got == want else [f"{name}: {got!r} != {want!r}"]
    if got.shape != want.shape or got.dtype != want.dtype:
        return [f"{name}: {got.dtype}{tuple(got.shape)} vs reference {want.dtype}{tuple(want.shape)}"]
    g, w = _canonical(got.contiguous()), _canonical(want.contiguous())
    if atol is not None and got.is_floating_point():
        ok = torch.allclose(g, w, atol=atol, rtol=atol)
    else:
        ok = torch.equal(g.view(torch.uint8) if g.dtype == torch.float8_e4m3fn else g, w)
    if ok:
        return []
    if atol is not None and got.is_floating_point():  # count what is outside the tolerance, not merely unequal
        bad = int((~torch.isclose(g, w, atol=atol, rtol=atol)).sum())
        return [f"{name}: {bad} of {want.numel()} elements outside atol = rtol = {atol} of the reference"]
    bad = int((g != w).sum())
    return [f"{name}: {bad} of {want.numel()} elements differ from the reference"]


def calc_diff_differences(name: str, got, want, bound: float) -> list[str]:
    """Upstream's calc_diff check (Engram gate and weight reduction): non-finite entries equal (NaN where
    NaN, the same inf), calc_diff of the finite rest below ``bound``."""
    from ..testing.numeric import calc_diff

    if got.shape != want.shape or got.dtype != want.dtype:
        return [f"{name}: {got.dtype}{tuple(got.shape)} vs reference {want.dtype}{tuple(want.shape)}"]
    nan, finite = torch.isnan(want), torch.isfinite(want)
    if not torch.equal(torch.isnan(got), nan) or not torch.equal(got[~finite & ~nan], want[~finite & ~nan]):
        return [f"{name}: non-finite entries differ from the reference"]
    diff = calc_diff(got[finite], want[finite])
    return [] if diff < bound else [f"{name}: calc_diff {diff:.3e} >= {bound}"]


def gate_inputs(t: int, hc: int, h: int, special: bool = False, seed: int = 0):
    """Engram gate inputs ``(x (t, hc, h), k, v (t, h), weight_fused (hc, h))``, BF16 but the FP32 weight;
    ``special`` (t >= 5, hc >= 3, h >= 10): a NaN, +inf and -inf, and an all-zero row."""
    g = torch.Generator().manual_seed(seed)
    x, k = (torch.randn(t, hc, h, generator=g).bfloat16() for _ in range(2))
    v = torch.randn(t, h, generator=g).bfloat16()
    w = torch.randn(hc, h, generator=g)
    if special:
        x[1, 0, 5] = float("nan")
        k[2, 1, 7] = float("inf")
        v[3, 9] = -float("inf")
        x[4, 2] = 0.0  # an all-zero row: rstd = 1 / sqrt(eps), dot 0, gate 1/2
    return x, k, v, w


def _compare(ascend, reference, inputs, atol=None, pick=None):
    """A case body: ``ascend(*inputs)`` against ``reference(*inputs)`` (``pick`` selects outputs to compare)."""
    def run() -> list[str]:
        torch.manual_seed(0)
        args = inputs()
        got = ascend(*[a.clone() if torch.is_tensor(a) else a for a in args])
        want = reference(*args)
        if pick is not None:
            got, want = pick(got), pick(want)
        return differences("out", got, want, atol)
    return run
