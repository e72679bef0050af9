"""Shared by the M-grouped Ascend tests: psum layouts built as ``deep_gemm.grouped`` validates them
(exclusive end rows, group g starting at ``align(end[g-1], alignment)``, group 0 at 0)."""
import torch

from deep_gemm._operands import GroupedRows
from deep_gemm.grouped import _psum_row_groups

SENTINEL = -7.0   # what d holds before the call: rows a kernel must not write keep it


def psum_ends(counts, alignment: int) -> torch.Tensor:
    """int32 end rows of groups of ``counts`` rows each, every group starting at an aligned row."""
    ends, end = [], 0
    for g, count in enumerate(counts):
        start = 0 if g == 0 else -(-end // alignment) * alignment
        end = start + count
        ends.append(end)
    return torch.tensor(ends, dtype=torch.int32)


def psum_rows(counts, alignment: int, m: int) -> GroupedRows:
    """The kernels' canonical form of that layout over ``m`` rows."""
    row_group, layout = _psum_row_groups(psum_ends(counts, alignment), m, alignment, "end_rows")
    return GroupedRows(row_group, layout, True, alignment)
