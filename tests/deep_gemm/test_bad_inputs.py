"""Malformed inputs to every family: only ValueError/TypeError come out, before any output is written.

Each family starts from a valid call; hypothesis replaces one tensor argument by a variant with a
wrong dtype, shape, stride or device (or by a non-tensor). The call must either succeed (the
variant happened to be valid) or raise ValueError/TypeError leaving ``d`` bit-for-bit unchanged.
A fixed list of surely-bad calls checks that errors name the argument."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deep_gemm
from deep_gemm.formats import dense
from deep_gemm.testing.generators import (
    generate_k_grouped_contiguous,
    generate_m_grouped_contiguous,
    generate_m_grouped_masked,
    generate_normal,
)
from deep_gemm.utils import per_custom_dims_cast_to_fp8

DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.int16, torch.int8, torch.uint8, torch.float8_e4m3fn,
          torch.int64]


def _dense():
    case = generate_normal(8, 64, 128, "fp8", accumulate=True, out_dtype=torch.float32)
    return deep_gemm.fp8_fp4_gemm_nt, {"a": case.a, "b": case.b, "d": case.d, "c": case.c}


def _bf16():
    case = generate_normal(8, 64, 128, "bf16", accumulate=True, out_dtype=torch.float32)
    return deep_gemm.bf16_gemm_nt, {"a": case.a, "b": case.b, "d": case.d, "c": case.c}


def _m_grouped():
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    case = generate_m_grouped_contiguous(2, 20, 64, 128, "fp8")
    return deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous, {"a": case.a, "b": case.b, "d": case.d,
                                                             "grouped_layout": case.grouped_layout}


def _m_grouped_psum():
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    case = generate_m_grouped_contiguous(2, 20, 64, 128, "bf16", use_psum_layout=True)
    return deep_gemm.m_grouped_bf16_gemm_nt_contiguous, {"a": case.a, "b": case.b, "d": case.d,
                                                          "grouped_layout": case.grouped_layout,
                                                          "use_psum_layout": True}


def _masked():
    case = generate_m_grouped_masked(2, 16, 8, 64, 128, "fp8")
    return deep_gemm.m_grouped_fp8_fp4_gemm_nt_masked, {"a": case.a, "b": case.b, "d": case.d,
                                                         "masked_m": case.masked_m, "expected_m": case.expected_m}


def _k_grouped():
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    case = generate_k_grouped_contiguous(2, 16, 32, [40, 30], "fp8", 32)
    return deep_gemm.k_grouped_fp8_gemm_tn_contiguous, {"a": case.a, "b": case.b, "d": case.d, "c": case.c,
                                                         "ks_cpu": case.ks_cpu, "grouped_layout": case.grouped_layout,
                                                         "recipe": (1, 1, 32)}


def _einsum():
    return deep_gemm.einsum, {"expr": "bhr,hdr->bhd", "a": torch.randn(4, 2, 32).bfloat16(),
                              "b": torch.randn(2, 16, 32).bfloat16(), "d": torch.zeros(4, 2, 16).bfloat16()}


def _hc():
    return deep_gemm.tf32_hc_prenorm_gemm, {"a": torch.randn(4, 64).bfloat16(), "b": torch.randn(8, 64),
                                            "d": torch.zeros(4, 8), "sqr_sum": torch.zeros(4)}


def _mqa():
    kv = per_custom_dims_cast_to_fp8(torch.randn(32, 32), (0,), False)
    ks = torch.zeros(4, dtype=torch.int32)
    return deep_gemm.fp8_fp4_mqa_logits, {"q": (torch.randn(4, 8, 32).to(torch.float8_e4m3fn), None), "kv": kv,
                                          "weights": torch.randn(4, 8), "cu_seq_len_k_start": ks,
                                          "cu_seq_len_k_end": ks + 20}


FAMILIES = {"dense": _dense, "bf16": _bf16, "m_grouped": _m_grouped, "m_grouped_psum": _m_grouped_psum,
            "masked": _masked, "k_grouped": _k_grouped, "einsum": _einsum, "hc": _hc, "mqa": _mqa}


def _slots(kwargs):
    """(key, index or None) of every tensor argument, tuple members included."""
    out = []
    for key, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            out.append((key, None))
        elif isinstance(value, tuple):
            out += [(key, i) for i, t in enumerate(value) if isinstance(t, torch.Tensor)]
    return out


def _mutate(t: torch.Tensor, kind: str, choice: int):
    if kind == "dtype":
        dtypes = [x for x in DTYPES if x != t.dtype]
        return t.to(dtypes[choice % len(dtypes)]) if t.is_floating_point() or t.dtype.is_signed else t.float()
    if kind == "shrink" and t.dim():
        dim = choice % t.dim()
        return t.narrow(dim, 0, max(0, t.size(dim) - 1))
    if kind == "grow":
        return t.unsqueeze(choice % (t.dim() + 1))
    if kind == "transpose" and t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2) if choice % 2 else t.transpose(-1, -2)
    if kind == "stride" and t.dim() and t.size(-1) > 1:
        wide = torch.zeros(*t.shape[:-1], t.size(-1) * 2, dtype=t.dtype)
        wide[..., ::2] = t
        return wide[..., ::2]
    if kind == "device":
        return t.to("meta")
    if kind == "object":
        return [1, 2] if choice % 2 else None
    return t


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(family=st.sampled_from(sorted(FAMILIES)), slot=st.integers(0, 50),
       kind=st.sampled_from(["dtype", "shrink", "grow", "transpose", "stride", "device", "object"]),
       choice=st.integers(0, 50))
def test_malformed_inputs_raise_cleanly(family, slot, kind, choice):
    fn, kwargs = FAMILIES[family]()
    key, index = _slots(kwargs)[slot % len(_slots(kwargs))]
    original = kwargs[key] if index is None else kwargs[key][index]
    bad = _mutate(original, kind, choice)
    if index is None:
        kwargs[key] = bad
    else:
        kwargs[key] = tuple(bad if i == index else x for i, x in enumerate(kwargs[key]))
    out = kwargs.get("d")
    before = out.clone() if isinstance(out, torch.Tensor) and out.device.type != "meta" else None
    try:
        fn(**kwargs)
        assert kind != "device", f"a tensor on another device was accepted ({key})"
    except (ValueError, TypeError):
        if before is not None:
            assert torch.equal(dense(out).view(torch.uint8), dense(before).view(torch.uint8)), "d changed by a failed call"


def _dense_case():
    case = generate_normal(8, 64, 128, "fp8")
    return case.a, case.b, case.d


@pytest.mark.parametrize("mutation,name", [
    (lambda a, b, d: ((a[0].float(), a[1]), b, d), "a[0]"),
    (lambda a, b, d: (a, (b[0][:, :64], b[1]), d), "b[0]"),
    (lambda a, b, d: (a, b, d[:, :32]), "d"),
    (lambda a, b, d: (a, b, d.to(torch.float16)), "d"),
    (lambda a, b, d: ((a[0], a[1][:, :0]), b, d), "a[1]"),
    (lambda a, b, d: (a[0], b, d), "a"),
    (lambda a, b, d: (a, b, torch.zeros(64, 8, dtype=torch.bfloat16).t()), "d"),
])
def test_dense_errors_name_the_argument(mutation, name):
    a, b, d = mutation(*_dense_case())
    with pytest.raises((ValueError, TypeError), match=name.replace("[", r"\[").replace("]", r"\]")):
        deep_gemm.fp8_fp4_gemm_nt(a, b, d)


def test_grouped_layout_errors():
    deep_gemm.set_mk_alignment_for_contiguous_layout(32)
    case = generate_m_grouped_contiguous(2, 20, 64, 128, "bf16")
    bad = case.grouped_layout.clone()
    bad[0] = 5                                               # group id out of range
    with pytest.raises(ValueError, match="grouped_layout"):
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(case.a, case.b, case.d, bad)
    ends = torch.tensor([10, 5], dtype=torch.int32)          # group 1 would end before it starts
    with pytest.raises(ValueError, match=r"grouped_layout\[1\]"):
        deep_gemm.m_grouped_bf16_gemm_nt_contiguous(case.a, case.b, case.d, ends, use_psum_layout=True)
    masked = generate_m_grouped_masked(2, 16, 8, 64, 128, "bf16")
    with pytest.raises(ValueError, match="masked_m"):
        deep_gemm.m_grouped_bf16_gemm_nt_masked(masked.a, masked.b, masked.d, masked.masked_m + 100, 8)
    with pytest.raises(ValueError, match="ks_cpu"):
        k = generate_k_grouped_contiguous(2, 16, 32, [40, 30], "bf16")
        deep_gemm.k_grouped_bf16_gemm_tn_contiguous(k.a, k.b, k.d, [32, 32], k.grouped_layout, c=k.c)
