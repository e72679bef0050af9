"""Einsum GEMMs, the HC pre-norm GEMM and the head-splitting FP8 GEMM.

BF16 ``einsum`` expressions: ``bmk,bnk->mn`` (FP32 ``d`` accumulates in place when ``c is d``; a BF16
``d`` takes no ``c``), ``bhr,hdr->bhd``, ``bhd,hdr->bhr`` and DeepGEMM-Ascend's ``bhd,bhr->hdr``.
``fp8_einsum`` runs the three ``h``-batched expressions as a batched block-scaled FP8 GEMM; each
operand's scales follow its own dims with the K dim in blocks of ``gran_k`` and the M/N dim in
blocks of the recipe's granularity:
- ``bhr,hdr->bhd``: SFA ``[ceil(B/gm), H, ceil(R/gk)]``, SFB ``[H, ceil(D/gn), ceil(R/gk)]``; B may also be a
  linear layer's 2-D ``[H*D, R]`` weight with SFB ``[H*ceil(D/gn), ceil(R/gk)]`` (vLLM's DeepSeek-V4 ``wo_a``);
- ``bhd,hdr->bhr``: SFA ``[ceil(B/gm), H, ceil(D/gk)]``, SFB ``[H, ceil(D/gk), ceil(R/gn)]``;
- ``bhd,bhr->hdr``: SFA ``[ceil(B/gk), H, ceil(D/gm)]``, SFB ``[ceil(B/gk), H, ceil(R/gn)]``, ``c`` is ``d``.
"""
from __future__ import annotations

import torch

from . import _dispatch, formats
from . import _operands as ops
from . import _validate as v

BF16_EXPRS = ("bmk,bnk->mn", "bhr,hdr->bhd", "bhd,hdr->bhr", "bhd,bhr->hdr")
FP8_EXPRS = ("bhr,hdr->bhd", "bhd,hdr->bhr", "bhd,bhr->hdr")
# For each FP8 expression: how A, B and D map onto a batched (batch, m, k) x (batch, n, k) -> (batch, m, n) GEMM.
_FP8_PERMS = {"bhr,hdr->bhd": ((1, 0, 2), (0, 1, 2), (1, 0, 2)),
              "bhd,hdr->bhr": ((1, 0, 2), (0, 2, 1), (1, 0, 2)),
              "bhd,bhr->hdr": ((1, 2, 0), (1, 2, 0), (0, 1, 2))}


def _sizes(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, a_name="a", b_name="b") -> None:
    """Every letter of ``expr`` has one size across a, b and d (logical sizes of the data)."""
    (sa, sb), sd = expr.split("->")[0].split(","), expr.split("->")[1]
    sizes: dict = {}
    for name, subs, t in ((a_name, sa, a), (b_name, sb, b)):
        if t.dim() != len(subs):
            raise v.fail(name, f"a {len(subs)}-D tensor for '{expr}'", f"shape {tuple(t.shape)}")
        for letter, size in zip(subs, t.shape, strict=True):
            if sizes.setdefault(letter, size) != size:
                raise v.fail(f"{name} dim '{letter}'", f"size {sizes[letter]} (as in the other operand)", size)
    v.shape("d", d, tuple(sizes[x] for x in sd))


def einsum(expr: str, a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None,
           use_cublaslt: bool = False) -> None:
    if expr not in BF16_EXPRS:
        raise v.fail("expr", f"one of {BF16_EXPRS}", repr(expr))
    v.tensor("a", a, (torch.bfloat16,))
    v.tensor("b", b, (torch.bfloat16,))
    v.tensor("d", d, (torch.bfloat16, torch.float32))
    v.boolean("use_cublaslt", use_cublaslt)
    _sizes(expr, a, b, d)
    for name, t in (("a", a), ("b", b), ("d", d)):
        if t.numel() and t.stride(-1) != 1:
            raise v.fail(f"{name}.stride(-1)", "1", t.stride(-1))
    if expr in ("bmk,bnk->mn", "bhd,bhr->hdr"):
        if d.dtype == torch.float32:
            v.accumulator(c, d, must_be_d=True)
        elif c is not None:
            raise v.fail("c", "None with a BF16 d", "a tensor")
    else:
        if c is not None:
            raise v.fail("c", f"None for '{expr}'", "a tensor")
        if d.dtype != torch.bfloat16:
            raise TypeError(f"d: expected dtype torch.bfloat16 for '{expr}', got {d.dtype}")
    device = v.same_device([("a", a), ("b", b), ("d", d), ("c", c)])
    v.output("d", d, ("a", a), ("b", b), ("c", c), in_place=("c",))
    _dispatch.run("bf16_einsum", device, expr, a, b, d, c)


