"""DeepJIT's Ascend conformance kernels: small TileLang kernels, one construct each, run on the CPU
twin (and on a real Ascend 950) against torch references. ``CASES`` lists them all; ``kernels()``
gives the ``AscendKernelSpec`` entries for ``make ascend-codegen`` and ``make ascend-check``."""
from . import atomics_sync, copies, cube, mixed, simd, simt_casts, simt_ops
from .case import Case, check_outputs, mismatch

CASES: list[Case] = [*copies.CASES, *cube.CASES, *mixed.CASES, *simt_casts.CASES, *simt_ops.CASES, *simd.CASES,
                    *atomics_sync.CASES]
BY_NAME = {c.name: c for c in CASES}
assert len(BY_NAME) == len(CASES), "conformance case names must be unique"


def kernels():
    return [c.spec() for c in CASES]


__all__ = ["BY_NAME", "CASES", "Case", "check_outputs", "kernels", "mismatch"]
