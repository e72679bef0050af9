"""``python -m deepjit.tilelang_route.codegen_all --out build/ascend``: lower every registered
TileLang Ascend kernel to AscendC, one folder per kernel (``kernel.asc`` + ``kernel.json``).

Sources of kernels: DeepJIT's samples and every installed package's entry point in the
``deepjit.ascend_kernels`` group (``[project.entry-points."deepjit.ascend_kernels"]`` in its
pyproject.toml: a callable returning ``AscendKernelSpec`` entries, e.g. its backend table's
``ascend_kernels``). Modules named explicitly (``modules=``) provide ``kernels()``; a missing one
is skipped with a note. A lowering error or a kernel whose core
type is not the declared one fails the run (exit status 1) after every kernel was tried. With
``--compile`` and an Ascend toolkit present, each source is also compiled through DeepJIT.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence

from ..disk_cache import makedirs, write_file_sync
from .lowering import AscendKernelSpec, lower

SAMPLES = "deepjit.tilelang_route.samples"
ENTRY_POINT_GROUP = "deepjit.ascend_kernels"
DEFAULT_ARCH = 3510  # Ascend 950 (dav-3510), TileLang's default target


def load_specs(module_name: str) -> list[AscendKernelSpec] | None:
    """The module's kernels, or None when the module (or its package) does not exist."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return None
        raise
    return _checked(f"{module_name}.kernels()", module.kernels())


def _checked(what: str, specs) -> list[AscendKernelSpec]:
    specs = list(specs)
    for s in specs:
        if not isinstance(s, AscendKernelSpec):
            raise TypeError(f"{what} must return AscendKernelSpec entries, got {type(s).__name__}")
    return specs


def registered() -> list[importlib.metadata.EntryPoint]:
    """The installed packages' kernel registries, by library name."""
    return sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _sources(modules: Sequence[str] | None) -> list[tuple[str, str, object]]:
    """(library, label, loader) for each registry; a loader returns the specs or None (missing)."""
    if modules is not None:
        return [(library_of(m), m, lambda m=m: load_specs(m)) for m in modules]
    sources = [("deepjit", SAMPLES, lambda: load_specs(SAMPLES))]
    for ep in registered():
        sources.append((ep.name, f"{ep.name} ({ep.value})", lambda ep=ep: _checked(ep.value, ep.load()())))
    return sources


def library_of(module_name: str) -> str:
    return "deepjit" if module_name == SAMPLES else module_name.split(".")[0]


def generate(spec: AscendKernelSpec, library: str, out: str) -> dict:
    lowered = lower(spec.build())
    if lowered.kind != spec.kind:
        raise RuntimeError(f"{library}.{spec.name}: lowered to a {lowered.kind} kernel, declared {spec.kind}")
    folder = os.path.join(out, f"{library}.{spec.name}")
    makedirs(folder)
    write_file_sync(os.path.join(folder, "kernel.asc"), lowered.source)
    info = {"library": library, "name": spec.name, "entry": lowered.entry, "kind": lowered.kind,
            "source": "kernel.asc"}
    write_file_sync(os.path.join(folder, "kernel.json"), json.dumps(info, indent=1) + "\n")
    return {**info, "folder": folder, "lowered": lowered}


def run(out: str, modules: Sequence[str] | None = None, only: str | None = None, compile_: bool = False,
        log=print) -> list[dict]:
    """Generates every kernel (``modules`` None: the samples and every registered entry point);
    raises SystemExit(1) listing the failures after trying them all."""
    results, failures = [], []
    for library, label, loader in _sources(modules):
        try:
            specs = loader()
        except Exception as exc:  # noqa: BLE001 - a broken registry is a failure, reported below
            failures.append(f"{label}: import failed: {exc!r}")
            continue
        if specs is None:
            log(f"note: {label} not found; skipped")
            continue
        for spec in specs:
            if only and only not in f"{library}.{spec.name}":
                continue
            start = time.perf_counter()
            try:
                result = generate(spec, library, out)
                if compile_:
                    result["artifact"] = _compile(result["lowered"].source)
            except Exception as exc:  # noqa: BLE001 - collect, then fail loudly
                failures.append(f"{library}.{spec.name}: {exc}\n{traceback.format_exc()}")
                log(f"FAIL {library}.{spec.name}: {exc}")
                continue
            results.append(result)
            log(f"ok   {library}.{spec.name}: {result['kind']} kernel {result['entry']} "
                f"({(time.perf_counter() - start) * 1e3:.0f} ms) -> {result['folder']}")
    if failures:
        log(f"{len(failures)} Ascend kernel(s) failed:\n" + "\n".join(failures))
        raise SystemExit(1)
    return results


def _compile(source: str) -> str:
    from .hook import compile_ascendc
    return compile_ascendc(source, DEFAULT_ARCH)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join("build", "ascend"), help="output folder")
    parser.add_argument("--only", help="only kernels whose '<library>.<name>' contains this text")
    parser.add_argument("--compile", action="store_true",
                        help="also compile each source through DeepJIT's Ascend toolchain (needs bisheng)")
    args = parser.parse_args(argv)
    results = run(args.out, only=args.only, compile_=args.compile)
    print(f"{len(results)} Ascend kernel(s) lowered into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
