"""The twin's vector register API (c_api/reg*.h) through TileLang's simd_inst.h wrappers, on one fake AIV
core: casts (f32->bf16 RNE + pack, f32->e4m3 saturating in the four byte parts, bf16->f32 even/odd +
interleave; the C API's asc_bfloat162float / _v2, asc_float2bfloat16_rn / _v2, asc_float2half_rn,
asc_e4m32float / _v2 .. _v4 over every E4M3 code, asc_e2m1x22bfloat16 / _v2 .. _v4 over every E2M1 pair,
asc_float2e4m3_rn / _rn_sat and their _v2 .. _v4 quarters with +-inf, NaN and overflow),
tail-masked max/min/sum, compare/select/axpy, a tail-masked asc_mula, and the UB bounds and 32-byte alignment
checks. Compared with torch."""
import pathlib
import shutil
import subprocess
from fractions import Fraction

import numpy as np
import pytest
import torch

HERE = pathlib.Path(__file__).parent
INCLUDE = HERE.parents[3] / "deepjit" / "deepjit" / "backends" / "ascend_twin" / "include"


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    tilelang = pytest.importorskip("tilelang")
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ is not installed")
    tl_src = pathlib.Path(tilelang.__file__).parent / "src"
    out = tmp_path_factory.mktemp("vec") / "test_vec_ops"
    subprocess.run([cxx, "-std=c++20", "-O1", f"-I{INCLUDE}", f"-I{tl_src}", str(HERE / "test_vec_ops.cpp"),
                    "-o", str(out)], check=True, capture_output=True, text=True)
    return out


def run(binary, x):
    proc = subprocess.run([str(binary)], input=x.astype(np.float32).tobytes(), capture_output=True, check=True)
    out, pos = proc.stdout, 0

    def take(dtype, n):
        nonlocal pos
        a = np.frombuffer(out, dtype=dtype, count=n, offset=pos)
        pos += a.nbytes
        return a
    res = dict(bf16=take(np.uint16, 64), e4m3=take(np.uint8, 256), max=take(np.uint32, 2), min=take(np.uint32, 2),
               sum=take(np.float32, 1), count=take(np.uint32, 1), sel=take(np.float32, 64),
               wide=take(np.float32, 128), even=take(np.float32, 64), odd=take(np.float32, 64),
               mula=take(np.float32, 64), narrow_even=take(np.uint16, 128), narrow_odd=take(np.uint16, 128),
               half_even=take(np.uint16, 128),
               e4m3_quarters=take(np.uint32, 256), e4m3_masked=take(np.uint32, 64),
               e2m1_quarters=take(np.uint16, 512), e4m3_narrowed=take(np.uint8, 8 * 256))
    assert pos == len(out)
    return res, proc.stderr.decode()


