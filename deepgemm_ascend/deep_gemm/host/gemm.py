"""GEMM entry points (dense, M-grouped contiguous and masked, K-grouped) over one packed engine.

All of them launch the single kernel ``dg_gemm`` (host/gemm.cpp); they differ only in the group
layout handed to it. Tensors arrive validated by the public API (see the package docstring)."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from deepjit import descriptors

from .._lib import LIB
from ._lib import brgemm_links, kernel, process_engine, threads

# dg_gemm's named argument block, read from its one declaration (host/gemm_desc.hpp) and filled by name.
GEMM_DESC = descriptors.struct_type(LIB.source("host/gemm_desc.hpp"), "GemmDesc")

_FP4_DTYPES = (torch.uint8, torch.int8) + ((torch.float4_e2m1fn_x2,) if hasattr(torch, "float4_e2m1fn_x2") else ())
_MODES = {"dense": 0, "m_indices": 1, "psum": 2, "masked": 3, "k_grouped": 4}


def _elem_type(x: torch.Tensor) -> int:
    if x.dtype == torch.bfloat16:
        return 0
    if x.dtype == torch.float8_e4m3fn:
        return 1
    if x.dtype in _FP4_DTYPES:
        return 2
    raise TypeError(f"host GEMM operand must be bf16, float8_e4m3fn or packed FP4, got {x.dtype}")


def _operand(x: torch.Tensor, sf: torch.Tensor | None, mn: int, gran: Sequence[int]) -> tuple[dict, int]:
    """The ``OperandDesc`` fields of ``x`` ([G?, MN, K] view) and its logical K. Whether power-of-two
    scales fold into the conversion is decided in the kernel."""
    t = _elem_type(x)
    packed_mn = t == 2 and x.size(-2) != mn
    k = x.size(-1) * (2 if t == 2 and not packed_mn else 1)
    desc = dict(type=t, group_stride=x.stride(0) if x.dim() == 3 else 0, mn_stride=x.stride(-2), k_stride=x.stride(-1),
                packed_mn=int(packed_mn), sf_group_stride=0, sf_mn_stride=0, sf_k_stride=0, gran_mn=1, gran_k=1,
                has_sf=0, sf_groups=0, sf_rows=0, sf_cols=0)
    if sf is not None:
        three = sf.dim() == 3
        desc.update(sf_group_stride=sf.stride(0) if three else 0, sf_mn_stride=sf.stride(-2), sf_k_stride=sf.stride(-1),
                    gran_mn=int(gran[0]), gran_k=int(gran[1]), has_sf=1, sf_groups=sf.size(0) if three else 1,
                    sf_rows=sf.size(-2), sf_cols=sf.size(-1))
    return desc, k


def _output(x: torch.Tensor | None) -> dict:
    """The ``OutputDesc`` fields of ``x`` (type -1: no tensor)."""
    if x is None:
        return dict(type=-1, group_stride=0, row_stride=0)
    return dict(type=1 if x.dtype == torch.float32 else 0, group_stride=x.stride(0) if x.dim() == 3 else 0,
                row_stride=x.stride(-2))


# Packed descriptors by their field values: a GemmDesc holds only integers, and packing one (checked
# field by field) was about a third of a decode call's Python time. Bounded: cleared when full.
_DESC_CACHE: dict[tuple, object] = {}
_DESC_CACHE_SIZE = 256


def _gemm_desc(**fields):
    key = tuple(tuple(v.values()) if isinstance(v, dict) else v for v in fields.values())
    desc = _DESC_CACHE.get(key)
    if desc is None:
        desc = descriptors.pack(GEMM_DESC, **fields)
        if len(_DESC_CACHE) >= _DESC_CACHE_SIZE:
            _DESC_CACHE.clear()
        _DESC_CACHE[key] = desc
    return desc


# M for which a dense GEMM with E4M3 B runs on oneDNN's brgemm where vdpbf16ps is the automatic engine.
# Measured on Zen 4 (AVX-512 BF16, no AMX), B read from DRAM, paired runs of both engines: from 12 to 512 rows
# brgemm took 0-19 % less time (7168 x 2048 and 2112 x 7168); below 12 rows our stream path (up to 6) and panels
# were quicker (by up to 40 % at 4 rows), from 1024 rows they were even, and at 4096 ours are ~10 % quicker.
# Grouped calls keep the process's engine: MoE decode's uniform routing (~12 rows an expert) ran 10-20 % quicker
# on brgemm, but the MoE layer's grouped-limited routing (the same mean, more spread) 10 % slower.
# A forced engine (DG_HOST_MATRIX / DJ_HOST_MATRIX) holds everywhere.
BRGEMM_ROWS = (12, 512)


def _override(rows: int, b_type: int) -> str | None:
    """"brgemm" for a dense call of ``rows`` rows with E4M3 B in ``BRGEMM_ROWS`` where vdpbf16ps is the automatic
    engine (FP4 B was not measured), else None: the process's engine."""
    engine, forced = process_engine()
    moved = (not forced and engine == "avx512bf16" and b_type == 1 and BRGEMM_ROWS[0] <= rows <= BRGEMM_ROWS[1]
             and brgemm_links())
    return "brgemm" if moved else None


def engine_for(rows: int, b_type: int) -> str:
    """The matrix engine of a dense dg_gemm call of ``rows`` rows with B of element type ``b_type`` (``_elem_type``)."""
    return _override(rows, b_type) or process_engine()[0]


