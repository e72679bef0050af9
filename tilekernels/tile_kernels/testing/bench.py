"""Benchmark helpers kept from upstream's API (the suite's timing lives in tests/testkit)."""
from __future__ import annotations

import math

from .numeric import count_bytes

_SHORT = {"num_ep_ranks": "ep", "num_experts": "experts", "use_tma_aligned_col_major_sf": "col",
          "use_packed_ue8m0": "ue8m0", "round_sf": "round"}


def dtype_to_str(dtype) -> str:
    import torch
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float8_e4m3fn: "e4m3", torch.int8: "e2m1"}.get(dtype, str(dtype))


def make_param_key(params: dict) -> str:
    return ",".join(f"{_SHORT.get(k, k)}={v}" for k, v in params.items() if v is not None)


def make_param_id(params: dict) -> str:
    return "-".join(f"{k}={dtype_to_str(v) if not isinstance(v, (int, float, str, bool)) else v}" for k, v in params.items())


def print_average_perf(values: list[float]) -> float:
    """Geometric mean of positive values (printed and returned)."""
    vals = [v for v in values if v > 0]
    g = math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else 0.0
    print(f"geometric mean: {g:.4f}")
    return g


__all__ = ["count_bytes", "dtype_to_str", "make_param_key", "make_param_id", "print_average_perf"]
