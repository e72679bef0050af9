"""DG_BACKEND=ascend on CPU tensors (deepjit's twin): the public MX GEMMs take packed UE8M0 scales where they lie.

Per-token casts' K-major rows (int32 words or int16 pairs) and DeepGEMM-Ascend's MN-major int16 pairs are read
by the kernels in place (``ascend.fp8_mx_gemm.mx_scales``): the call's output has the bits of the same call with
the FP32 scales they stand for (converted on the host, the other path), and the call runs no op outside its
kernel launch but views. Other packings (int32 MN-major, K not a multiple of 64) take the converting path."""
import pytest
import torch

import deep_gemm
from deep_gemm import formats
from tests.deep_gemm.ascend._grouped import psum_ends
from tests.testkit.launches import VIEW_OPS, OpsAroundLaunches


def _exponents(shape, gen) -> torch.Tensor:
    """UE8M0 bytes per 32 K-elements, 2^-7 .. 2^6."""
    return torch.randint(120, 134, shape, generator=gen, dtype=torch.uint8)


def _forms(e: torch.Tensor) -> dict:
    """The scales the bytes ``e`` [.., MN, K/32] stand for, in each container a caller may hand over (words padded
    with exponent byte 0, as the packers pad)."""
    words = torch.nn.functional.pad(e, (0, -e.size(-1) % 4))
    k_major16 = words.view(torch.int16)[..., :-(-e.size(-1) // 2)]
    rows = words.view(torch.int32)
    return {"fp32": torch.exp2(e.float() - 127),
            "expanded": rows[..., :1, :].expand(rows.shape),   # every row row 0's (stride 0): converted
            "fp32 expanded": torch.exp2(e[..., :1, :].float() - 127).expand(e.shape),
            "int32": words.view(torch.int32),                                         # per-token casts' rows
            "int16": k_major16,
            "int16_mn": k_major16.transpose(-1, -2).contiguous().transpose(-1, -2),   # DeepGEMM-Ascend's ready form
            "int32_mn": words.view(torch.int32).transpose(-1, -2).contiguous().transpose(-1, -2)}   # converted


def _fp32(forms: dict, form: str) -> torch.Tensor:
    """The FP32 scales ``forms[form]`` stands for."""
    return forms["fp32 expanded" if form == "expanded" else "fp32"]


def _fp8(shape, gen) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * 4).to(torch.float8_e4m3fn)


def _fp4(shape, gen) -> torch.Tensor:
    return formats.pack_fp4_codes(torch.randint(0, 16, shape, generator=gen, dtype=torch.uint8))


FORMS = ["int32", "int16", "int16_mn", "int32_mn", "expanded"]
IN_PLACE = {"int32": True, "int16": True, "int16_mn": False}   # read where they lie: K-major or not


@pytest.fixture
def scale_paths(monkeypatch):
    """The ``MxScales`` every MX launch of the test took, with whether each was the caller's tensor."""
    from deep_gemm.ascend import fp8_mx_gemm, m_grouped_fp8_mx_gemm
    taken = []

    def spy(name, op, valid_mn=None):
        got = real(name, op, valid_mn)
        packed = op.packed_sf
        taken.append((got.k_major, packed is not None and got.t.untyped_storage().data_ptr()
                      == packed.untyped_storage().data_ptr()))
        return got

    real = fp8_mx_gemm.mx_scales
    monkeypatch.setattr(fp8_mx_gemm, "mx_scales", spy)
    monkeypatch.setattr(m_grouped_fp8_mx_gemm, "mx_scales", spy)
    return taken


def _expect_path(taken, form, k):
    """Every launch read ``form``'s scales in place (K-major or not, as IN_PLACE says) or took converted ones; a
    single int32 word a row (K <= 128) is K-major whatever the word dimension's stride."""
    k_major = IN_PLACE.get(form, True if form == "int32_mn" and k <= 128 else None)
    want = (k_major, True) if k_major is not None and k % 64 == 0 else (False, False)
    assert taken and all(t == want for t in taken), taken


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kinds,k", [("fp8xfp8", 384), ("fp8xfp4", 384), ("fp4xfp8", 384), ("fp4xfp4", 128),
                                     ("fp8xfp8", 352)])   # 352: K % 64 != 0, converted
