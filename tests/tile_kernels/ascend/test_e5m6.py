"""tile_kernels.ascend.e5m6 on the Ascend twin, bit-exact against reference/cast_e5m6 (upstream's tests
compare E5M6 bits and cast-backs with assert_equal): a row past one column tile (2056 = 2048 + 8), rows
with NaN, inf, zeros, subnormal-range values and values past E5M6's range, every scale layout the flags
ask for (row-major, column-major storage, packed UE8M0) and both outputs of the cast-back. The public ops
reach the kernels with TK_BACKEND=ascend; a cast-back with several scale columns goes to the reference."""
import pytest
import torch

import tile_kernels
from tile_kernels import _dispatch
from tile_kernels.ascend import e5m6
from tile_kernels.reference import cast_e5m6 as ref
from tile_kernels.testing.numeric import assert_equal


def _input(t, h, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g) * 100
    if t > 3:
        x[0, 3] = float("nan")  # the row's amax and scale NaN: every code NaN
        x[1, 4] = -float("inf")  # the row's multiplier 0
        x[2, :7] = torch.tensor([1e-30, -1e-8, 3e-6, 65504.0, -0.0, 1e5, 0.5])
        x[3] = 0.0  # amax floored at 1e-4
    if t > 4:  # amax 65024: scale 1, so these are exact ties of the 6-bit mantissa (to even: down, up, down)
        x[4] = 0.5
        x[4, :4] = torch.tensor([65024.0, 1 + 2**-7, 1 + 3 * 2**-7, -(1 + 2**-7)])
    return x.to(dtype)


def _bits(sf: torch.Tensor) -> torch.Tensor:
    return sf.view(torch.int32) if sf.dtype == torch.float32 else sf


# (dtype, rows, hidden, col, round_sf, packed): three lowerings (BF16 and FP32 with round_sf, FP32 without: the
# public default), every layout
CASES = [(torch.bfloat16, 5, 2056, False, True, False), (torch.float32, 37, 96, True, True, True),
         (torch.float32, 6, 64, True, False, False), (torch.float32, 9, 64, False, True, True)]


@pytest.mark.parametrize("dtype,t,h,col,round_sf,packed", CASES)
def test_cast_and_cast_back(dtype, t, h, col, round_sf, packed):
    x = _input(t, h, dtype)
    q, sf = e5m6.cast_to_e5m6(x, h, col, round_sf, packed)
    q_ref, sf_ref = ref.cast_to_e5m6(x, h, col, round_sf, packed)
    assert_equal(q, q_ref)
    assert sf.shape == sf_ref.shape and sf.stride() == sf_ref.stride() and sf.dtype == sf_ref.dtype
    assert torch.equal(_bits(sf), _bits(sf_ref))
    if col:  # the storage's padding columns are zero as the reference's
        assert torch.equal(torch.as_strided(_bits(sf), (sf.stride(1),), (1,)),
                           torch.as_strided(_bits(sf_ref), (sf.stride(1),), (1,)))
    fmt = "bf16" if packed else "fp32"  # the cast-back's two lowerings: BF16 from packed, FP32 from FP32 scales
    back = e5m6.cast_back_from_e5m6((q_ref, sf_ref), fmt, (1, h))
    want = ref.cast_back_from_e5m6((q_ref, sf_ref), fmt, (1, h))
    assert_equal(back.nan_to_num(7.0), want.nan_to_num(7.0))
    assert torch.equal(torch.isnan(back), torch.isnan(want))


@pytest.mark.parametrize("col,packed", [(True, True), (False, False)])
def test_empty_input(col, packed):
    """No rows: empty data and scales shaped as the host kernel's (the reference cannot pack zero rows)."""
    from tile_kernels.host import cast as host

    x = torch.zeros(0, 64, dtype=torch.bfloat16)
    q, sf = e5m6.cast_to_e5m6(x, 64, col, True, packed)
    q_host, sf_host = host.cast_to_e5m6(x, 64, col, True, packed)
    assert q.shape == q_host.shape == (0, 96) and q.dtype == q_host.dtype
    assert sf.shape == sf_host.shape and sf.dtype == sf_host.dtype
    assert e5m6.cast_back_from_e5m6((q, sf), "bf16", (1, 64)).shape == (0, 64)


def test_cast_back_row_blocks():
    """Scales shared by 4 rows (a (4, hidden) block): row r reads scale r // 4."""
    q, _ = ref.cast_to_e5m6(_input(10, 64, torch.float32), 64)
    sf = torch.rand(3, 1) + 0.5
    assert_equal(e5m6.cast_back_from_e5m6((q, sf), "fp32", (4, 64)), ref.cast_back_from_e5m6((q, sf), "fp32", (4, 64)))


def test_public_ops_reach_the_kernels(monkeypatch):
    monkeypatch.setenv("TK_BACKEND", "ascend")
    x = _input(7, 64, torch.float32, seed=1)
    assert _dispatch.TABLE.serves("cast_to_e5m6", x.device, x, 64, True, True, True) == "ascend"
    q, sf = tile_kernels.quant.per_token_cast(x, "e5m6", 64, use_tma_aligned_col_major_sf=True, round_sf=True,
                                              use_packed_ue8m0=True)
    q_ref, sf_ref = ref.cast_to_e5m6(x, 64, True, True, True)
    assert_equal(q, q_ref)
    assert torch.equal(sf, sf_ref)
    assert _dispatch.TABLE.serves("cast_back_from_e5m6", x.device, (q, sf), "bf16", (1, 64)) == "ascend"
    back = tile_kernels.quant.cast_back((q, sf), "bf16", (1, 64), x_special_fmt="e5m6")
    assert_equal(back.nan_to_num(7.0), ref.cast_back_from_e5m6((q_ref, sf_ref), "bf16", (1, 64)).nan_to_num(7.0))
    # two scale columns (x_block_size (1, 32)): the reference's form
    sf2 = torch.rand(7, 2) + 0.5
    assert _dispatch.TABLE.serves("cast_back_from_e5m6", x.device, (q, sf2), "fp32", (1, 32)) == "reference"
    assert_equal(tile_kernels.quant.cast_back((q, sf2), "fp32", (1, 32), x_special_fmt="e5m6"),
                 ref.cast_back_from_e5m6((q, sf2), "fp32", (1, 32)))


def test_cast_back_refuses_a_hidden_size_off_8():
    """Width 18 (a multiple of 3, hidden 12): no E5M6 cast makes it (8 codes pack into 3 words); refused by name."""
    q = torch.zeros(4, 18, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"x\[0\].*multiple of 8.*width 18"):
        tile_kernels.quant.cast_back((q, torch.ones(4, 1)), "fp32", (1, 12), x_special_fmt="e5m6")
