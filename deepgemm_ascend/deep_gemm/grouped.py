"""M-grouped GEMMs for MoE: contiguous (``m_indices`` or psum layout) and masked.

Contiguous: A ``[M, K]`` holds every group's rows back to back, each group padded to
``get_mk_alignment_for_contiguous_layout()``; B is ``[G, N, K]`` (``nt``) or ``[G, K, N]`` (``nn``).
The ``grouped_layout`` says which rows belong to which group:
- ``use_psum_layout=False`` (NVIDIA default): int32 ``[M]``, the group of each row, -1 for padding;
  as upstream's kernels, each alignment block is computed with the group of its first row.
- ``use_psum_layout=None`` (default): the path's default, True on the Ascend path (NPU tensors or
  ``DG_BACKEND=ascend``, as DeepGEMM-Ascend defaults to it), False on the host kernels (NVIDIA's).
- ``use_psum_layout=True`` (DeepGEMM-Ascend's required form): int32 ``[G]``. By default
  (``set_psum_layout_form("end_rows")``) entry g is the exclusive end row of group g, which starts
  at ``align(end[g-1], alignment)`` (group 0 at 0) -- NVIDIA upstream's and DeepEP's convention.
  With ``set_psum_layout_form("counts")`` (or ``DG_PSUM_LAYOUT_FORM=counts``) entry g is the
  row count of group g, the official Ascend binding's wording, placed the same way.
Padding rows of D are written as zero with ``ensure_zero_padding`` (the default), else left untouched.

Masked: A ``[G, M_max, K]``, D ``[G, M_max, N]``; only rows below ``masked_m[g]`` are computed,
the others keep what they held.
"""
from __future__ import annotations

import torch

from . import _dispatch, _lib, runtime
from . import _operands as ops
from . import _validate as v
from .utils.math import align


def _psum_row_groups(layout: torch.Tensor, m: int, alignment: int, form: str):
    """(row groups, exclusive end rows) of a psum layout in either form."""
    values = layout.tolist()
    row_group = torch.full((m,), -1, dtype=torch.int64, device=layout.device)
    ends, end = [], 0
    for g, value in enumerate(values):
        start = 0 if g == 0 else align(end, alignment)
        if form == "counts":
            if value < 0:
                raise v.fail(f"grouped_layout[{g}]", "a row count >= 0 (psum form 'counts')", value)
            new_end = start + value
        else:
            new_end = value
            if new_end < start:
                raise v.fail(f"grouped_layout[{g}]", f"an end row >= {start} (the aligned end of group {g - 1}; "
                             "psum form 'end_rows')", value)
        if new_end > m:
            raise v.fail(f"grouped_layout[{g}]", f"group {g} to end within M = {m} rows", f"end row {new_end}")
        row_group[start:new_end] = g
        end = new_end
        ends.append(end)
    return row_group, torch.tensor(ends, dtype=torch.int32, device=layout.device)


