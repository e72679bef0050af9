"""per_token_cast and its scale-only / precomputed-scale variants: bit-exact against the
reference cast with block (1, num_per_channels), on ragged sizes and every scale layout. The cases taking
``backend`` run on every backend (the Ascend kernels on the twin included); the Ascend-only int16 packed
scales are in tests/tile_kernels/ascend/test_per_token_cast.py."""
import pytest
import torch

import tile_kernels
from tile_kernels import torch as ref
from tile_kernels.testing import clear_unused_sf
from tile_kernels.testing.numeric import assert_equal, calc_diff, check_bias

from .._twin import twin_subset

LAYOUTS = [(False, False, False), (False, True, False), (True, True, True), (True, False, False)]


def _ref_sf(sf, packed, hidden, npc):
    return clear_unused_sf(sf, hidden, npc) if packed else sf


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("npc", [16, 32, 64, 128, "H"])
@pytest.mark.parametrize("col,round_sf,packed", LAYOUTS)
def test_float_input(host, dtype, fmt, npc, col, round_sf, packed):
    rows, hidden = 37, 576
    npc = hidden if npc == "H" else npc
    x = (torch.randn(rows, hidden) * 3).to(dtype)
    q, sf = tile_kernels.quant.per_token_cast(x, fmt, npc, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                              use_packed_ue8m0=packed)
    q_ref, sf_ref = ref.cast(x, fmt, (1, npc), round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                             use_packed_ue8m0=packed)
    assert_equal(q, q_ref)
    assert_equal(_ref_sf(sf, packed, hidden, npc), _ref_sf(sf_ref, packed, hidden, npc))
    assert sf.stride() == sf_ref.stride()
    if fmt == "e4m3" and not packed:
        check_bias(ref.cast_back((q, sf), "fp32", (1, npc)), x.float())


FORMS = [  # dtype, fmt, npc, col, round_sf: each scale form once on every backend (the grid above: host only)
    (torch.float32, "e4m3", 128, False, False),
    (torch.float32, "e4m3", 128, True, False),
    (torch.float32, "e2m1", 32, False, True),
    (torch.float32, "e4m3", 576, False, False),   # one block per row
    (torch.bfloat16, "e2m1", 16, False, False),
]


@pytest.mark.parametrize("dtype,fmt,npc,col,round_sf", FORMS)
def test_forms(backend, dtype, fmt, npc, col, round_sf):
    x = torch.randn(37, 576) * 3
    x[0, :6] = torch.tensor([-0.0, 0.0, 1e-30, -7.0, 0.25, 2.5])  # signed zero, tiny, E2M1 ties
    x[1] = 0.0  # an all-zero row: amax clamps to the format's minimum
    x = x.to(dtype)
    q, sf = tile_kernels.quant.per_token_cast(x, fmt, npc, use_tma_aligned_col_major_sf=col, round_sf=round_sf)
    q_ref, sf_ref = ref.cast(x, fmt, (1, npc), round_sf=round_sf, use_tma_aligned_col_major_sf=col)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)
    assert backend != "ascend" or backend.served == ["per_token_cast"]


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
def test_non_contiguous_rows_give_identical_results(host, fmt):
    wide = torch.randn(40, 2 * 256, dtype=torch.bfloat16)
    x = wide[:, :256]
    assert x.stride(0) == 512
    a = tile_kernels.quant.per_token_cast(x, fmt, 32)
    b = tile_kernels.quant.per_token_cast(x.contiguous(), fmt, 32)
    assert_equal(a[0], b[0])
    assert_equal(a[1], b[1])


QUANT_LAYOUTS = [(False, True, False), (True, True, True)]


@pytest.mark.parametrize("in_fmt,x_block,npc,col,round_sf,packed", twin_subset(
    [(f, b, n, *lay) for f in ("e4m3", "e2m1") for b in ((128, 128), (32, 32)) for n in (32, 128)
     for lay in QUANT_LAYOUTS],
    [("e4m3", (128, 128), 32, *QUANT_LAYOUTS[0]), ("e2m1", (32, 32), 128, *QUANT_LAYOUTS[1])], why="the twin runs the cases that take each form once"))
def test_quant_tensor_input(backend, in_fmt, x_block, npc, col, round_sf, packed):
    x = ref.cast(torch.randn(150, 512), in_fmt, x_block, round_sf=round_sf, use_tma_aligned_col_major_sf=col,
                 use_packed_ue8m0=packed)
    for fmt in ("e4m3", "e2m1"):
        q, sf = tile_kernels.quant.per_token_cast(x, fmt, npc, x_block_size=x_block)
        q_ref, sf_ref = ref.cast(x, fmt, (1, npc), x_block_size=x_block)
        assert_equal(q, q_ref)
        assert_equal(sf, sf_ref)


@pytest.mark.parametrize("fmt,npc,round_sf", [("e4m3", 64, False), ("e2m1", 64, False), ("e2m1", 32, True)])
def test_sf_only_and_precomputed_sf(backend, fmt, npc, round_sf):
    x = torch.randn(65, 384, dtype=torch.bfloat16)
    x[1] = 0.0  # an all-zero row
    q_ref, sf_ref = ref.cast(x, fmt, (1, npc), round_sf=round_sf)
    sf = tile_kernels.quant.per_token_cast_with_sf_only(x, fmt, npc, round_sf=round_sf)
    assert_equal(sf, sf_ref)
    # A given scale quantises with 1/sf (not amax-based like a fresh cast), as the reference does.
    for scale in (sf_ref, sf_ref * 2):
        q = tile_kernels.quant.per_token_cast_with_precomputed_sf(x, fmt, npc, scale, round_sf=round_sf)
        assert_equal(q, ref.cast(x, fmt, (1, npc), sf=scale))
    assert backend != "ascend" or backend.served == ["per_token_cast_with_sf_only"] + \
        ["per_token_cast_with_precomputed_sf"] * 2


