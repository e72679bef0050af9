"""Running a TileLang Ascend kernel on deepjit's Ascend CPU twin.

``run_on_twin(prim_func, *tensors)`` lowers the PrimFunc with TileLang for the Ascend target, reads
the launch's block count from the lowered device function (its ``thread_extent``), compiles the
AscendC source on the twin (cached like every deepjit kernel, prefix ``TL_ASCEND``) and launches it
with the CPU tensors as global memory; outputs land in the tensors. Returns the launch's counters.
"""
from __future__ import annotations

import threading

from ..errors import DeepJITError
from ..runtime import Runtime
from . import dims
from .hook import route_config
from .lowering import LoweredKernel, bracket_api_includes, entry_point, kernel_kind

_lock = threading.Lock()
_runtime: Runtime | None = None
_lowered: dict = {}  # structural hash of a PrimFunc -> (LoweredKernel, block count)


def twin_runtime() -> Runtime:
    """The twin runtime TileLang kernels compile through (created on first use)."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = Runtime(route_config(), "ascend_twin")
        return _runtime


def _block_count(artifact, entry: str, places: dims.ShapeVars) -> int | str:
    """The launch's block count: an int, or a formula in the symbolic dimensions (``dims.grid_formula``)."""
    for gv, fn in artifact.device_mod.functions.items():
        if gv.name_hint != entry:
            continue
        extent = (fn.attrs or {}).get("thread_extent", {})
        return dims.grid_formula([extent[a] for a in ("blockIdx.x", "blockIdx.y", "blockIdx.z") if a in extent], places)
    raise DeepJITError(f"TileLang's device module has no function {entry}")


def lower_with_grid(func) -> tuple[LoweredKernel, int | str]:
    """TileLang's Ascend lowering plus the launch's block count (an int, or a formula in the symbolic
    dimensions: ``dims.num_blocks``)."""
    import tilelang
    from tvm.target import Target

    with Target("ascend"):
        artifact = tilelang.lower(func, target="ascend")
    if not artifact.kernel_source:
        raise DeepJITError("TileLang produced no AscendC source")
    source = bracket_api_includes(artifact.kernel_source)
    entry = entry_point(source)
    grid = _block_count(artifact, entry, dims.shape_vars(func))
    return LoweredKernel(source=source, entry=entry, kind=kernel_kind(source)), grid


# TileLang FP4 buffer dtype -> the torch dtype holding it.
PACKED_FP4 = {"float4_e2m1fn": "float4_e2m1fn_x2"}


# (name, shape: an int per static extent, the name of a symbolic one, dtype as torch names it) per tensor;
# a scalar parameter (``eps: T.float32``) has shape None and its TIR dtype.
TensorSpecs = tuple[tuple[str, tuple | None, str], ...]


