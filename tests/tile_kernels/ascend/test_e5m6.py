"""tile_kernels.ascend.e5m6's entry points on the Ascend twin, bit-exact against reference/cast_e5m6
(upstream's tests compare E5M6 bits and cast-backs with assert_equal), what is particular to the kernels:
a row past one column tile (2056 = 2048 + 8), each of their lowerings on every scale layout the flags ask
for (row-major, column-major storage with its padding, packed UE8M0; the public-op grid runs two on the
twin) with NaN, inf, zero, subnormal-range and out-of-range rows and the 6-bit mantissa's ties, both
outputs of the cast-back, row-block scales, the launch with no rows, and the cast-back form the table
leaves to the reference. The public ops' E5M6 contract runs on every backend in
tests/tile_kernels/quant/test_per_token_cast.py."""
import pytest
import torch

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


def test_cast_back_with_several_scale_columns_goes_to_the_reference(monkeypatch):
    """Two scale columns (x_block_size (1, 32)): the reference's form (the public ops' E5M6 cases, the Ascend
    kernels asserted to serve them: tests/tile_kernels/quant/test_per_token_cast.py::test_e5m6)."""
    monkeypatch.setenv("TK_BACKEND", "ascend")
    q, _ = ref.cast_to_e5m6(_input(7, 64, torch.float32, seed=1), 64)
    sf2 = torch.rand(7, 2) + 0.5
    assert _dispatch.TABLE.serves("cast_back_from_e5m6", q.device, (q, sf2), "fp32", (1, 32)) == "reference"
    assert _dispatch.TABLE.serves("cast_back_from_e5m6", q.device, (q, sf2[:, :1]), "fp32", (1, 64)) == "ascend"