def _launch(mode: str, m: int, n: int, k: int, g: int, a_desc, b_desc, a, sfa, b, sfb, d, c, layout, alpha,
            num_threads, alignment: int = 1, zero_padding: bool = False) -> None:
    desc = _gemm_desc(m=m, n=n, k=k, groups=g, mode=_MODES[mode], alignment=alignment,
                      zero_padding=int(zero_padding), a=a_desc, b=b_desc, d=_output(d), c=_output(c))
    engine = _override(m, b_desc["type"]) if mode == "dense" else None
    kernel("dg_gemm", "host/gemm.cpp", engine=engine)(descriptors.address(desc), a, sfa, b, sfb, d, c, layout,
                                                      float(alpha), threads(num_threads))


def gemm(a: torch.Tensor, sfa: torch.Tensor | None, b: torch.Tensor, sfb: torch.Tensor | None,
         d: torch.Tensor, c: torch.Tensor | None = None, alpha: float = 1.0,
         gran_a: tuple = (1, 128), gran_b: tuple = (128, 128), num_threads: int | None = None) -> None:
    """``d = alpha * dequant(a) @ dequant(b).T + c``; a ``[M, K]``, b ``[N, K]``, d ``[M, N]``."""
    m, n = d.shape
    if m == 0 or n == 0:
        return
    af, k = _operand(a, sfa, m, gran_a)
    bf, _ = _operand(b, sfb, n, gran_b)
    _launch("dense", m, n, k, 1, af, bf, a, sfa, b, sfb, d, c, None, alpha, num_threads)


def m_grouped_gemm_contiguous(a, sfa, b, sfb, d, grouped_layout: torch.Tensor, use_psum_layout: bool = False,
                              alignment: int = 128, zero_padding: bool = True, gran_a: tuple = (1, 128),
                              gran_b: tuple = (128, 128), num_threads: int | None = None) -> None:
    """Rows of a ``[M_sum, K]`` grouped by ``grouped_layout``; b ``[G, N, K]``; d ``[M_sum, N]``.

    ``use_psum_layout=False``: int32 ``m_indices[M_sum]``, group id per row, -1 for padding.
    ``use_psum_layout=True``: int32 ``[G]`` exclusive end rows; group g starts at
    ``align(psum[g-1], alignment)``. Padding / gap rows of d are zeroed when ``zero_padding``.
    All groups run in one launch whose tiles are shared out by work, not by group."""
    m, n = d.shape
    if m == 0 or n == 0:
        return
    g = b.size(0)
    af, k = _operand(a, sfa, m, gran_a)
    bf, _ = _operand(b, sfb, n, gran_b)
    layout = grouped_layout.to(torch.int32).contiguous()
    _launch("psum" if use_psum_layout else "m_indices", m, n, k, g, af, bf, a, sfa, b, sfb, d, None, layout, 1.0,
            num_threads, alignment=alignment, zero_padding=zero_padding)


def m_grouped_gemm_masked(a, sfa, b, sfb, d, masked_m: torch.Tensor, gran_a: tuple = (1, 128),
                          gran_b: tuple = (128, 128), num_threads: int | None = None,
                          c: torch.Tensor | None = None) -> None:
    """a ``[G, M_max, K]``, b ``[G, N, K]``, d ``[G, M_max, N]``; rows ``>= masked_m[g]`` untouched.
    ``c`` (``d``'s shape, FP32 or ``d``'s dtype, may be ``d``) is added to the valid rows."""
    g, m, n = d.shape
    if g == 0 or m == 0 or n == 0:
        return
    af, k = _operand(a, sfa, m, gran_a)
    bf, _ = _operand(b, sfb, n, gran_b)
    layout = masked_m.to(torch.int32).contiguous()
    _launch("masked", m, n, k, g, af, bf, a, sfa, b, sfb, d, c, layout, 1.0, num_threads)


def k_grouped_gemm(a, sfa, b, sfb, d, c, ks: Sequence[int], k_starts: Sequence[int] | None = None,
                   sf_starts: Sequence[int] | None = None, gran_k: int = 128,
                   num_threads: int | None = None) -> None:
    """``d[g] = c[g] + a[kg].T @ b[kg]`` in FP32; a ``[sum_K, M]``, b ``[sum_K, N]``, d/c ``[G, M, N]``.

    Group g covers rows ``[k_starts[g], k_starts[g] + ks[g])`` (default: consecutive). Scales are
    per channel: ``sfa [S, M]``, ``sfb [S, N]`` with group g's K-blocks at rows ``sf_starts[g]...``
    (default: consecutive ``ceil(ks[g] / gran_k)`` rows); ``None`` for BF16."""
    g, m, n = d.shape
    if g == 0 or m == 0 or n == 0:
        return
    ks = [int(x) for x in ks]
    if k_starts is None:
        k_starts = [sum(ks[:i]) for i in range(g)]
    if sf_starts is None:
        blocks = [-(-x // gran_k) for x in ks]
        sf_starts = [sum(blocks[:i]) for i in range(g)]
    layout = torch.tensor([v for i in range(g) for v in (k_starts[i], ks[i], sf_starts[i])], dtype=torch.int32)
    at, bt = a.t(), b.t()
    sfat = None if sfa is None else sfa.t()
    sfbt = None if sfb is None else sfb.t()
    af, k = _operand(at, sfat, m, (1, gran_k))
    bf, _ = _operand(bt, sfbt, n, (1, gran_k))
    _launch("k_grouped", m, n, k, g, af, bf, at, sfat, bt, sfbt, d, c, layout, 1.0, num_threads)