def tensor_specs(func) -> TensorSpecs:
    """What each parameter of the PrimFunc must be, in parameter order (packed FP4 as torch holds it:
    half the last extent, the x2 dtype; scalars with shape None)."""
    specs = []
    for p in func.params:
        buf = func.buffer_map.get(p)
        if buf is None:
            specs.append((p.name, None, str(p.dtype)))
            continue
        shape = tuple(int(s.value) if hasattr(s, "value") else str(s) for s in buf.shape)
        dtype = str(buf.dtype)
        if dtype in PACKED_FP4 and isinstance(shape[-1], int):  # two elements per byte: torch's x2 dtype
            dtype, shape = PACKED_FP4[dtype], (*shape[:-1], shape[-1] // 2)
        specs.append((buf.name, shape, dtype))
    return tuple(specs)


def _check_scalar(name: str, dtype: str, value, kernel: str) -> None:
    """A scalar parameter takes a plain Python number of its kind (an int for an integer dtype)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{kernel}: scalar {name}: expected a Python number ({dtype}), got {type(value).__name__}")
    if dtype.startswith(("int", "uint")) and not isinstance(value, int):
        raise TypeError(f"{kernel}: scalar {name}: expected an int ({dtype}), got {value!r}")


def check_tensors(specs: TensorSpecs, tensors, kernel: str) -> None:
    """``tensors`` match ``specs``: count, rank, every static extent, dtype, contiguity (the kernel addresses
    them from these; a smaller tensor would be read or written out of bounds). A symbolic extent takes any
    size (``dims.bind`` checks that the tensors sharing it agree); a scalar parameter takes a number."""
    import torch

    if len(tensors) != len(specs):
        what = "tensors" if all(shape is not None for _, shape, _ in specs) else "arguments"
        raise TypeError(f"{kernel}: expected {len(specs)} {what} ({', '.join(n for n, _, _ in specs)}), "
                        f"got {len(tensors)} arguments")
    for (name, shape, dtype), t in zip(specs, tensors, strict=True):
        if shape is None:
            _check_scalar(name, dtype, t, kernel)
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{kernel}: tensor {name}: expected a torch.Tensor, got {type(t).__name__}")
        if len(t.shape) != len(shape) or any(isinstance(s, int) and s != g for s, g in zip(shape, t.shape, strict=False)):
            raise ValueError(f"{kernel}: tensor {name}: expected shape {shape}, got {tuple(t.shape)}")
        got = str(t.dtype).removeprefix("torch.")
        if dtype != got:
            raise ValueError(f"{kernel}: tensor {name}: expected dtype {dtype}, got {got}")
        if not t.is_contiguous():
            raise ValueError(f"{kernel}: tensor {name}: expected a contiguous tensor, got strides {tuple(t.stride())}")


def _check_tensors(func, tensors) -> None:
    kernel = str(func.attrs["global_symbol"]) if func.attrs else "kernel"
    specs = tensor_specs(func)
    check_tensors(specs, tensors, kernel)
    for (name, shape, _), t, param in zip(specs, tensors, func.params, strict=True):
        if shape is not None and t.device.type != "cpu":
            raise ValueError(f"tensor {name}: expected a CPU tensor (the twin runs on CPU tensors), got device {t.device}")
        # A T.StridedTensor's constant strides address the tensor as they say: the (contiguous) tensor's
        # must be the same (its symbolic strides are read off the tensor by dims.bind).
        buf = func.buffer_map[param] if shape is not None else None
        per_torch_element = 2 if buf is not None and str(buf.dtype) in PACKED_FP4 else 1
        for d, stride in enumerate(buf.strides if buf is not None else ()):
            if not hasattr(stride, "value"):
                continue
            want = int(stride.value) if d == len(buf.strides) - 1 else int(stride.value) // per_torch_element
            if want != t.stride(d):
                raise ValueError(f"{kernel}: tensor {name}: expected stride {d} of {want} elements, got {t.stride(d)}")


def kernel_param_names(prim_func) -> tuple[str, ...]:
    """The name each PrimFunc parameter carries in the lowered kernel, in the PrimFunc's order: a tensor's
    data variable (``T.view(X, ...)`` bound to ``x_gm`` renames X's data to ``x_gm``, and TileLang names the
    kernel parameter after it), a scalar's own name."""
    return tuple(prim_func.buffer_map[p].data.name if p in prim_func.buffer_map else p.name
                 for p in prim_func.params)


def kernel_arguments(prim_func, source: str, tensors, values: dict[str, int]) -> list:
    """``tensors`` (in the PrimFunc's parameter order) in the lowered kernel's parameter order."""
    return arguments_by_name(kernel_param_names(prim_func), source, tensors, values)


def arguments_by_name(names, source: str, tensors, values: dict[str, int] | None = None) -> list:
    """``tensors`` named ``names`` (the PrimFunc's parameter order, as ``kernel_param_names`` names them) in
    the lowered kernel's parameter order, with the symbolic dimensions' ``values`` (``dims.bind``) where the
    kernel takes them. Binding is by name only: TileLang orders the kernel's parameters its own way
    (a view-renamed X and W came out as ``..., w_gm, x_gm``), so position says nothing."""
    from ..backends.ascend_twin.source import parse_entry

    if len(set(names)) != len(names):
        raise DeepJITError(f"PrimFunc parameters share a kernel name ({', '.join(names)}): cannot bind by name")
    by_name = dict(zip(names, tensors, strict=True))
    values = values or {}
    params = parse_entry(source).params
    out = []
    for param in params:
        if param.name in by_name:
            out.append(by_name[param.name])
        elif param.name in values:
            out.append(values[param.name])
        else:
            raise DeepJITError(f"kernel parameter {param.name} ({param.type}) is neither a parameter of the PrimFunc "
                               f"({', '.join(by_name)}) nor a symbolic dimension of one")
    # A PrimFunc parameter with no kernel parameter is one the body never uses: TileLang drops it from the
    # entry, so it is not passed (it is still checked against its spec by the caller).
    return out


def lowered_with_grid(prim_func) -> tuple[LoweredKernel, int | str]:
    """``lower_with_grid`` memoised per process by the PrimFunc's structure (lowering takes seconds)."""
    import tvm

    key = tvm.ir.structural_hash(prim_func)
    found = _lowered.get(key)
    if found is None or not tvm.ir.structural_equal(found[0], prim_func):
        found = _lowered[key] = (prim_func, *lower_with_grid(prim_func))
    return found[1], found[2]


def run_on_twin(prim_func, *tensors, runtime: Runtime | None = None):
    """Lowers ``prim_func``, runs it on the twin with ``tensors`` (CPU tensors as global memory, plain
    numbers for scalar parameters, in the PrimFunc's parameter order) and returns the launch's
    ``LaunchCounters``; inside ``timeline.recording()`` (or with ``DJ_TWIN_TIMELINE=1``) its ``estimate()``
    and ``last_estimate()`` give the per-pipe timeline estimate."""
    from ..backends.ascend_twin import AscendLaunchOptions

    _check_tensors(prim_func, tensors)
    lowered, grid = lowered_with_grid(prim_func)
    values = dims.bind(dims.shape_vars(prim_func), tensors)
    runtime = runtime or twin_runtime()
    kernel = runtime.compile(lowered.entry, lowered.source)
    options = AscendLaunchOptions(num_blocks=dims.num_blocks(grid, values))
    return runtime.launch(kernel, options, *kernel_arguments(prim_func, lowered.source, tensors, values))
