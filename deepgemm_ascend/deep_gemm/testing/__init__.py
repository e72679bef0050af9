"""Test and benchmark helpers with upstream's names (``deep_gemm.testing``)."""
from . import generators, numeric, utils
from .bench import bench, bench_kineto, get_arch_major, ignore_env, suppress_stdout_stderr, test_filter
from .numeric import assert_bitwise_equal, calc_diff, count_bytes

__all__ = ["assert_bitwise_equal", "bench", "bench_kineto", "calc_diff", "count_bytes", "generators",
           "get_arch_major", "ignore_env", "numeric", "suppress_stdout_stderr", "test_filter", "utils"]
