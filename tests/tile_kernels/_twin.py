"""Which cases of a parametrised grid also run on the Ascend twin: the twin simulates every core, so a grid
that crosses a kernel's flags runs there only on the cases that cover each flag value once."""
import itertools

import pytest


def twin_subset(grid, on_twin, why: str) -> list:
    """The cases of ``grid`` (an iterable of tuples), those not in ``on_twin`` marked
    ``backends("host", "reference", why=why)``."""
    off = pytest.mark.backends("host", "reference", why=why)
    grid = [tuple(c) for c in grid]
    on_twin = {tuple(c) for c in on_twin}
    assert on_twin <= set(grid), f"twin cases not in the grid: {on_twin - set(grid)}"
    return [case if case in on_twin else pytest.param(*case, marks=off) for case in grid]


def product(*axes) -> list:
    return list(itertools.product(*axes))