def _grouped_weight(data_b: torch.Tensor, sfb: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A linear layer's 2-D weight ``[H*D, R]`` with scales ``[H*ceil(D/gn), ceil(R/gk)]`` (vLLM's DeepSeek-V4
    ``wo_a``) as the ``[H, D, R]`` / ``[H, ceil(D/gn), ceil(R/gk)]`` operand of ``bhr,hdr->bhd``: views, H taken
    from ``a``'s ``h`` dim."""
    if not isinstance(data_b, torch.Tensor) or data_b.dim() != 2:
        return data_b, sfb
    v.tensor("b[0]", data_b, (formats.FP8_DTYPE,))
    v.tensor("b[1]", sfb, ndim=2)
    for name, t in (("b[0]", data_b), ("b[1]", sfb)):
        if heads == 0 or t.shape[0] % heads:
            raise v.fail(name, f"a first dim divisible by the {heads} heads of a (a 2-D [H*D, R] weight)",
                         f"shape {tuple(t.shape)}")
    return data_b.unflatten(0, (heads, -1)), sfb.unflatten(0, (heads, -1))


def fp8_einsum(expr: str, a, b, d: torch.Tensor, c: torch.Tensor | None = None, recipe=(1, 128, 128)) -> None:
    if expr not in FP8_EXPRS:
        raise v.fail("expr", f"one of {FP8_EXPRS}", repr(expr))
    data_a, sfa = v.pair("a", a)
    data_b, sfb = v.pair("b", b)
    v.tensor("a[0]", data_a, (formats.FP8_DTYPE,), 3)
    if expr == "bhr,hdr->bhd":
        data_b, sfb = _grouped_weight(data_b, sfb, data_a.shape[1])
    v.tensor("b[0]", data_b, (formats.FP8_DTYPE,), 3)
    v.tensor("a[1]", sfa, ndim=3)
    v.tensor("b[1]", sfb, ndim=3)
    v.tensor("d", d, (torch.bfloat16, torch.float32), 3)
    device = v.same_device([("a[0]", data_a), ("a[1]", sfa), ("b[0]", data_b), ("b[1]", sfb), ("d", d),
                            ("c", v.optional_tensor("c", c))])
    _sizes(expr, data_a, data_b, d, "a[0]", "b[0]")
    if d.stride(-1) != 1:
        raise v.fail("d.stride(-1)", "1", d.stride(-1))
    v.accumulator(c, d, must_be_d=expr == "bhd,bhr->hdr")
    if expr == "bhd,bhr->hdr" and (c is None or d.dtype != torch.float32):
        raise v.fail("c/d", "c = d with an FP32 d (accumulation over b)", f"c={'None' if c is None else 'given'}, d {d.dtype}")
    v.output("d", d, ("a[0]", data_a), ("a[1]", sfa), ("b[0]", data_b), ("b[1]", sfb), ("c", c), in_place=("c",))
    pa, pb, pd = _FP8_PERMS[expr]
    op_a = ops.QuantOperand(data_a.permute(pa), None, False, True, 0, 0, 0)
    op_b = ops.QuantOperand(data_b.permute(pb), None, False, True, 0, 0, 0)
    for op in (op_a, op_b):
        op.groups, op.mn, op.k = op.data.shape
    (gm, gka), (gn, gkb) = ops.resolve_recipes(recipe, None, None, sfa, sfb)
    ops.attach_sf("a", op_a, sfa.permute(pa), (gm, gka), False, False)
    ops.attach_sf("b", op_b, sfb.permute(pb), (gn, gkb), False, False)
    d_view = d.permute(pd)
    _dispatch.run("fp8_bmm", device, op_a, op_b, d_view, None if c is None else c.permute(pd))