def test_empty_input(backend):
    q, sf = tile_kernels.quant.per_token_cast(torch.empty(0, 256), "e4m3", 128)
    assert q.shape == (0, 256) and sf.shape == (0, 2)
    assert backend != "ascend" or backend.served == ["per_token_cast"]


E5M6_LAYOUTS = [(False, False, False), (True, True, True), (False, True, False), (False, True, True),
                (True, False, False)]


@pytest.mark.parametrize("dtype,col,round_sf,packed", twin_subset(
    [(d, *lay) for lay in E5M6_LAYOUTS for d in (torch.float32, torch.bfloat16)],
    [(torch.float32, *E5M6_LAYOUTS[0]), (torch.bfloat16, *E5M6_LAYOUTS[1])],
    why="the twin runs both input dtypes, plain and packed scales: tests/tile_kernels/ascend/test_e5m6.py runs "
        "its kernel on every layout"))
def test_e5m6(backend, dtype, col, round_sf, packed):
    from tile_kernels.testing.generator import generate_e5m6_inputs
    inputs = list(generate_e5m6_inputs(24, 256, dtype))
    for x, special in inputs:
        q, sf = tile_kernels.quant.per_token_cast(x, "e5m6", 256, use_tma_aligned_col_major_sf=col, round_sf=round_sf,
                                                  use_packed_ue8m0=packed)
        q_ref, sf_ref = ref.cast_to_e5m6(x, 256, col, round_sf, packed)
        assert q.dtype == torch.uint8 and q.shape == (24, 384)
        assert_equal(q, q_ref)
        assert_equal(sf, sf_ref)
        back = tile_kernels.quant.cast_back((q, sf), "fp32", (1, 256), x_special_fmt="e5m6")
        assert_equal(back, ref.cast_back_from_e5m6((q_ref, sf_ref), "fp32", (1, 256)))
        assert calc_diff(x.float(), back) < (5e-6 if special else 1e-4)
    assert backend != "ascend" or backend.served == ["cast_to_e5m6", "cast_back_from_e5m6"] * len(inputs)


def test_nan_and_overflow_follow_the_reference(host):
    x = torch.randn(4, 128)
    x[0, 5] = float("nan")
    x[1, 7] = float("inf")
    # the precomputed scale makes values overflow E4M3 (saturate) without the NaN/inf reaching the scale
    sf = torch.full((4, 1), 1e-3)
    assert_equal(tile_kernels.quant.per_token_cast_with_precomputed_sf(x, "e4m3", 128, sf),
                 ref.cast(x, "e4m3", (1, 128), sf=sf))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fmt", ["e4m3", "e2m1"])
@pytest.mark.parametrize("npc,round_sf,clamp", [(32, False, None), (128, True, None), (16, False, 0.0)])
def test_special_blocks_follow_the_reference(host, dtype, fmt, npc, round_sf, clamp):
    """Blocks whose own maximum is NaN, infinite, zero, signed zero or so small that the multiplier
    overflows (clamp_min 0): the kernel's fast path must not be taken for them."""
    from tile_kernels.host.cast import host_cast
    from tile_kernels.quant.common import alloc_sf
    x = torch.randn(8, 512) * 4
    x[0, 5] = float("nan")
    x[1, 7] = float("inf")
    x[2, 200] = -float("inf")
    x[3] = 0.0
    x[4] = -0.0
    x[5, :64] = 1e-39  # FP32 subnormal maximum: 448 / amax overflows when nothing clamps it
    x[6, 300] = 3e38
    x = x.to(dtype)
    if clamp is None:
        q, sf = tile_kernels.quant.per_token_cast(x, fmt, npc, round_sf=round_sf)
    else:
        sf = alloc_sf(8, 512 // npc, False, False, x.device)
        q = host_cast(x, fmt, (1, npc), round_sf, sf, clamp_min=clamp)
    q_ref, sf_ref = ref.cast(x, fmt, (1, npc), round_sf=round_sf, clamp_min=clamp)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden", [192, 512])
def test_e5m6_wide_ranges(host, dtype, hidden):
    """Rows spanning E5M6 subnormals and values below its range, and rows with non-finite maxima
    (which the kernel quantises per value)."""
    x = torch.randn(6, hidden) * torch.tensor([1.0, 1e-3, 3e4, 1e-6, 1.0, 1.0]).unsqueeze(1)
    x[1, ::3] *= 1e-5
    x[4, 9] = float("inf")
    x[5, 2] = float("nan")
    x = x.to(dtype)
    q, sf = tile_kernels.quant.per_token_cast(x, "e5m6", hidden)
    q_ref, sf_ref = ref.cast_to_e5m6(x, hidden)
    assert_equal(q, q_ref)
    assert_equal(sf, sf_ref)


def test_served_through_the_table(monkeypatch):
    """The op's table entry: the host wrapper in tile_kernels/host/cast.py on CPU, the TileLang kernel in
    tile_kernels/ascend/block_cast.py for TK_BACKEND=ascend (the twin on CPU tensors)."""
    from tile_kernels._dispatch import TABLE
    from tile_kernels.host import cast as host
    monkeypatch.delenv("TK_BACKEND", raising=False)
    assert TABLE["per_token_cast"].host.fn is host.cast
    assert TABLE.backend("per_token_cast", "cpu") == "host"
    monkeypatch.setenv("TK_BACKEND", "ascend")
    assert TABLE.backend("per_token_cast", "cpu") == "ascend"
    assert TABLE.serves("per_token_cast", "cpu", "plain", torch.randn(4, 128), "e4m3", (1, 128), None, False,
                        False, False, None, False, None) == "ascend"
