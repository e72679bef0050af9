"""Dense GEMMs: FP8/FP4 block-scaled and BF16, in the four layouts ``nt``, ``nn``, ``tn``, ``tt``.

``D = C + alpha * A @ B.T`` with FP32 accumulation. The suffix names A's and B's layout as the
``nt`` core sees them: ``nn`` passes ``B`` as ``[K, N]``, ``tn`` both as ``[K, M]``/``[K, N]``, ``tt``
only A transposed. Every variant only changes views and calls the ``nt`` core.

Project decisions where NVIDIA DeepGEMM and DeepGEMM-Ascend differ:
- ``c`` may be ``d`` itself (Ascend's only form) or a separate tensor copied first (NVIDIA).
- ``K == 0`` gives ``d = c`` (or zeros without ``c``), NVIDIA's rule; ``M == 0`` or ``N == 0`` does nothing.
- ``alpha`` (Ascend) scales the product; ``epilogue`` accepts only ``None`` on this backend.
"""
from __future__ import annotations

from numbers import Real

import torch

from . import _dispatch
from . import _operands as ops
from . import _validate as v
from .reference import write_output

OUT_DTYPES = (torch.bfloat16, torch.float32)


def _check_alpha_epilogue(alpha, epilogue) -> float | None:
    if epilogue is not None:
        raise v.fail("epilogue", "None (fused epilogues are not available on this backend)", type(epilogue).__name__)
    if alpha is None:
        return None
    if isinstance(alpha, bool) or not isinstance(alpha, Real):
        raise TypeError(f"alpha: expected a real number or None, got {type(alpha).__name__}")
    return float(alpha)


def _early_return(m: int, n: int, k: int, d: torch.Tensor, c: torch.Tensor | None) -> bool:
    """NVIDIA's rules: nothing to do for an empty M or N; ``d = c`` (or 0) for an empty K."""
    if m == 0 or n == 0:
        return True
    if k == 0:
        if c is None:
            d.zero_()
        elif not v.same_storage(c, d):
            d.copy_(c)
        return True
    return False


def _fp8_fp4_gemm(a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, alpha, epilogue) -> None:
    data_a, sfa = v.pair("a", a)
    data_b, sfb = v.pair("b", b)
    device = v.same_device([("a[0]", data_a), ("a[1]", sfa), ("b[0]", data_b), ("b[1]", sfb),
                            ("d", v.tensor("d", d)), ("c", v.optional_tensor("c", c))])
    op_a = ops.parse_data("a", data_a, grouped=False)
    op_b = ops.parse_data("b", data_b, grouped=False)
    v.tensor("d", d, ndim=2)
    v.output_dtype("d", d, OUT_DTYPES)
    if op_a.k != op_b.k:
        raise v.fail("b[0]", f"K = {op_a.k} (the K of a)", f"K = {op_b.k} (shape {tuple(data_b.shape)})")
    v.shape("d", d, (op_a.mn, op_b.mn))
    v.row_major_out("d", d)
    v.accumulator(c, d)
    v.output("d", d, ("a[0]", data_a), ("a[1]", sfa), ("b[0]", data_b), ("b[1]", sfb), ("c", c), in_place=("c",))
    alpha = _check_alpha_epilogue(alpha, epilogue)
    v.compiled_dims(compiled_dims)
    v.boolean("disable_ue8m0_cast", disable_ue8m0_cast)
    gran_a, gran_b = ops.resolve_recipes(recipe, recipe_a, recipe_b, v.tensor("a[1]", sfa), v.tensor("b[1]", sfb))
    ops.attach_sf("a", op_a, sfa, gran_a, disable_ue8m0_cast, op_b.fp4)
    ops.attach_sf("b", op_b, sfb, gran_b, disable_ue8m0_cast, op_a.fp4)
    if _early_return(op_a.mn, op_b.mn, op_a.k, d, c):
        return
    _dispatch.run("fp8_fp4_gemm_nt", device, op_a, op_b, d, c, alpha)


def fp8_fp4_gemm_nt(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor], d: torch.Tensor,
                    c: torch.Tensor | None = None, recipe: tuple[int, int, int] | None = None,
                    recipe_a: tuple[int, int] | None = None, recipe_b: tuple[int, int] | None = None,
                    compiled_dims: str = "nk", disable_ue8m0_cast: bool = False,
                    alpha: float | None = None, epilogue=None) -> None:
    """``d = c + alpha * dequant(a) @ dequant(b).T``; a ``[M, K]``, b ``[N, K]`` (FP8 or packed FP4, any major)."""
    _fp8_fp4_gemm(a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, alpha, epilogue)


