"""Helpers shared by the tests of every package: numerics, multi-process launcher, benchmarks."""
from .distributed import RankFailure, free_port, run_ranks
from .numerics import assert_bitwise_equal, calc_diff, generator, randint, randn

__all__ = ["RankFailure", "assert_bitwise_equal", "calc_diff", "free_port", "generator", "randint", "randn",
           "run_ranks"]
