"""Symbolic dimensions of TileLang Ascend kernels (``T.dynamic``): one lowering serves every size.

TileLang passes each symbolic dimension of a tensor as a scalar kernel parameter of the same name
and may size the grid by it (``T.Kernel(T.ceildiv(n, 64))``). At lowering, ``shape_vars`` records
where each one sits among the PrimFunc's tensors and ``grid_formula`` writes a dynamic block count as
a formula in them; at launch (no TVM import), ``bind`` reads their values off the tensors' shapes and
``num_blocks`` evaluates the formula.
"""
from __future__ import annotations

import ast
import math
import operator

from ..errors import DeepJITError

# name -> ((parameter index, dimension), ...): every place the symbolic dimension sits; a dimension
# -1 - d stands for the stride of dimension d (a ``T.StridedTensor`` stride, in elements)
ShapeVars = tuple[tuple[str, tuple[tuple[int, int], ...]], ...]

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}
_CALLS = {"min": min, "max": max}


def shape_vars(prim_func) -> ShapeVars:
    """The PrimFunc's symbolic tensor dimensions and strides; one that is an expression (``2 * n``) is refused."""
    import tilelang  # noqa: F401 - makes its bundled tvm importable
    from tvm import tirx

    found: dict[str, list[tuple[int, int]]] = {}
    for i, param in enumerate(prim_func.params):
        buf = prim_func.buffer_map.get(param)
        for d, extent in enumerate(buf.shape if buf is not None else ()):
            if isinstance(extent, tirx.Var):
                found.setdefault(extent.name, []).append((i, d))
            elif not isinstance(extent, tirx.IntImm):
                raise DeepJITError(f"tensor {buf.name}: dimension {d} is {extent}; only constants and plain "
                                   f"symbolic dimensions (T.dynamic) are supported")
        for d, stride in enumerate(buf.strides if buf is not None else ()):
            if isinstance(stride, tirx.Var):
                if str(buf.dtype).startswith("float4"):  # torch holds two per element: its strides differ
                    raise DeepJITError(f"tensor {buf.name}: symbolic strides of a packed FP4 tensor are not supported")
                found.setdefault(stride.name, []).append((i, -1 - d))
            elif not isinstance(stride, tirx.IntImm) and not _is_compact(buf, d, stride):
                raise DeepJITError(f"tensor {buf.name}: stride {d} is {stride}; only constants, plain symbolic "
                                   f"strides (T.dynamic) and the compact stride of a symbolic shape are supported")
    return tuple((name, tuple(places)) for name, places in found.items())


def _is_compact(buf, d: int, stride) -> bool:
    """``stride`` is the contiguous stride of dimension ``d`` (TileLang writes ``32 * n`` for a tensor of
    shape (.., n, 32)); such a stride follows from the shape, so nothing needs binding."""
    from tvm import arith, tirx

    compact = tirx.IntImm(stride.dtype, 1)
    for extent in buf.shape[d + 1:]:
        compact = compact * tirx.Cast(stride.dtype, extent)
    return arith.Analyzer().can_prove_equal(stride, compact)


def grid_formula(extents, places: ShapeVars) -> int | str:
    """The block count: an int, or a formula in the symbolic dimensions ``places`` names (checked here)."""
    static = [int(e.value) for e in extents if hasattr(e, "value")]
    if len(static) == len(extents):
        return math.prod(static)
    formula = " * ".join(f"({e})" for e in extents)
    _evaluate(formula, {name: 1 for name, _ in places})  # refuses what ``num_blocks`` could not evaluate
    return formula


def bind(places: ShapeVars, tensors) -> dict[str, int]:
    """Each symbolic dimension's value from ``tensors`` (the PrimFunc's parameter order): a shape, or for a
    stride place, the tensor's stride in elements; tensors that share a dimension must agree on it."""
    values: dict[str, int] = {}
    for name, where in places:
        seen = [(i, d, int(tensors[i].shape[d] if d >= 0 else tensors[i].stride(-1 - d))) for i, d in where]
        if len({v for _, _, v in seen}) > 1:
            raise ValueError(f"symbolic dimension {name}: expected one size across the tensors, got "
                             + ", ".join(f"argument {i} dim {d} = {v}" for i, d, v in seen))
        values[name] = seen[0][2]
    return values


def num_blocks(grid: int | str, values: dict[str, int]) -> int:
    """The launch's block count from ``grid_formula``'s result and the bound dimensions."""
    if isinstance(grid, int):
        return grid
    return int(_evaluate(grid, values))


def _evaluate(formula: str, values: dict[str, int]) -> int:
    """Integer arithmetic (``+ - * // %``, ``T.min``/``T.max``) over names and literals, nothing else."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in values:
            return values[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CALLS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "T" and not node.keywords):
            return _CALLS[node.func.attr](*(ev(a) for a in node.args))
        raise DeepJITError(f"unsupported block count formula {formula!r} (at {ast.dump(node)[:60]})")

    try:
        return ev(ast.parse(formula, mode="eval"))
    except SyntaxError as exc:
        raise DeepJITError(f"unsupported block count formula {formula!r}: {exc}") from None
    except ZeroDivisionError:
        raise DeepJITError(f"block count formula {formula!r} divides by zero at {values}") from None