def fp8_fp4_gemm_nn(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims: str = "nk",
                    disable_ue8m0_cast: bool = False, alpha=None, epilogue=None) -> None:
    """a ``[M, K]``, b ``[K, N]``."""
    _fp8_fp4_gemm(a, ops.transpose_pair("b", b, 0, 1, 2), d, c, recipe, recipe_a, recipe_b, compiled_dims,
                  disable_ue8m0_cast, alpha, epilogue)


def fp8_fp4_gemm_tn(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims: str = "mn",
                    disable_ue8m0_cast: bool = False, alpha=None, epilogue=None) -> None:
    """a ``[K, M]``, b ``[K, N]``."""
    _fp8_fp4_gemm(ops.transpose_pair("a", a, 0, 1, 2), ops.transpose_pair("b", b, 0, 1, 2), d, c, recipe,
                  recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, alpha, epilogue)


def fp8_fp4_gemm_tt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims: str = "mn",
                    disable_ue8m0_cast: bool = False, alpha=None, epilogue=None) -> None:
    """a ``[K, M]``, b ``[N, K]``."""
    _fp8_fp4_gemm(ops.transpose_pair("a", a, 0, 1, 2), b, d, c, recipe, recipe_a, recipe_b, compiled_dims,
                  disable_ue8m0_cast, alpha, epilogue)


def _check_bf16(a, b, d, c, compiled_dims, alpha, epilogue):
    v.tensor("a", a, (torch.bfloat16,), 2)
    v.tensor("b", b, (torch.bfloat16,), 2)
    v.ab_major("a", a)
    v.ab_major("b", b)
    v.tensor("d", d, ndim=2)
    v.output_dtype("d", d, OUT_DTYPES)
    (m, k), (n, k_b) = a.shape, b.shape
    if k != k_b:
        raise v.fail("b", f"K = {k} (the K of a)", f"shape {tuple(b.shape)}")
    v.shape("d", d, (m, n))
    v.row_major_out("d", d)
    v.accumulator(c, d)
    v.output("d", d, ("a", a), ("b", b), ("c", c), in_place=("c",))
    alpha = _check_alpha_epilogue(alpha, epilogue)
    v.compiled_dims(compiled_dims)
    device = v.same_device([("a", a), ("b", b), ("d", d), ("c", c)])
    return device, alpha, _early_return(m, n, k, d, c)


def _bf16_gemm(a, b, d, c, compiled_dims, alpha, epilogue) -> None:
    device, alpha, done = _check_bf16(a, b, d, c, compiled_dims, alpha, epilogue)
    if not done:
        _dispatch.run("bf16_gemm_nt", device, a, b, d, c, alpha)


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None,
                 compiled_dims: str = "nk", alpha: float | None = None, epilogue=None) -> None:
    """``d = c + alpha * a @ b.T``; a ``[M, K]``, b ``[N, K]`` BF16 (any major); d BF16 or FP32."""
    _bf16_gemm(a, b, d, c, compiled_dims, alpha, epilogue)


def bf16_gemm_nn(a, b, d, c=None, compiled_dims: str = "nk", alpha=None, epilogue=None) -> None:
    _bf16_gemm(a, ops.transpose_tensor("b", b, 0, 1, 2), d, c, compiled_dims, alpha, epilogue)


def bf16_gemm_tn(a, b, d, c=None, compiled_dims: str = "mn", alpha=None, epilogue=None) -> None:
    _bf16_gemm(ops.transpose_tensor("a", a, 0, 1, 2), ops.transpose_tensor("b", b, 0, 1, 2), d, c, compiled_dims,
               alpha, epilogue)


def bf16_gemm_tt(a, b, d, c=None, compiled_dims: str = "mn", alpha=None, epilogue=None) -> None:
    _bf16_gemm(ops.transpose_tensor("a", a, 0, 1, 2), b, d, c, compiled_dims, alpha, epilogue)


def _cublaslt(a, b, d, c) -> None:
    """The baseline: same checks as the BF16 GEMM, computed by torch's own GEMM (cuBLASLt upstream)."""
    _, _, done = _check_bf16(a, b, d, c, "nk", None, None)
    if not done:
        write_output(d, a.float() @ b.float().t(), c, None)


def cublaslt_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None) -> None:
    """Library-baseline GEMM (cuBLASLt upstream; a plain torch GEMM here)."""
    _cublaslt(a, b, d, c)


def cublaslt_gemm_nn(a, b, d, c=None) -> None:
    _cublaslt(a, ops.transpose_tensor("b", b, 0, 1, 2), d, c)


def cublaslt_gemm_tn(a, b, d, c=None) -> None:
    _cublaslt(ops.transpose_tensor("a", a, 0, 1, 2), ops.transpose_tensor("b", b, 0, 1, 2), d, c)


def cublaslt_gemm_tt(a, b, d, c=None) -> None:
    _cublaslt(ops.transpose_tensor("a", a, 0, 1, 2), b, d, c)
