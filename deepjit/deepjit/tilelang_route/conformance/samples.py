"""DeepJIT's three TileLang samples (tilelang_route.samples) at small shapes, with torch references,
so ``make ascend-check`` runs them on the twin like the conformance kernels."""
import torch

from .. import samples
from .case import Case
from .cube import GEMM_TOL, _mm
from .data import randn, sentinel


def _gemm_inputs(m, n, k):
    return lambda g: [randn(g, (m, k), torch.bfloat16), randn(g, (n, k), torch.bfloat16),
                      sentinel((m, n), torch.float32)]


CASES = [
    Case("vector_add", "vector", lambda: samples.vector_add(n=4096, tile=256, num_blocks=4, threads=64),
         lambda g: [randn(g, (4096,)), randn(g, (4096,)), sentinel((4096,), torch.float32)],
         lambda a, b, c: {2: a + b}, "sample: SIMT add, pipelined UB tiles"),
    Case("gemm_nt", "cube", lambda: samples.gemm_nt(128, 128, 128, 64, 64, 64), _gemm_inputs(128, 128, 128),
         lambda a, b, c: {2: _mm(a, b.T)}, "sample: cube GEMM", **GEMM_TOL),
    Case("gemm_nt_relu", "mix", lambda: samples.gemm_nt_relu(128, 128, 128, 64, 64, 64), _gemm_inputs(128, 128, 128),
         lambda a, b, c: {2: torch.relu(_mm(a, b.T))}, "sample: mixed GEMM + ReLU", **GEMM_TOL),
]
