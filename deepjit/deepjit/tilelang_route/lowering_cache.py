"""A disk cache of TileLang Ascend lowerings: a process whose kernels are all cached never imports TileLang.

``cached_lowering(builder, *args)`` answers what lowering ``builder(*args)`` (a function returning a
PrimFunc, usually ``functools.cache``d per static shape) gives: the AscendC source, the global symbol,
the block count (or its formula in the symbolic dimensions), the tensor parameter names and where the
symbolic dimensions sit among them (``dims``). Importing TileLang and TVM takes ~11 s and a lowering
~3 s, paid by every process (every spawned rank) even when the compiled kernel is in deepjit's cache.

The key hashes the builder's module and qualified name, ``repr(args)``, the text of every ``.py`` file
of the builder's top-level package (conservative: builders import helpers from sibling folders, so any
edit in the package invalidates), TileLang's installed version and this route's own lowering code.
Entries live beside compiled kernels (``DJ_JIT_CACHE_DIR``) as ``tilelang_lowering.<digest>/``, with
the SHA-256 of each file in ``meta.json``; an entry that fails them is set aside and lowered again.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import sys
import warnings
from dataclasses import dataclass

from ..disk_cache import DIGESTS_KEY, DiskCache, artifact_digests, verify, write_file_sync
from ..env import Env
from ..errors import DeepJITError
from . import dims

TAG = "tilelang_lowering"
_SOURCE, _RECORD = "kernel.cpp", "lowering.json"
_OWN_CODE = ("lowering_cache.py", "lowering.py", "twin.py", "dims.py")  # what decides the stored lowering, besides TileLang


@dataclass(frozen=True)
class CachedLowering:
    symbol: str  # the PrimFunc's global_symbol, the kernel's name
    source: str  # AscendC
    grid: int | str  # block count of the launch, or its formula in the symbolic dimensions (dims.num_blocks)
    params: tuple[str, ...]  # the PrimFunc's tensor names in parameter order
    dims: dims.ShapeVars = ()  # where each symbolic dimension sits among those tensors
    specs: tuple = ()  # each tensor's shape and dtype (twin.tensor_specs), checked at every launch


def _tilelang_version() -> str:
    try:
        return importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _package_files(builder) -> list[tuple[str, str]]:
    """(name in the package, path) of every ``.py`` file of the builder's top-level package (only its module
    file when it is not in a package)."""
    module = sys.modules.get(getattr(builder, "__module__", None) or "")
    top = sys.modules.get(module.__name__.partition(".")[0]) if module is not None else None
    if top is None or not getattr(module, "__file__", None):
        raise DeepJITError(f"cached_lowering: builder {builder!r} must be a function of an imported module with a file")
    if not hasattr(top, "__path__"):
        return [(os.path.basename(module.__file__), module.__file__)]
    files = []
    for root in sorted(top.__path__):
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            files.extend((os.path.relpath(os.path.join(dirpath, n), root), os.path.join(dirpath, n))
                         for n in sorted(filenames) if n.endswith(".py"))
    return files


def lowering_key(builder, args: tuple) -> str:
    """The cache key of ``builder(*args)``'s lowering (see the module docstring)."""
    h = hashlib.sha256()

    def part(data) -> None:
        data = data.encode() if isinstance(data, str) else data
        h.update(len(data).to_bytes(8, "little") + data)

    part(f"{builder.__module__}:{builder.__qualname__}")
    part(repr(tuple(args)))
    part(_tilelang_version())
    here = os.path.dirname(os.path.abspath(__file__))
    for name, path in [(f"deepjit:{n}", os.path.join(here, n)) for n in _OWN_CODE] + _package_files(builder):
        part(name)
        with open(path, "rb") as f:
            part(f.read())
    return h.hexdigest()[:32]


def _lower(prim_func) -> CachedLowering:
    """TileLang's lowering of ``prim_func`` (imports TileLang)."""
    from .twin import kernel_param_names, lower_with_grid, tensor_specs

    missing = [str(p) for p in prim_func.params if p not in prim_func.buffer_map]
    if missing:
        raise DeepJITError(f"cached_lowering: scalar kernel parameters ({', '.join(missing)}) are not supported")
    lowered, grid = lower_with_grid(prim_func)
    return CachedLowering(str(prim_func.attrs["global_symbol"]), lowered.source, grid,
                          kernel_param_names(prim_func), dims.shape_vars(prim_func),
                          tensor_specs(prim_func))


def _read(path: str) -> CachedLowering:
    with open(os.path.join(path, _RECORD)) as f:
        record = json.load(f)
    with open(os.path.join(path, _SOURCE)) as f:
        source = f.read()
    grid = record["grid"]
    places = tuple((name, tuple((int(i), int(d)) for i, d in where)) for name, where in record.get("dims", ()))
    specs = tuple((name, tuple(shape), dtype) for name, shape, dtype in record["specs"])
    return CachedLowering(record["symbol"], source, grid if isinstance(grid, str) else int(grid),
                          tuple(record["params"]), places, specs)


def cached_lowering(builder, *args, disk_cache: DiskCache | None = None) -> CachedLowering:
    """The lowering of ``builder(*args)`` from the disk cache, or lowered (``builder`` called) and stored.

    ``args`` must be hashable values whose ``repr`` names them fully (ints, floats, strings, tuples,
    frozen dataclasses). ``disk_cache`` defaults to ``DJ_JIT_CACHE_DIR``'s."""
    if not callable(builder):
        raise TypeError(f"builder: expected a callable (cached_lowering), got {type(builder).__name__}")
    disk_cache = disk_cache or DiskCache.from_env(Env("DJ"))
    key = lowering_key(builder, args)
    entry = disk_cache.entry(TAG, key)
    if entry.is_hit:
        problem = verify(entry.final_path)
        if problem is None:
            try:
                return _read(entry.final_path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                problem = f"cannot be read ({type(exc).__name__}: {exc})"
        aside = disk_cache.set_aside(entry.final_path)
        warnings.warn(f"deepjit: cached TileLang lowering {entry.final_path} {problem}; "
                      f"{'moved it to ' + aside if aside else 'it stays (read-only root)'} and lowering again",
                      RuntimeWarning, stacklevel=2)
        entry = disk_cache.entry(TAG, key, rebuild=True)
    try:
        lowered = _lower(builder(*args))
        write_file_sync(os.path.join(entry.tmp_path, _SOURCE), lowered.source)
        write_file_sync(os.path.join(entry.tmp_path, _RECORD), json.dumps(
            {"symbol": lowered.symbol, "grid": lowered.grid, "params": list(lowered.params),
             "dims": [[name, [list(p) for p in where]] for name, where in lowered.dims],
             "specs": [[name, list(shape), dtype] for name, shape, dtype in lowered.specs]}))
        meta = {"builder": f"{builder.__module__}:{builder.__qualname__}", "args": repr(tuple(args)),
                "tilelang": _tilelang_version(), DIGESTS_KEY: artifact_digests(entry.tmp_path)}
        write_file_sync(os.path.join(entry.tmp_path, "meta.json"), json.dumps(meta, separators=(",", ":")))
        entry.commit()
    finally:
        entry.abandon()
    return lowered
