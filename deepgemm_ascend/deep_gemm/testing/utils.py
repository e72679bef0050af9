"""Upstream's ``deep_gemm.testing.utils`` module path: the test-selection helpers (they live in ``bench``)."""
from .bench import get_arch_major, ignore_env, test_filter

__all__ = ["get_arch_major", "test_filter", "ignore_env"]
