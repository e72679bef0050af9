"""V1 ``low_latency_combine(use_logfmt=True)``: rows travel in upstream's LogFMT-10 format (per
128-channel block: amax/amin meta; a block whose |x| are all below 1 goes as 10-bit log codes, any
other block as BF16), on 2 ranks over shared memory. Checked against an oracle of the format
written here from upstream's kernel formulas (encode: code = floor(max((log2|x| - log_amin) / step
+ 2 - log2((1 + 2^step) / 2) / step, 0)), decode: 2^((code - 1) * step + log_amin)), against the
BF16 combine (upstream's accuracy bound; blocks that do not qualify are BF16 exactly), and
``zero_copy`` with ``use_logfmt`` refused as upstream does. Under a BF16 default dtype."""
import re

import pytest
import torch
import torch.distributed as dist

from tests.testkit.distributed import run_ranks

M, H, K = 8, 512, 3


def _logfmt_roundtrip(y: torch.Tensor) -> torch.Tensor:
    """What a BF16 row ``y [.., H]`` decodes to after LogFMT-10, in FP32."""
    blocks = y.float().reshape(*y.shape[:-1], H // 128, 128)
    a = blocks.abs()
    amax, amin = a.amax(-1, keepdim=True), a.amin(-1, keepdim=True)
    log_amax = torch.log2(amax)
    log_amin = torch.where(amin == 0, log_amax - 32, torch.maximum(torch.log2(amin), log_amax - 32))
    cast = (log_amax < 0) & (log_amin < log_amax)
    step = torch.where(cast, (log_amax - log_amin) / 510, torch.ones_like(amax))
    rounding = 2 - torch.log2((1 + torch.exp2(step)) * 0.5) / step
    code = torch.floor(torch.clamp(torch.log2(a) / step + rounding - log_amin / step, min=0)).clamp(max=511)
    mag = torch.where(code == 0, torch.zeros_like(a), torch.exp2((code - 1) * step + log_amin))
    decoded = torch.where(blocks < 0, -mag, mag)
    return torch.where(cast, decoded, blocks).reshape(y.shape)


def _x(rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(40 + rank)
    x = torch.randn(M, H, generator=g, dtype=torch.float32)
    x[:, :128] *= 4            # |x| >= 1 somewhere: the block stays BF16
    x[:, 128:256] *= 0.2       # LogFMT
    x[:, 256:384] = 0          # amax 0: BF16 (zeros)
    x[:, 384:] *= 0.01         # LogFMT with exact zeros (amin 0: the range clips at 2^-32 amax)
    x[:, 384::7] = 0
    return x.bfloat16()


def _logfmt(rank, world):
    import deep_ep
    from deep_ep.utils.math import calc_diff
    torch.set_default_dtype(torch.bfloat16)   # upstream's init_dist sets it
    E = 2 * world
    hint = deep_ep.Buffer.get_low_latency_rdma_size_hint(M, H, world, E)
    buf = deep_ep.Buffer(dist.group.WORLD, 0, hint, low_latency_mode=True, explicitly_destroy=True)
    x = _x(rank)
    g = torch.Generator().manual_seed(90 + rank)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(M)]).to(torch.int64)
    idx[0, 1] = -1
    w = torch.rand(M, K, generator=g, dtype=torch.float32)
    recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, M, E, use_fp8=False)
    y = recv.clone()   # the expert outputs: the received rows themselves
    plain, _, _ = buf.low_latency_combine(y, idx, w, handle)
    combined, _, _ = buf.low_latency_combine(y, idx, w, handle, use_logfmt=True)
    with pytest.raises(ValueError, match=re.escape("use_logfmt: expected False with zero_copy=True (they cannot be combined, as upstream), got True")):
        buf.low_latency_combine(y, idx, w, handle, use_logfmt=True, zero_copy=True)
    buf.destroy()

    # Oracle: every contribution (this rank's own experts' too) decoded, FP32 sum in slot order.
    exact = torch.zeros(M, H, dtype=torch.float32)
    for k in range(K):
        valid = (idx[:, k] >= 0).float().unsqueeze(1)
        exact += valid * w[:, k:k + 1] * _logfmt_roundtrip(x)
    exact = exact.bfloat16()
    bf16_blocks = torch.cat([torch.arange(0, 128), torch.arange(256, 384)])
    assert torch.equal(combined[:, bf16_blocks], plain[:, bf16_blocks])
    cast = torch.cat([torch.arange(128, 256), torch.arange(384, 512)])
    same = (combined[:, cast] == exact[:, cast]).float().mean().item()
    ulps = ((combined[:, cast].float() - exact[:, cast].float()).abs()
            / exact[:, cast].float().abs().clamp(min=1e-30)).max().item()
    assert same > 0.99 and ulps <= 2 ** -7, (same, ulps)   # a log2/exp2 ulp may move a code by one
    assert (combined[:, cast] != plain[:, cast]).float().mean().item() > 0.2   # the codes are lossy
    assert calc_diff(combined.float(), plain.float()) < 1e-5   # upstream's bound for the BF16 combine
    return True


def test_low_latency_combine_logfmt_wire():
    assert run_ranks(_logfmt, 2, timeout=180) == [True, True]
