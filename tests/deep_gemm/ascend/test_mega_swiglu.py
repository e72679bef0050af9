"""Mega MoE's SwiGLU step on the Ascend vector cores (deep_gemm/ascend/mega_swiglu.*) on deepjit's twin, against
``deep_gemm.mega.swiglu_apply_weight_to_fp8`` applied to the de-interleaved L1 output (``_interleave_order``'s
inverse as an explicit column index).

Exactness: the kernel's sigmoid is 1 / (1 + e^-g) with the twin's exp (the host's expf); torch's CPU sigmoid
differs from that by up to 2 FP32 ulps on about 4 % of inputs (measured on 4M BF16 values), so a random gate gives
act an ulp or two away from torch's now and then, which can move an FP8 or BF16 rounding or, where a block's amax
sits within those ulps of 448 * 2^k, its scale. So:
- the exact cases use gates whose sigmoid is exact on both sides (0 -> 0.5; >= 17 -> 1, as 1 + e^-17 rounds to 1;
  a clamp of 24 keeps them there): every other step (de-interleave, clamp, weight, the three FP32 products, the
  block amax, the UE8M0 byte, 1 / sf, the E4M3 rounding, the scale words' byte order) is then compared bit for bit,
  NaN codes by position (any E4M3 NaN matches);
- the realistic cases (Gaussian gate / up, clamp 10 with values past it) compare dequantised values with
  calc_diff < 1e-5 and require equal scales except in blocks whose reference amax lies within 2^-20 (relative) of
  a power-of-two boundary 448 * 2^k.
Also: rows past ``ends[-1]`` keep a sentinel (and ``ends`` is never read on the host), ``ends[-1]`` past M or
negative is clamped, several tiles per vector core (both UB stages in turn), NaN / inf with the twin's register max
propagating and dropping NaN, another interleave granularity, and bad arguments."""
import pytest
import torch

from deep_gemm import mega
from deep_gemm.ascend.mega_swiglu import swiglu_quant, swiglu_quant_into
from deep_gemm.testing import calc_diff
from deep_gemm.utils.math import unpack_ue8m0_from_int
from tests.testkit.host_reads import DeviceOnly, mark

SENTINEL_BYTE, SENTINEL_WORD = 0x5A, 0x13572468


def _interleaved(natural: torch.Tensor, gran: int = 8) -> torch.Tensor:
    """[gate | up] columns in the L1 GEMM's order: column i holds natural column order[i]."""
    return natural[:, mega._interleave_order(natural.size(1), gran)]


def _natural(l1: torch.Tensor, gran: int = 8) -> torch.Tensor:
    return l1[:, torch.argsort(mega._interleave_order(l1.size(1), gran))]


def _reference(l1, w, rows, clamp, to_fp8, gran=8):
    return mega.swiglu_apply_weight_to_fp8(_natural(l1[:rows], gran), w[:rows], clamp, to_fp8)