def _psum_row_groups_on_device(layout: torch.Tensor, m: int, alignment: int, form: str):
    """``_psum_row_groups`` without reading a value on the host (the Ascend path: no sync, graph capture
    stays possible); the values are validated only with ``DG_ASCEND_CHECKS=1`` (the Ascend kernels read
    the end rows themselves and clamp them to ``[0, M]``)."""
    values = layout.to(torch.int64)
    if form == "counts":   # end[g] = align(end[g-1]) + count[g]: a scan over the G groups, on the device
        ends, end = [], torch.zeros((), dtype=torch.int64, device=layout.device)
        for g in range(values.numel()):
            end = (0 if g == 0 else (end + alignment - 1) // alignment * alignment) + values[g]
            ends.append(end)
        values = torch.stack(ends) if ends else values
    rows = torch.arange(m, device=layout.device)
    if values.numel() == 0:
        return torch.full((m,), -1, dtype=torch.int64, device=layout.device), values.to(torch.int32)
    starts = torch.cat([values.new_zeros(1), (values[:-1] + alignment - 1) // alignment * alignment])
    group = torch.searchsorted(values, rows, right=True)   # the first group ending after the row
    inside = (group < values.numel()) & (rows >= starts[group.clamp(max=values.numel() - 1)])
    return torch.where(inside, group, -1), values.to(torch.int32)


def _indexed_row_groups(layout: torch.Tensor, m: int, num_groups: int, alignment: int,
                        compute_padding: bool, check: bool = True) -> torch.Tensor:
    """Row groups of ``m_indices`` as upstream's kernels see them: a block of ``alignment`` rows (the last
    one may be partial: M need not be a multiple) is one tile, computed with the group of its first row for
    every row it holds (a row labelled with another group too), or not at all when that row is -1. With
    ``compute_padding`` the -1 rows of a computed tile are computed as well (upstream's tests compare all
    of D), else they are padding. ``check`` (a host read of the layout) validates the group ids; the Ascend
    path skips it outside the debug mode, its kernel computing no tile whose group id is out of range."""
    row_group = layout.to(torch.int64)
    if check and m and (int(row_group.min()) < -1 or int(row_group.max()) >= num_groups):
        raise v.fail("grouped_layout", f"group ids in [-1, {num_groups})",
                     f"values in [{int(row_group.min())}, {int(row_group.max())}]")
    blocks = torch.nn.functional.pad(row_group, (0, (-m) % alignment), value=-1).view(-1, alignment)
    tile_group = blocks[:, :1].expand_as(blocks)
    if not compute_padding:
        tile_group = torch.where(blocks >= 0, tile_group, -1)
    return tile_group.flatten()[:m].contiguous()


def _layout_or_m_indices(grouped_layout, m_indices):
    """``m_indices``: older DeepGEMM's name for the ``grouped_layout`` of the contiguous forms (SGLang's
    warm-up still passes it by keyword)."""
    if m_indices is None:
        if grouped_layout is None:
            raise TypeError("grouped_layout: expected a tensor (or the older keyword m_indices), got None")
        return grouped_layout
    if grouped_layout is not None:
        raise v.fail("m_indices", "None with grouped_layout given (they name the same argument; pass one)", "a tensor",
                     TypeError)
    return m_indices


def _row_groups(grouped_layout, m: int, num_groups: int, use_psum_layout: bool | None,
                expected_m_for_psum_layout, ensure_zero_padding: bool) -> ops.GroupedRows:
    v.tensor("grouped_layout", grouped_layout, (torch.int32,), 1)
    v.contiguous("grouped_layout", grouped_layout)
    use_psum_layout = runtime.resolve_use_psum_layout(use_psum_layout, grouped_layout.device)
    alignment = runtime.mk_alignment_for(grouped_layout.device)
    if use_psum_layout:
        v.shape("grouped_layout", grouped_layout, (num_groups,))
        if expected_m_for_psum_layout is not None:
            v.integer("expected_m_for_psum_layout", expected_m_for_psum_layout, 1)
        form = runtime.get_psum_layout_form()
        if _lib.on_ascend(grouped_layout.device):
            if ops.may_read_values(grouped_layout.device):  # DG_ASCEND_CHECKS=1: validate (one host read)
                _psum_row_groups(grouped_layout, m, alignment, form)
            if form == "end_rows":   # the kernels read the caller's end rows: no op unless row_group is read
                return ops.GroupedRows.lazy(
                    lambda: _psum_row_groups_on_device(grouped_layout, m, alignment, form)[0], grouped_layout, True,
                    alignment)
            row_group, ends = _psum_row_groups_on_device(grouped_layout, m, alignment, form)
        else:
            row_group, ends = _psum_row_groups(grouped_layout, m, alignment, form)
        return ops.GroupedRows(row_group, ends, True, alignment)
    if grouped_layout.shape[0] != m and grouped_layout.shape[0] == num_groups:
        # Per-group end rows without use_psum_layout (LMDeploy's DeepSeek-V4 MoE): upstream asserts the layout
        # has M entries in this mode; say which flag reads a [G] layout instead of guessing the caller's intent.
        raise v.fail("grouped_layout", f"shape ({m},) (a group id per row; a [G] layout of end rows needs "
                     "use_psum_layout=True)", tuple(grouped_layout.shape))
    v.shape("grouped_layout", grouped_layout, (m,))
    if expected_m_for_psum_layout is not None:
        raise v.fail("expected_m_for_psum_layout", "None without use_psum_layout", expected_m_for_psum_layout)
    row_group = _indexed_row_groups(grouped_layout, m, num_groups, alignment, not ensure_zero_padding,
                                    ops.may_read_values(grouped_layout.device))
    return ops.GroupedRows(row_group, row_group.to(torch.int32), False, alignment)


def _check_grouped_d(d, m: int, n: int, num_groups: int, k: int) -> None:
    v.tensor("d", d, (torch.bfloat16,), 2)
    v.shape("d", d, (m, n))
    v.row_major_out("d", d)
    if n == 0 or k == 0 or num_groups == 0:
        raise v.fail("b[0]", "non-empty N, K and group count", f"G = {num_groups}, N = {n}, K = {k}")


def _m_grouped_fp8_fp4(a, b, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast,
                       use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout, epilogue) -> None:
    data_a, sfa = v.pair("a", a)
    data_b, sfb = v.pair("b", b)
    op_a = ops.parse_data("a", data_a, grouped=False, require_k_major=True)
    op_b = ops.parse_data("b", data_b, grouped=True)
    if op_a.k != op_b.k:
        raise v.fail("b[0]", f"K = {op_a.k} (the K of a)", f"K = {op_b.k} (shape {tuple(data_b.shape)})")
    _check_grouped_d(d, op_a.mn, op_b.mn, op_b.groups, op_b.k)
    v.compiled_dims(compiled_dims)
    v.boolean("disable_ue8m0_cast", disable_ue8m0_cast)
    v.boolean("ensure_zero_padding", ensure_zero_padding)
    if epilogue is not None:
        raise v.fail("epilogue", "None (fused epilogues are not available on this backend)", type(epilogue).__name__)
    device = v.same_device([("a[0]", data_a), ("a[1]", v.tensor("a[1]", sfa)), ("b[0]", data_b),
                            ("b[1]", v.tensor("b[1]", sfb)), ("d", d),
                            ("grouped_layout", v.tensor("grouped_layout", grouped_layout))])
    v.output("d", d, ("a[0]", data_a), ("a[1]", sfa), ("b[0]", data_b), ("b[1]", sfb), ("grouped_layout", grouped_layout))
    rows = _row_groups(grouped_layout, op_a.mn, op_b.groups, use_psum_layout, expected_m_for_psum_layout,
                       ensure_zero_padding)
    gran_a, gran_b = ops.resolve_recipes(recipe, recipe_a, recipe_b, sfa, sfb)
    ops.attach_sf("a", op_a, sfa, gran_a, disable_ue8m0_cast, op_b.fp4, valid_mn=lambda: rows.row_group >= 0)
    ops.attach_sf("b", op_b, sfb, gran_b, disable_ue8m0_cast, op_a.fp4)
    if op_a.mn == 0:
        return
    _dispatch.run("m_grouped_fp8_fp4_gemm_nt", device, op_a, op_b, d, rows, ensure_zero_padding)


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d: torch.Tensor, grouped_layout: torch.Tensor | None = None, recipe=None,
                                         recipe_a=None, recipe_b=None, compiled_dims: str = "nk",
                                         disable_ue8m0_cast: bool = False, use_psum_layout: bool | None = None,
                                         ensure_zero_padding: bool = True,
                                         expected_m_for_psum_layout: int | None = None, epilogue=None, *,
                                         m_indices: torch.Tensor | None = None) -> None:
    """``d[rows of g] = a[rows of g] @ b[g].T`` with B ``[G, N, K]`` (see the module docstring)."""
    grouped_layout = _layout_or_m_indices(grouped_layout, m_indices)
    _m_grouped_fp8_fp4(a, b, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast,
                       use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout, epilogue)


def m_grouped_fp8_fp4_gemm_nn_contiguous(a, b, d: torch.Tensor, grouped_layout: torch.Tensor | None = None, recipe=None,
                                         recipe_a=None, recipe_b=None, compiled_dims: str = "nk",
                                         disable_ue8m0_cast: bool = False, use_psum_layout: bool | None = None,
                                         ensure_zero_padding: bool = True,
                                         expected_m_for_psum_layout: int | None = None, epilogue=None, *,
                                         m_indices: torch.Tensor | None = None) -> None:
    """As the ``nt`` form with B ``[G, K, N]``."""
    grouped_layout = _layout_or_m_indices(grouped_layout, m_indices)
    _m_grouped_fp8_fp4(a, ops.transpose_pair("b", b, 1, 2, 3), d, grouped_layout, recipe, recipe_a, recipe_b,
                       compiled_dims, disable_ue8m0_cast, use_psum_layout, ensure_zero_padding,
                       expected_m_for_psum_layout, epilogue)


def _m_grouped_bf16(a, b, d, grouped_layout, compiled_dims, use_psum_layout, ensure_zero_padding,
                    expected_m_for_psum_layout) -> None:
    v.tensor("a", a, (torch.bfloat16,), 2)
    v.k_major("a", a)
    v.tensor("b", b, (torch.bfloat16,), 3)
    v.ab_major("b", b)
    (m, k), (num_groups, n, k_b) = a.shape, b.shape
    if k != k_b:
        raise v.fail("b", f"K = {k} (the K of a)", f"shape {tuple(b.shape)}")
    _check_grouped_d(d, m, n, num_groups, k)
    v.compiled_dims(compiled_dims)
    v.boolean("ensure_zero_padding", ensure_zero_padding)
    device = v.same_device([("a", a), ("b", b), ("d", d), ("grouped_layout", v.tensor("grouped_layout", grouped_layout))])
    v.output("d", d, ("a", a), ("b", b), ("grouped_layout", grouped_layout))
    rows = _row_groups(grouped_layout, m, num_groups, use_psum_layout, expected_m_for_psum_layout, ensure_zero_padding)
    if m == 0:
        return
    _dispatch.run("m_grouped_bf16_gemm_nt", device, a, b, d, rows, ensure_zero_padding)


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: torch.Tensor | None = None, compiled_dims: str = "nk",
                                      use_psum_layout: bool | None = None, ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: int | None = None, *,
                                      m_indices: torch.Tensor | None = None) -> None:
    grouped_layout = _layout_or_m_indices(grouped_layout, m_indices)
    _m_grouped_bf16(a, b, d, grouped_layout, compiled_dims, use_psum_layout, ensure_zero_padding,
                    expected_m_for_psum_layout)


def m_grouped_bf16_gemm_nn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      grouped_layout: torch.Tensor | None = None, compiled_dims: str = "nk",
                                      use_psum_layout: bool | None = None, ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: int | None = None, *,
                                      m_indices: torch.Tensor | None = None) -> None:
    grouped_layout = _layout_or_m_indices(grouped_layout, m_indices)
    _m_grouped_bf16(a, ops.transpose_tensor("b", b, 1, 2, 3), d, grouped_layout, compiled_dims, use_psum_layout,
                    ensure_zero_padding, expected_m_for_psum_layout)