def test_dense(monkeypatch, scale_paths, form, kinds, k):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    gen = torch.Generator().manual_seed(3)
    m, n = 40, 264
    a_kind, b_kind = kinds.split("x")
    a, b = (_fp8 if a_kind == "fp8" else _fp4)((m, k), gen), (_fp8 if b_kind == "fp8" else _fp4)((n, k), gen)
    sfa, sfb = _forms(_exponents((m, k // 32), gen)), _forms(_exponents((n, k // 32), gen))
    want, d = torch.empty(m, n, dtype=torch.bfloat16), torch.empty(m, n, dtype=torch.bfloat16)
    deep_gemm.fp8_fp4_gemm_nt((a, _fp32(sfa, form)), (b, _fp32(sfb, form)), want, recipe=(1, 1, 32))
    scale_paths.clear()
    deep_gemm.fp8_fp4_gemm_nt((a, sfa[form]), (b, sfb[form]), d, recipe=(1, 1, 32))
    assert torch.equal(d, want)
    _expect_path(scale_paths, form, k)


@pytest.mark.parametrize("form", ["int32", "int16_mn"])
def test_tn_with_c_and_alpha(monkeypatch, scale_paths, form):
    """A MN-major A (``tn``) with its scales K-major or MN-major, through the epilogue kernel (``c``, ``alpha``)."""
    monkeypatch.setenv("DG_BACKEND", "ascend")
    gen = torch.Generator().manual_seed(6)
    m, n, k = 48, 256, 256
    a_km, b = _fp8((k, m), gen), _fp8((n, k), gen)
    sfa, sfb = _forms(_exponents((m, k // 32), gen)), _forms(_exponents((n, k // 32), gen))
    c = torch.randn(m, n, generator=gen)
    want, d = torch.empty(m, n), torch.empty(m, n)
    for out, f in ((want, "fp32"), (d, form)):
        scale_paths.clear()
        deep_gemm.fp8_fp4_gemm_tn((a_km, sfa[f].transpose(0, 1)), (b.t(), sfb[f].transpose(0, 1)), out, c=c,
                                  recipe=(1, 1, 32), alpha=0.5)
    assert torch.equal(d, want)
    _expect_path(scale_paths, form, k)


@pytest.mark.parametrize("form", FORMS)
def test_m_grouped_contiguous_and_masked(monkeypatch, scale_paths, form):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    gen = torch.Generator().manual_seed(4)
    g, m, n, k = 3, 192, 256, 256
    a, b = _fp8((m, k), gen), _fp4((g, n, k), gen)
    sfa, sfb = _forms(_exponents((m, k // 32), gen)), _forms(_exponents((g, n, k // 32), gen))
    ends = psum_ends([40, 0, 70], 64)
    want, d = torch.zeros(m, n, dtype=torch.bfloat16), torch.zeros(m, n, dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, _fp32(sfa, form)), (b, _fp32(sfb, form)), want, ends,
                                                   recipe=(1, 1, 32),
                                                   use_psum_layout=True)
    scale_paths.clear()
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa[form]), (b, sfb[form]), d, ends, recipe=(1, 1, 32),
                                                   use_psum_layout=True)
    assert torch.equal(d, want)
    _expect_path(scale_paths, form, k)
    am, sfam = _fp8((g, 64, k), gen), _forms(_exponents((g, 64, k // 32), gen))
    masked = torch.tensor([64, 0, 17], dtype=torch.int32)
    want, d = torch.zeros(g, 64, n, dtype=torch.bfloat16), torch.zeros(g, 64, n, dtype=torch.bfloat16)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked((am, _fp32(sfam, form)), (b, _fp32(sfb, form)), want, masked, 64,
                                               recipe=(1, 1, 32))
    scale_paths.clear()
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked((am, sfam[form]), (b, sfb[form]), d, masked, 64, recipe=(1, 1, 32))
    assert torch.equal(d, want)
    _expect_path(scale_paths, form, k)


def _dense_call(form, gen):
    m, n, k = 32, 256, 256
    a, b = _fp8((m, k), gen), _fp8((n, k), gen)
    sfa, sfb = _forms(_exponents((m, k // 32), gen))[form], _forms(_exponents((n, k // 32), gen))[form]
    d = torch.empty(m, n, dtype=torch.bfloat16)
    return lambda: deep_gemm.fp8_fp4_gemm_nt((a, sfa), (b, sfb), d, recipe=(1, 1, 32)), "dg_fp8_mx_gemm"


def _einsum_call(form, gen):
    bs, h, r, dv = 8, 4, 256, 128
    a, w = _fp8((bs, h, r), gen), _fp8((h, dv, r), gen)
    sfa, sfw = _forms(_exponents((bs, h, r // 32), gen))[form], _forms(_exponents((h, dv, r // 32), gen))[form]
    d = torch.empty(bs, h, dv, dtype=torch.bfloat16)
    return (lambda: deep_gemm.fp8_einsum("bhr,hdr->bhd", (a, sfa), (w, sfw), d, recipe=(1, 1, 32)),
            "dg_m_grouped_bf16_gemm")


def _grouped_call(form, gen):
    g, m, n, k = 3, 192, 256, 256
    a, b = _fp8((m, k), gen), _fp4((g, n, k), gen)
    sfa, sfb = _forms(_exponents((m, k // 32), gen))[form], _forms(_exponents((g, n, k // 32), gen))[form]
    d, ends = torch.zeros(m, n, dtype=torch.bfloat16), psum_ends([40, 0, 70], 64)
    return (lambda: deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, sfb), d, ends, recipe=(1, 1, 32),
                                                                   use_psum_layout=True),
            "dg_m_grouped_fp8_fp4_mx_gemm")


def _masked_call(form, gen):
    g, m, n, k = 3, 64, 256, 256
    a, b = _fp8((g, m, k), gen), _fp8((g, n, k), gen)
    sfa, sfb = _forms(_exponents((g, m, k // 32), gen))[form], _forms(_exponents((g, n, k // 32), gen))[form]
    d, masked = torch.zeros(g, m, n, dtype=torch.bfloat16), torch.tensor([64, 0, 17], dtype=torch.int32)
    return (lambda: deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), (b, sfb), d, masked, m, recipe=(1, 1, 32)),
            "dg_m_grouped_bf16_gemm")


@pytest.mark.parametrize("make,form", [(_dense_call, "int32"), (_dense_call, "int16_mn"), (_einsum_call, "int32"),
                                       (_grouped_call, "int32"), (_masked_call, "int16_mn")])
def test_a_call_is_its_kernel(monkeypatch, make, form):
    """With packed scales in a form the kernels read, a dense, psum-grouped or masked GEMM or an FP8 einsum launches
    its kernel and runs nothing else but views: no unpacking, no re-packing, no per-row group map, no look at the
    values (on an NPU: no op beside it)."""
    monkeypatch.setenv("DG_BACKEND", "ascend")
    call, kernel = make(form, torch.Generator().manual_seed(5))
    call()                                                                  # compiles the kernel
    with OpsAroundLaunches() as ops:
        call()
    assert ops.kernels == [kernel]
    assert set(ops.outside) <= VIEW_OPS, ops.outside


@pytest.mark.parametrize("form", ["int16", "int32", "int16_mn"])
@pytest.mark.parametrize("kind,head_dim", [("fp8", 128), ("fp4", 64)])
def test_mqa_logits(monkeypatch, form, kind, head_dim):
    """The lightning indexer's MX product on packed per-32 scales of q ``[S, H, D/64]`` and KV ``[S_kv, D/64]``
    (int16 pairs as DeepGEMM-Ascend takes them, or int32 words): the caller's rows are read where they lie
    (``load_sf_nz<true>``); a transposed copy takes the converting path. Bits of the FP32-scale call."""
    from deep_gemm.ascend import mqa_logits
    monkeypatch.setenv("DG_BACKEND", "ascend")
    gen = torch.Generator().manual_seed(8)
    s, heads, s_kv = 6, 16, 300
    make = _fp8 if kind == "fp8" else _fp4
    q, kv = make((s, heads, head_dim), gen), make((s_kv, head_dim), gen)
    sfq, sfk = _forms(_exponents((s * heads, head_dim // 32), gen)), _forms(_exponents((s_kv, head_dim // 32), gen))
    w = torch.randn(s, heads, generator=gen)
    ks, ke = torch.zeros(s, dtype=torch.int32), torch.full((s,), s_kv, dtype=torch.int32)
    shape_q = (s, heads, -1)
    want = deep_gemm.fp8_fp4_mqa_logits((q, sfq["fp32"].view(shape_q)), (kv, sfk["fp32"]), w, ks, ke)
    taken, real = [], mqa_logits.mx_pairs

    def spy(op, rows, dim):
        got = real(op, rows, dim)
        taken.append((got[2], op.packed_sf is not None
                      and got[0].untyped_storage().data_ptr() == op.packed_sf.untyped_storage().data_ptr()))
        return got

    monkeypatch.setattr(mqa_logits, "mx_pairs", spy)
    packed_q = sfq[form].reshape(s, heads, -1) if form != "int16_mn" else sfq[form].view(s, heads, -1)
    got = deep_gemm.fp8_fp4_mqa_logits((q, packed_q), (kv, sfk[form]), w, ks, ke)
    assert torch.equal(got, want)
    in_place = form != "int16_mn" or head_dim == 64   # one pair a row is a row whatever its stride
    assert taken == [(in_place, in_place)] * 2, taken