def _exact_inputs(m: int, inter: int, seed: int, gran: int = 8):
    """Gates in {0} and [17, 64] (sigmoid exactly 0.5 / 1), ups of random magnitude per 32-column block
    (2^-20 .. 2^20: many scales a row), positive weights, and an all-zero row where there are two or more."""
    g = torch.Generator().manual_seed(seed)
    gate = 17 + 47 * torch.rand(m, inter, generator=g)
    gate[torch.rand(m, inter, generator=g) < 0.2] = 0
    scale = torch.exp2(torch.randint(-20, 21, (m, inter // 32, 1), generator=g).float())
    up = (torch.randn(m, inter // 32, 32, generator=g) * scale).view(m, inter)
    if m > 1:
        gate[m // 2], up[m // 2] = 0, 0
    w = torch.rand(m, generator=g) + 0.01
    return _interleaved(torch.cat([gate, up], 1).bfloat16(), gran), w


def _assert_fp8_equal(act, act_sf, want, want_sf, rows):
    got, ref = act[:rows].view(torch.uint8), want.view(torch.uint8)
    nan = (ref & 0x7F) == 0x7F
    assert torch.equal((got & 0x7F) == 0x7F, nan), "NaN positions"
    assert torch.equal(got[~nan], ref[~nan]), f"{int((got[~nan] != ref[~nan]).sum())} E4M3 codes differ"
    assert torch.equal(act_sf[:rows], want_sf), f"{int((act_sf[:rows] != want_sf).sum())} scale words differ"


@pytest.mark.parametrize("clamp", [None, 24.0])
@pytest.mark.parametrize(("m", "inter"), [(1, 128), (37, 384), (100, 256)])
def test_fp8_exact(m, inter, clamp):
    l1, w = _exact_inputs(m, inter, seed=m + inter)
    act, act_sf = swiglu_quant(l1, w, torch.tensor([m // 3, m], dtype=torch.int32), clamp, True)
    assert act.dtype == torch.float8_e4m3fn and act.shape == (m, inter)
    assert act_sf.dtype == torch.int32 and act_sf.shape == (m, inter // 128)
    _assert_fp8_equal(act, act_sf, *_reference(l1, w, m, clamp, True), m)
    if m > 1:
        assert int(act_sf[m // 2].view(torch.uint8).unique().numel()) == 1  # the zero row: the floor's scale 2^-22


def test_bf16_exact():
    l1, w = _exact_inputs(37, 384, seed=5)
    act = swiglu_quant(l1, w, torch.tensor([37], dtype=torch.int32), 24.0, False)
    assert act.dtype == torch.bfloat16 and act.shape == (37, 384)
    assert torch.equal(act.view(torch.int16), _reference(l1, w, 37, 24.0, False).view(torch.int16))


def _realistic_inputs(m, inter, seed):
    g = torch.Generator().manual_seed(seed)
    natural = torch.randn(m, 2 * inter, generator=g) * 4
    natural[:, ::7] *= 5  # values past the clamp on both sides
    return _interleaved(natural.bfloat16()), torch.rand(m, generator=g)


@pytest.mark.parametrize("clamp", [None, 10.0])
def test_fp8_realistic_within_tolerance(clamp):
    m, inter = 64, 256
    l1, w = _realistic_inputs(m, inter, seed=3)
    act, act_sf = swiglu_quant(l1, w, torch.tensor([m], dtype=torch.int32), clamp, True)
    want, want_sf = _reference(l1, w, m, clamp, True)
    sf, ref_sf = unpack_ue8m0_from_int(act_sf), unpack_ue8m0_from_int(want_sf)
    deq = act.float() * sf.repeat_interleave(32, 1)
    ref_deq = want.float() * ref_sf.repeat_interleave(32, 1)
    assert calc_diff(deq, ref_deq) < 1e-5
    # the reference's block amax against the nearest UE8M0 boundary 448 * 2^k
    nat = _natural(l1).float()
    gate, up = nat[:, :inter], nat[:, inter:]
    if clamp is not None:
        gate, up = gate.clamp(max=clamp), up.clamp(-clamp, clamp)
    amax = (gate * torch.sigmoid(gate) * up * w[:, None]).abs().view(m, -1, 32).amax(2).clamp(min=1e-4) / 448
    near = (amax / torch.exp2(torch.round(torch.log2(amax))) - 1).abs() < 2 ** -20
    assert torch.equal(sf[~near], ref_sf[~near])
    assert int((act.view(torch.uint8) != want.view(torch.uint8)).sum()) <= m * inter // 1000  # ulps, rarely a code


def test_bf16_realistic_within_tolerance():
    l1, w = _realistic_inputs(40, 256, seed=4)
    act = swiglu_quant(l1, w, torch.tensor([40], dtype=torch.int32), 10.0, False)
    want = _reference(l1, w, 40, 10.0, False)
    assert calc_diff(act.float(), want.float()) < 1e-5
    assert int((act.view(torch.int16) != want.view(torch.int16)).sum()) <= act.numel() // 100


def _sentinel_outputs(m, inter, to_fp8):
    if not to_fp8:
        return torch.full((m, inter), 3.0, dtype=torch.bfloat16), None
    act = torch.full((m, inter), SENTINEL_BYTE, dtype=torch.uint8).view(torch.float8_e4m3fn)
    return act, torch.full((m, inter // 128), SENTINEL_WORD, dtype=torch.int32)


@pytest.mark.parametrize(("last_end", "to_fp8"), [(30, True), (1000, True), (-3, True), (17, False)])
def test_rows_past_the_last_end_are_untouched(last_end, to_fp8):
    """Rows [0, clamp(ends[-1], 5, M)) are written (a last end below the first group's, 5, leaves that group's
    rows), the rest keep the sentinel; ``ends`` is device-only."""
    m, inter = 45, 256
    l1, w = _exact_inputs(m, inter, seed=11)
    ends = torch.tensor([5, last_end], dtype=torch.int32)
    act, act_sf = _sentinel_outputs(m, inter, to_fp8)
    mark(ends)
    with DeviceOnly():
        swiglu_quant_into(l1, w, ends, None, act, act_sf)
    del ends._device_only
    rows = min(max(last_end, 5), m)
    if to_fp8:
        if rows:
            _assert_fp8_equal(act, act_sf, *_reference(l1, w, rows, None, True), rows)
        assert (act[rows:].view(torch.uint8) == SENTINEL_BYTE).all() and (act_sf[rows:] == SENTINEL_WORD).all()
    else:
        assert torch.equal(act[:rows].view(torch.int16), _reference(l1, w, rows, None, False).view(torch.int16))
        assert (act[rows:] == 3.0).all()


@pytest.mark.parametrize(("to_fp8", "grid"), [(True, 2), (False, 3), (True, 40)])
def test_only_the_groups_rows_with_an_alignment(to_fp8, grid):
    """The psum layout (alignment 16): group g's rows from the previous end aligned up; the gaps, an empty group, a
    decreasing end (empty) and rows past the last group keep the sentinel. Three-row tiles, so groups end mid-tile
    and cores take tiles of several groups; with 40 cores, most have none."""
    m, inter, alignment = 90, 256, 16
    l1, w = _exact_inputs(m, inter, seed=17)
    ends = torch.tensor([5, 23, 32, 20, 39, 52, 70], dtype=torch.int32)  # [0,5) [16,23) [32,32) [32,32) [32,39) ...
    groups = [(0, 5), (16, 23), (32, 39), (48, 52), (64, 70)]
    act, act_sf = _sentinel_outputs(m, inter, to_fp8)
    mark(ends)
    with DeviceOnly():
        swiglu_quant_into(l1, w, ends, None, act, act_sf, alignment=alignment, max_tile_rows=3, grid=grid)
    del ends._device_only
    inside = torch.zeros(m, dtype=torch.bool)
    for start, end in groups:
        inside[start:end] = True
    rows = inside.nonzero().flatten()
    if to_fp8:
        want, want_sf = _reference(l1, w, m, None, True)
        _assert_fp8_equal(act[rows], act_sf[rows], want[rows], want_sf[rows], len(rows))
        assert (act[~inside].view(torch.uint8) == SENTINEL_BYTE).all() and (act_sf[~inside] == SENTINEL_WORD).all()
    else:
        want = _reference(l1, w, m, None, False)
        assert torch.equal(act[rows].view(torch.int16), want[rows].view(torch.int16))
        assert (act[~inside] == 3.0).all()


@pytest.mark.parametrize("to_fp8", [True, False])
def test_several_tiles_per_vector_core(to_fp8):
    """Three-row tiles on two vector cores: seven tiles each, the next one's load issued before this one's vector
    work, both UB stages in turn, and a short last tile."""
    m, inter = 41, 384
    l1, w = _exact_inputs(m, inter, seed=13)
    act, act_sf = _sentinel_outputs(m, inter, to_fp8)
    swiglu_quant_into(l1, w, torch.tensor([m], dtype=torch.int32), 24.0, act, act_sf, max_tile_rows=3, grid=2)
    if to_fp8:
        _assert_fp8_equal(act, act_sf, *_reference(l1, w, m, 24.0, True), m)
    else:
        assert torch.equal(act.view(torch.int16), _reference(l1, w, m, 24.0, False).view(torch.int16))


@pytest.mark.parametrize("clamp", [None, 24.0])
@pytest.mark.parametrize("max_drops_nan", ["0", "1"])
def test_nan_and_inf(monkeypatch, max_drops_nan, clamp):
    """NaN in a gate and in an up value, a -inf gate (-inf * sigmoid 0 = NaN), overflow to +-inf and an inf up: the
    blocks holding them get the scale byte 254 (2^127, ceil_to_ue8m0's clamp), their NaN elements E4M3 NaN, inf
    +-448 (torch's cast saturates), the rest 0; the other blocks are unaffected. With the register max propagating
    NaN and dropping it (DJ_TWIN_MAX_DROPS_NAN: the docs leave it open), and through the clamp."""
    monkeypatch.setenv("DJ_TWIN_MAX_DROPS_NAN", max_drops_nan)
    m, inter = 8, 256
    l1, w = _exact_inputs(m, inter, seed=17)
    nat = _natural(l1).clone()
    nat[0, 5] = float("nan")                       # gate
    nat[1, inter + 100] = float("nan")             # up
    nat[2, 40] = float("-inf")                     # gate: NaN
    nat[3, 70], nat[3, inter + 70] = 3e38, -4.0    # overflow to -inf (no clamp) or -24 * 24 * w
    nat[5, inter + 200] = float("inf")             # up: inf (no clamp) or 24
    l1 = _interleaved(nat)
    act, act_sf = swiglu_quant(l1, w, torch.tensor([m], dtype=torch.int32), clamp, True)
    want, want_sf = _reference(l1, w, m, clamp, True)
    assert int(want.view(torch.uint8).eq(0x7F).logical_or(want.view(torch.uint8).eq(0xFF)).sum()) >= 3
    _assert_fp8_equal(act, act_sf, want, want_sf, m)
    scale_bytes = act_sf.view(torch.uint8)  # [m, inter / 32]: block j of a row in byte j
    assert scale_bytes[0, 0] == 254 and scale_bytes[1, 3] == 254 and scale_bytes[2, 1] == 254


@pytest.mark.parametrize("gran", [4, 128])   # 128: DeepGEMM-Ascend's Mega MoE layout (gate / up per 256-row block)
def test_other_interleave_granularity(gran):
    l1, w = _exact_inputs(9, 256, seed=19, gran=gran)
    act, act_sf = swiglu_quant(l1, w, torch.tensor([9], dtype=torch.int32), None, True, gran=gran)
    _assert_fp8_equal(act, act_sf, *_reference(l1, w, 9, None, True, gran=gran), 9)


def test_bad_arguments():
    l1, w, ends = torch.zeros(4, 512, dtype=torch.bfloat16), torch.ones(4), torch.tensor([4], dtype=torch.int32)
    with pytest.raises(ValueError, match="l1_out: expected 2 \\* I columns"):
        swiglu_quant(torch.zeros(4, 320, dtype=torch.bfloat16), w, ends, None, True)
    with pytest.raises(TypeError, match="l1_out: expected dtype"):
        swiglu_quant(l1.float(), w, ends, None, True)
    with pytest.raises(ValueError, match="weights: expected shape"):
        swiglu_quant(l1, torch.ones(5), ends, None, True)
    with pytest.raises(ValueError, match="ends: expected at least one group"):
        swiglu_quant(l1, w, ends[:0], None, True)
    with pytest.raises(ValueError, match="activation_clamp: expected None or a value >= 0"):
        swiglu_quant(l1, w, ends, -1.0, True)
    with pytest.raises(ValueError, match="gran: expected a power of two"):
        swiglu_quant(l1, w, ends, None, True, gran=3)
    with pytest.raises(ValueError, match="l1_out: expected an I whose row fits"):
        swiglu_quant(torch.zeros(1, 2 * 32768, dtype=torch.bfloat16), torch.ones(1), ends, None, True)
    act = torch.empty(4, 256, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="act_sf: expected shape"):
        swiglu_quant_into(l1, w, ends, None, act, torch.empty(4, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="act: expected memory disjoint from l1_out"):
        swiglu_quant_into(l1, w, ends, None, l1.view(torch.uint8).view(-1)[:1024].view(4, 256).view(torch.float8_e4m3fn),
                          torch.empty(4, 2, dtype=torch.int32))