def tf32_hc_prenorm_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor,
                         num_splits: int | None = None) -> None:
    """``d = float(a) @ b.T`` and ``sqr_sum[m] = sum_k float(a[m, k])^2``; with ``num_splits = s`` both
    are split-K partials ``[s, M, N]`` / ``[s, M]`` (split i covers K columns ``[i*ceil(K/s), ...)``) that
    the caller sums over dim 0. On CPU the products are exact FP32 (TF32 upstream)."""
    v.tensor("a", a, (torch.bfloat16,), 2)
    v.k_major("a", a)
    v.tensor("b", b, (torch.float32,), 2)
    v.k_major("b", b)
    (m, k), (n, k_b) = a.shape, b.shape
    if k != k_b:
        raise v.fail("b", f"K = {k} (the K of a)", f"shape {tuple(b.shape)}")
    if n == 0 or k == 0:
        raise v.fail("b", "non-empty N and K", f"shape {tuple(b.shape)}")
    v.tensor("d", d, (torch.float32,))
    v.tensor("sqr_sum", sqr_sum, (torch.float32,))
    v.contiguous("sqr_sum", sqr_sum)
    if num_splits is None:
        v.shape("d", d, (m, n))
        v.shape("sqr_sum", sqr_sum, (m,))
    else:
        v.integer("num_splits", num_splits, 1)
        v.shape("d", d, (num_splits, m, n))
        v.shape("sqr_sum", sqr_sum, (num_splits, m))
    v.row_major_out("d", d)
    device = v.same_device([("a", a), ("b", b), ("d", d), ("sqr_sum", sqr_sum)])
    v.output("d", d, ("a", a), ("b", b), ("sqr_sum", sqr_sum))
    v.output("sqr_sum", sqr_sum, ("a", a), ("b", b))
    _dispatch.run("hc_prenorm_gemm", device, a, b, d, sqr_sum, num_splits)


def fp8_gemm_nt_skip_head_mid(a, b, d: torch.Tensor, head_splits, recipe=None, compiled_dims: str = "nk",
                              disable_ue8m0_cast: bool = False) -> None:
    """``a @ b.T`` with each head's ``left + right`` output columns placed around a ``mid`` gap.

    D is ``[M, N + N/(left+right)*mid]``; head h's first ``left`` columns go to the start of its
    ``left+mid+right`` slice and the last ``right`` to its end; the ``mid`` columns are not written."""
    from .gemm import OUT_DTYPES
    if not isinstance(head_splits, (tuple, list)) or len(head_splits) != 3:
        raise TypeError(f"head_splits: expected (left, mid, right), got {head_splits!r}")
    left, mid, right = (v.integer(f"head_splits[{i}]", x, 0) for i, x in enumerate(head_splits))
    data_a, sfa = v.pair("a", a)
    data_b, sfb = v.pair("b", b)
    v.tensor("a[0]", data_a, (formats.FP8_DTYPE,))
    v.tensor("b[0]", data_b, (formats.FP8_DTYPE,))
    device = v.same_device([("a[0]", data_a), ("a[1]", sfa), ("b[0]", data_b), ("b[1]", sfb), ("d", v.tensor("d", d))])
    op_a = ops.parse_data("a", data_a, grouped=False)
    op_b = ops.parse_data("b", data_b, grouped=False)
    m, n, k = op_a.mn, op_b.mn, op_a.k
    if op_b.k != k or n == 0 or k == 0:
        raise v.fail("b[0]", f"shape [N > 0, {k}]", f"shape {tuple(data_b.shape)}")
    if left + right == 0 or n % (left + right):
        raise v.fail("head_splits", f"left + right dividing N = {n}", head_splits)
    v.tensor("d", d, ndim=2)
    v.output_dtype("d", d, OUT_DTYPES)
    v.shape("d", d, (m, n + n // (left + right) * mid))
    v.row_major_out("d", d)
    v.output("d", d, ("a[0]", data_a), ("a[1]", sfa), ("b[0]", data_b), ("b[1]", sfb))
    v.compiled_dims(compiled_dims)
    v.boolean("disable_ue8m0_cast", disable_ue8m0_cast)
    gran_a, gran_b = ops.resolve_recipes(recipe, None, None, v.tensor("a[1]", sfa), v.tensor("b[1]", sfb))
    if gran_a[1] != 128 or gran_b[1] != 128:
        raise v.fail("recipe", "gran_k 128", (gran_a, gran_b))
    ops.attach_sf("a", op_a, sfa, gran_a, disable_ue8m0_cast, False)
    ops.attach_sf("b", op_b, sfb, gran_b, disable_ue8m0_cast, False)
    if m == 0:
        return
    full = torch.empty(m, n, dtype=d.dtype, device=d.device)
    _dispatch.run("fp8_fp4_gemm_nt", device, op_a, op_b, full, None, None)
    heads = n // (left + right)
    out = d.view(m, heads, left + mid + right)
    src = full.view(m, heads, left + right)
    out[:, :, :left] = src[:, :, :left]
    out[:, :, left + mid:] = src[:, :, left:]