def _fused(a, b, c):
    """a * b + c rounded once to FP32 (nearest, ties to even), from the exact rational value."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    near = np.float32(float(exact))  # may be one ulp off after the double rounding: pick the nearest neighbour
    best = min((np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))),
               key=lambda f: (abs(Fraction(float(f)) - exact), int(np.float32(f).view(np.uint32)) & 1))
    return best


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(64, generator=g) * 6 - 3)
    # RNE ties for bf16 (odd and even mantissa), e4m3 overflow (saturates) and a subnormal.
    x[40:46] = torch.tensor([1.00390625, 1.01171875, -1.00390625, 1000.0, -1000.0, 1e-40])
    # FP16: overflow to inf (7e4; 65520 rounds up to it), a subnormal, a tie to even (1 + 2^-11)
    x[46:50] = torch.tensor([7e4, 65520.0, 3e-6, 1.00048828125])
    x[3] = x[11] = x[:37].max()  # a tied maximum: the smallest index wins
    return x


@pytest.mark.parametrize("seed", [0, 1])
def test_vec_ops_match_torch(binary, seed):
    x = inputs(seed)
    res, err = run(binary, x.numpy())
    bf = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(res["bf16"], bf)

    e4 = x.to(torch.float8_e4m3fn).view(torch.uint8).numpy()  # torch saturates overflow too
    np.testing.assert_array_equal(res["e4m3"], np.repeat(e4, 4))

    head = x[:37]
    assert res["max"][0] == np.float32(head.max()).view(np.uint32) and res["max"][1] == int(head.argmax())
    assert res["max"][1] == 3
    assert res["min"][0] == np.float32(head.min()).view(np.uint32) and res["min"][1] == int(head.argmin())
    np.testing.assert_allclose(res["sum"][0], float(head.double().sum()), rtol=1e-6)
    assert res["count"][0] == 0

    want = torch.where(x > 0.5, torch.addcmul(torch.ones(64), x, torch.full((64,), 2.0)), -x)
    np.testing.assert_array_equal(res["sel"], want.numpy())

    b = torch.stack([x.repeat(2)[i] * float(i + 1) for i in range(128)]).to(torch.bfloat16)
    np.testing.assert_array_equal(res["wide"], b.float().numpy())

    np.testing.assert_array_equal(res["even"], b.float().numpy()[0::2])
    np.testing.assert_array_equal(res["odd"], b.float().numpy()[1::2])
    want_mula = np.array([_fused(v, v, v) for v in x.numpy()[:37]] + [0.0] * 27, dtype=np.float32)
    np.testing.assert_array_equal(res["mula"], want_mula)

    np.testing.assert_array_equal(res["narrow_even"][0::2], bf)
    np.testing.assert_array_equal(res["narrow_odd"][1::2], bf)
    assert not res["narrow_even"][1::2].any() and not res["narrow_odd"][0::2].any()
    half = x.to(torch.float16).view(torch.int16).numpy().view(np.uint16)  # 1000 exact, 1e-40 -> 0
    assert list(half[46:50]) == [0x7C00, 0x7C00, 0x0032, 0x3C00]  # inf, inf, a subnormal, the tie to even
    np.testing.assert_array_equal(res["half_even"][0::2], half)
    assert not res["half_even"][1::2].any()

    # asc_e4m32float quarter k, lane i: code 4i + k widened exactly (subnormals, +-0; 0x7F / 0xFF NaN)
    want_e4 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    got_e4 = res["e4m3_quarters"].reshape(4, 64).T.reshape(-1).view(np.float32)  # [i, k] -> code 4i + k
    nan = np.isnan(want_e4)
    assert list(np.flatnonzero(nan)) == [0x7F, 0xFF] and np.isnan(got_e4[nan]).all()
    np.testing.assert_array_equal(got_e4[~nan].view(np.uint32), want_e4[~nan].view(np.uint32))  # -0 too
    np.testing.assert_array_equal(res["e4m3_masked"][:37], got_e4.view(np.uint32)[2::4][:37])
    assert not res["e4m3_masked"][37:].any()

    # asc_e2m1x22bfloat16 quarter p, elements 2k / 2k + 1: the low / high nibble of byte 4k + p, exactly
    # (E2M1: S.EE.M, bias 1, 0x1 the subnormal 0.5; no inf / NaN)
    e2m1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    e2m1 = torch.cat([e2m1, -e2m1])
    nibbles = torch.stack([torch.arange(256) & 15, torch.arange(256) >> 4], dim=1)  # [byte, low / high]
    want_fp4 = e2m1[nibbles].bfloat16().view(torch.int16).numpy().view(np.uint16)
    got_fp4 = res["e2m1_quarters"].reshape(4, 64, 2).transpose(1, 0, 2).reshape(256, 2)  # [4k + p, nibble]
    np.testing.assert_array_equal(got_fp4, want_fp4)  # -0 (0x8) too

    # asc_float2e4m3_rn(_sat) quarter p: lane i's code in byte 4i + p. In range both modes are torch's RNE cast;
    # non-saturating (docs "asc_float2e4m3"): overflow (past 464, the tie to even that stays 448) and +-inf give
    # E4M3FN's NaN 0x7F | sign, NaN stays NaN; saturating: +-448 for those, NaN 0.
    s = x.clone()
    s[50:56] = torch.tensor([float("inf"), float("-inf"), float("nan"), 500.0, 464.0, 1e-4])
    sat = s.to(torch.float8_e4m3fn).view(torch.uint8).numpy()  # torch saturates overflow and inf, keeps NaN
    nan = np.isnan(s.numpy())
    sat_want = np.where(nan, 0, sat)
    over = ~nan & ((s.abs() > 464).numpy())
    rn_want = np.where(over, 0x7F | (np.signbit(s.numpy()) * 0x80), sat)
    got = res["e4m3_narrowed"].reshape(8, 64, 4)
    for p in range(4):
        rn, rn_sat = got[p, :, p], got[4 + p, :, p]
        np.testing.assert_array_equal(rn[~nan], rn_want[~nan])
        assert (rn[nan] & 0x7F == 0x7F).all()
        np.testing.assert_array_equal(rn_sat, sat_want)
    assert list(rn_want[50:56]) == [0x7F, 0xFF, 0x7F, 0x7F, 0x7E, 0x00]
    assert list(sat_want[50:56]) == [0x7E, 0xFE, 0x00, 0x7E, 0x7E, 0x00]

    assert "asc_loadalign: buffer UB offset 253824, 256 bytes, is outside [0, 253952)" in err
    assert "asc_loadalign: UB offset 16 is not 32-byte aligned" in err
    assert "asc_storealign: UB offset 4 is not 32-byte aligned" in err
    assert "no error" not in err
