"""tf32_hc_prenorm_gemm entry point; kernel in host/hc_prenorm.cpp."""
from __future__ import annotations

import torch

from deepjit import descriptors

from ._lib import LIB, kernel, threads


def hc_prenorm_gemm(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, sqr_sum: torch.Tensor,
                    num_splits: int | None = None, num_threads: int | None = None) -> None:
    """``d = float(a) @ b.T`` and ``sqr_sum = sum_k float(a)^2`` in FP32; a ``[M, K]`` BF16 and b ``[N, K]``
    FP32 K-major, d ``[M, N]`` / sqr_sum ``[M]`` FP32, or split-K partials ``[s, M, N]`` / ``[s, M]``
    when ``num_splits = s`` (split i covers K ``[i*ceil(K/s), ...)``). d rows may be padded; sqr_sum
    contiguous. Products are exact FP32 (a is BF16)."""
    m, k = a.shape
    if m == 0:
        return
    n = b.size(0)
    splits = 0 if num_splits is None else int(num_splits)
    args = descriptors.pack(descriptors.struct_type(LIB.source("host/hc_prenorm_args.hpp"), "HcPrenormArgs"),
                            a=a, b=b, d=d, sqr=sqr_sum, m=m, n=n, k=k, lda=a.stride(0), ldb=b.stride(0),
                            ldd=d.stride(-2), d_split=d.stride(0) if d.dim() == 3 else 0, splits=splits)
    kernel("dg_hc_prenorm", "host/hc_prenorm.cpp")(descriptors.address(args), threads(num_threads))
