"""``python -m deepjit.tilelang_route.codegen_all --out build/ascend``: lower every registered
TileLang Ascend kernel to AscendC, one folder per kernel (``kernel.asc`` + ``kernel.json``).

Sources of kernels: DeepJIT's samples and each library's ``<import name>.ascend.codegen.kernels()``;
a library without that module is skipped with a note. A lowering error or a kernel whose core
type is not the declared one fails the run (exit status 1) after every kernel was tried. With
``--compile`` and an Ascend toolkit present, each source is also compiled through DeepJIT.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence

from ..disk_cache import makedirs, write_file_sync
from .lowering import AscendKernelSpec, lower

SAMPLES = "deepjit.tilelang_route.samples"
LIBRARY_MODULES = ("deep_gemm.ascend.codegen", "tile_kernels.ascend.codegen", "flash_mla.ascend.codegen",
                   "deep_ep.ascend.codegen")
DEFAULT_ARCH = 3510  # Ascend 950 (dav-3510), TileLang's default target


def load_specs(module_name: str) -> list[AscendKernelSpec] | None:
    """The module's kernels, or None when the module (or its package) does not exist."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return None
        raise
    specs = list(module.kernels())
    for s in specs:
        if not isinstance(s, AscendKernelSpec):
            raise TypeError(f"{module_name}.kernels() must return AscendKernelSpec entries, got {type(s).__name__}")
    return specs


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


def run(out: str, modules: Sequence[str] = (SAMPLES, *LIBRARY_MODULES), only: str | None = None,
        compile_: bool = False, log=print) -> list[dict]:
    """Generates every kernel; raises SystemExit(1) listing the failures after trying them all."""
    results, failures = [], []
    for module_name in modules:
        try:
            specs = load_specs(module_name)
        except Exception as exc:  # noqa: BLE001 - a broken registry module is a failure, reported below
            failures.append(f"{module_name}: import failed: {exc!r}")
            continue
        if specs is None:
            log(f"note: {module_name} not found; skipped")
            continue
        library = library_of(module_name)
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
