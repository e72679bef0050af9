"""tile_kernels.ascend.channel_cast_fused on the Ascend twin, what the public-op cases in
tests/tile_kernels/quant/test_per_channel_cast.py (every backend, the Ascend kernel asserted to serve them)
cannot express: per_channel_cast_fused bit-exact against the reference with every NaN one pattern (a NaN's
sign is no part of the contract; assert_same) for a gathered BF16 input with -1 rows, a NaN and an Inf, a
gathered E4M3 (data, sf) input re-scaled, and an FP32 input without a gather (round_sf), at row counts off
the kernel's 128-token block; and the kernel's row gather (an entry point the public op does not expose)
keeping every bit, NaN payloads included."""
import pytest
import torch

from tile_kernels.ascend import channel_cast_fused as ccf
from tile_kernels.quant.cast_ops import _cast_fused_ref
from tile_kernels.reference import cast as ref
from tile_kernels.testing.numeric import assert_equal

from .test_cast_nan import assert_same


def _pos(n_out, n_src, seed=0):
    pos = torch.randint(-1, n_src, (n_out,), generator=torch.Generator().manual_seed(seed)).int()
    pos[0] = -1
    return pos


def _inputs(kind):
    if kind == "bf16_gather":
        x = (torch.randn(40, 256) * 3).bfloat16()
        x[3, 5] = float("nan")
        x[4, 6] = float("inf")
        return x, 128, None, False, _pos(144, 40)
    if kind == "e4m3_gather":
        q, sf = ref.cast(torch.randn(40, 256) * 3, "e4m3", (1, 128))
        return (q, sf), 128, 128, True, _pos(144, 40, seed=1)
    return torch.randn(128, 192) * 5, 128, None, True, None


@pytest.mark.parametrize("kind", ["bf16_gather", "e4m3_gather", "fp32_plain"])
def test_matches_reference(kind):
    args = _inputs(kind)
    q, sf = ccf.per_channel_cast_fused(*args)
    q_ref, sf_ref = _cast_fused_ref(*args)
    assert_same(q, q_ref)
    assert_same(sf, sf_ref)


def test_gather_keeps_bits_and_zeroes_unmapped_rows():
    x = torch.randint(-2**31, 2**31 - 1, (9, 5000), dtype=torch.int32).view(torch.float32)  # NaN payloads too
    pos = _pos(37, 9, seed=2)
    want = torch.where((pos >= 0).unsqueeze(1), x.view(torch.int32)[pos.clamp(min=0).long()], 0)
    assert_equal(ccf.gather_rows(x, pos).view(torch.int32), want)
    assert not ccf.gather_rows(torch.zeros(0, 64), torch.full((16,), -1, dtype=torch.int32)).any()


def test_gather_sets_no_flag_twice():
    """Every row gathered from one source row (L2 hits: loads outpace stores): the gather's MTE2 -> MTE3 flag
    is never set again before MTE3 took it. A load-store pair a row did so 4 times in the timeline at this
    shape; the twin's run now refuses that kernel before the timeline is read."""
    from deepjit.backends.ascend_twin import timeline
    from deepjit.tilelang_route.ascend_check import l2_modelled

    x = torch.randint(0, 256, (256, 7168), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    pos = torch.zeros(256, dtype=torch.int32)
    with l2_modelled(), timeline.recording():
        out = ccf.gather_rows(x, pos)
    est = timeline.last_estimate()   # this launch's (the kernel name rules out a stale one)
    assert est is not None and est.kernel == "gather_rows_kernel" and est.flag_hazards == 0, est.first_flag_hazard
    assert_equal(out, x[:1].expand(256, -1).contiguous())