# ---- masked ---------------------------------------------------------------------------------------
def _check_masked(masked_m, expected_m, num_groups: int, m: int, n: int, k: int, d) -> torch.Tensor:
    v.tensor("d", d, (torch.bfloat16,), 3)
    v.shape("d", d, (num_groups, m, n))
    v.row_major_out("d", d)
    v.tensor("masked_m", masked_m, (torch.int32,), 1)
    v.contiguous("masked_m", masked_m)
    v.shape("masked_m", masked_m, (num_groups,))
    v.integer("expected_m", expected_m, 1)
    if min(num_groups, m, n, k) <= 0:
        raise v.fail("a/b shapes", "non-empty G, M, N and K", f"G = {num_groups}, M = {m}, N = {n}, K = {k}")
    # a value check reads the device tensor: the Ascend path runs it only with DG_ASCEND_CHECKS=1 (the
    # Ascend kernels clamp to [0, M])
    if ops.may_read_values(masked_m.device) and bool(((masked_m < 0) | (masked_m > m)).any()):
        raise v.fail("masked_m", f"values in [0, {m}] (M of a)", masked_m.tolist())
    return masked_m


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d: torch.Tensor, masked_m: torch.Tensor, expected_m: int, recipe=None,
                                     recipe_a=None, recipe_b=None, compiled_dims: str = "nk",
                                     disable_ue8m0_cast: bool = False) -> None:
    """``d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g].T``; A ``[G, M, K]``, B ``[G, N, K]`` K-major."""
    data_a, sfa = v.pair("a", a)
    data_b, sfb = v.pair("b", b)
    op_a = ops.parse_data("a", data_a, grouped=True, require_k_major=True)
    op_b = ops.parse_data("b", data_b, grouped=True, require_k_major=True)
    if op_a.groups != op_b.groups or op_a.k != op_b.k:
        raise v.fail("b[0]", f"G = {op_a.groups}, K = {op_a.k} (as a)", f"G = {op_b.groups}, K = {op_b.k}")
    device = v.same_device([("a[0]", data_a), ("a[1]", v.tensor("a[1]", sfa)), ("b[0]", data_b),
                            ("b[1]", v.tensor("b[1]", sfb)), ("d", v.tensor("d", d)),
                            ("masked_m", v.tensor("masked_m", masked_m))])
    _check_masked(masked_m, expected_m, op_a.groups, op_a.mn, op_b.mn, op_a.k, d)
    v.output("d", d, ("a[0]", data_a), ("a[1]", sfa), ("b[0]", data_b), ("b[1]", sfb), ("masked_m", masked_m))
    v.compiled_dims(compiled_dims)
    v.boolean("disable_ue8m0_cast", disable_ue8m0_cast)
    gran_a, gran_b = ops.resolve_recipes(recipe, recipe_a, recipe_b, sfa, sfb)
    ops.attach_sf("a", op_a, sfa, gran_a, disable_ue8m0_cast, op_b.fp4,
                  valid_mn=lambda: torch.arange(op_a.mn, device=device)[None, :] < masked_m[:, None])
    ops.attach_sf("b", op_b, sfb, gran_b, disable_ue8m0_cast, op_a.fp4)
    _dispatch.run("m_grouped_fp8_fp4_gemm_nt_masked", device, op_a, op_b, d, masked_m)


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int, compiled_dims: str = "nk") -> None:
    v.tensor("a", a, (torch.bfloat16,), 3)
    v.k_major("a", a)
    v.tensor("b", b, (torch.bfloat16,), 3)
    v.k_major("b", b)
    (num_groups, m, k), (g_b, n, k_b) = a.shape, b.shape
    if g_b != num_groups or k_b != k:
        raise v.fail("b", f"G = {num_groups}, K = {k} (as a)", f"shape {tuple(b.shape)}")
    device = v.same_device([("a", a), ("b", b), ("d", v.tensor("d", d)), ("masked_m", v.tensor("masked_m", masked_m))])
    _check_masked(masked_m, expected_m, num_groups, m, n, k, d)
    v.output("d", d, ("a", a), ("b", b), ("masked_m", masked_m))
    v.compiled_dims(compiled_dims)
    _dispatch.run("m_grouped_bf16_gemm_nt_masked", device, a, b, d, masked_m)
