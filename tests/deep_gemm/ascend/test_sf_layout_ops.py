"""The scale-factor layout ops (sf_copy, sf_pack_ue8m0, sf_unpack_ue8m0) on the Ascend vector kernel
(deepgemm_ascend/deep_gemm/ascend/sf_layout_ops.*, on deepjit's twin with DG_BACKEND=ascend): layout.py's
public helpers match the reference bit-exactly at two shape classes (2-D with K tails, batched or strided),
served by the Ascend column and without a host read (but convert_packed_ue8m0 to int16, whose power-of-two
check is on the host); exponent bytes 0 and 255 unpack as float8_e8m0fnu reads them; gran_mn 3 broadcasts."""
import pytest
import torch

import deep_gemm
from deep_gemm import _dispatch
from tests.testkit.host_reads import guarding


def _run(monkeypatch, backend, fn, *args, guard=True):
    with monkeypatch.context() as m:
        m.setenv("DG_BACKEND", backend)
        if backend == "ascend" and guard:
            with guarding(args):
                return fn(*args)
        return fn(*args)


def _bits(t):
    return t.contiguous().view(torch.uint8)


def _same(got, want):
    return got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride() and \
        torch.equal(_bits(got), _bits(want))


def _serves(monkeypatch, name, *args):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    return _dispatch.TABLE.serves(name, args[0].device, *args)


def _any_floats(*shape):
    """FP32 of any sign, exponent and mantissa (the packers keep the exponent byte only), NaN included."""
    return torch.randint(-2 ** 31, 2 ** 31 - 1, shape, dtype=torch.int32).view(torch.float32)


SHAPES = [(37, 5), (2, 19, 9)]   # K tails (5 or 9 scales: no whole int32 word), batched


@pytest.mark.parametrize("shape", SHAPES)
def test_fp32_copy_and_int32_pack_match_the_reference(monkeypatch, shape):
    sf = _any_floats(*shape)
    if len(shape) == 3:
        sf = sf.transpose(-1, -2).contiguous().transpose(-1, -2)   # an MN-major input, not TMA-aligned
    out = torch.empty(shape)
    assert _serves(monkeypatch, "sf_copy", sf, out, 1) == "ascend"
    assert _serves(monkeypatch, "sf_pack_ue8m0", sf, out.int()[..., :1], 1) == "ascend"
    for fn in (deep_gemm.get_mn_major_tma_aligned_tensor, deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor):
        assert _same(_run(monkeypatch, "ascend", fn, sf), _run(monkeypatch, "reference", fn, sf))


def test_k_grouped_int32_pack_matches_the_reference(monkeypatch):
    ks, mn = [3 * 128, 5 * 128 - 7], 20                    # strided per-group views, 3 and 5 K-blocks
    sf = _any_floats(8, mn)
    layout = torch.tensor(ks, dtype=torch.int32)
    fn = deep_gemm.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor
    got = _run(monkeypatch, "ascend", fn, sf, layout, ks, 128, 128)
    assert _same(got, _run(monkeypatch, "reference", fn, sf, layout, ks, 128, 128))


@pytest.mark.parametrize(("shape", "dtype", "k"), [((37, 2), torch.int32, 7 * 32), ((2, 19, 3), torch.int16, 5 * 32)])
def test_convert_packed_matches_the_reference(monkeypatch, shape, dtype, k):
    words = torch.randint(1, 255, shape + (dtype.itemsize,), dtype=torch.uint8)   # normal powers of two
    sf = words.view(dtype).squeeze(-1)
    target = torch.int16 if dtype == torch.int32 else torch.int32
    probe = torch.empty(shape[:-1] + (-(-k // 32),))
    assert _serves(monkeypatch, "sf_unpack_ue8m0", sf, probe) == "ascend"
    assert _serves(monkeypatch, "sf_pack_ue8m0", probe, torch.empty(shape, dtype=target), 1) == "ascend"
    fn = deep_gemm.convert_packed_ue8m0
    # no host-read guard: layout._ascend_int16 checks the values are powers of two on the host (not these kernels)
    got = _run(monkeypatch, "ascend", fn, sf, k, 32, target, guard=dtype == torch.int16)
    assert _same(got, _run(monkeypatch, "reference", fn, sf, k, 32, target))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16])
def test_unpack_edges_and_row_broadcast(monkeypatch, dtype):
    packed = torch.randint(0, 256, (13, 3 * dtype.itemsize), dtype=torch.uint8)
    packed[0, :2] = torch.tensor([0, 255], dtype=torch.uint8)          # 2^-127 and NaN
    packed = packed.view(dtype)
    sk = 3 * dtype.itemsize - 1
    got, want = torch.empty(13, sk), torch.empty(13, sk)
    _run(monkeypatch, "ascend", _dispatch.run, "sf_unpack_ue8m0", packed.device, packed, got)
    _run(monkeypatch, "reference", _dispatch.run, "sf_unpack_ue8m0", packed.device, packed, want)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    # gran_mn 3 (row i reads scale row i // 3), into a column-major output
    sf = _any_floats(5, 7)
    for name, out_dtype, cols in (("sf_copy", torch.float32, 7), ("sf_pack_ue8m0", dtype, -(-7 // dtype.itemsize))):
        got = torch.empty(cols, 13, dtype=out_dtype).t()
        want = torch.empty_like(got)
        _run(monkeypatch, "ascend", _dispatch.run, name, sf.device, sf, got, 3)
        _run(monkeypatch, "reference", _dispatch.run, name, sf.device, sf, want, 3)
        assert torch.equal(_bits(got), _bits(want)), name
