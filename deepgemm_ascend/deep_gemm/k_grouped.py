"""K-grouped GEMMs (MoE weight gradients): ``d[g] = c[g] + A_g.T @ B_g`` over each group's K rows.

A is ``[sum_K, M]``, B ``[sum_K, N]`` (MN-major, contiguous), D and C FP32 ``[G, M, N]``; ``c`` is
required and may be ``d``. Group g's K rows (``use_psum_layout=None``, the default, takes the path's:
True on the Ascend path -- NPU tensors or ``DG_BACKEND=ascend`` -- as DeepGEMM-Ascend, else False):
- ``use_psum_layout=False``: ``ks_cpu[g]`` rows each (a multiple of the mk alignment), back to back;
  ``grouped_layout`` equals ``ks_cpu`` as an int32 tensor.
- ``use_psum_layout=True``: ``grouped_layout[g]`` is the exclusive end row of group g, which starts at
  ``align(end[g-1], alignment)``; ``ks_cpu`` may be ``None`` or ``[]``.
FP8 scale factors are per channel and per group: ``ceil(k_g / gran_k)`` rows of ``[.., M|N]`` per
non-empty group, back to back (FP32 or float8_e8m0fnu), or int32 words packing 4 K-blocks of the
same group (``ceil(k_g / (4 * gran_k))`` rows per group).

Default recipe: ``(1, 1, 128)`` (NVIDIA); DeepGEMM-Ascend's default ``(1, 1, 32)`` is passed explicitly.
"""
from __future__ import annotations

import torch

from . import _dispatch, _lib, formats, runtime
from . import _operands as ops
from . import _validate as v
from .utils.math import align, ceil_div


def _exclusive_sums(values) -> list[int]:
    out, acc = [], 0
    for x in values:
        out.append(acc)
        acc += x
    return out


def _psum_groups_on_device(grouped_layout: torch.Tensor, sum_k: int, alignment: int) -> ops.KGroups:
    """The psum groups as device tensors, without a host read (the Ascend path): starts are clamped into
    ``[0, sum_K]`` (a negative end would start the next group before row 0) and ends into ``[start, sum_K]``,
    as the kernel clamps its table, so no group reaches outside K; the values are checked (one host sync)
    only with ``DG_ASCEND_CHECKS=1``."""
    ends = grouped_layout.to(torch.int64)
    starts = torch.cat([ends.new_zeros(min(1, ends.numel())), (ends[:-1] + alignment - 1) // alignment * alignment])
    if _lib.LIB.env.get_int("ASCEND_CHECKS", 0):
        bad = ((ends < starts) | (ends > sum_k)).nonzero()
        if bad.numel():
            g = int(bad[0, 0])
            raise v.fail(f"grouped_layout[{g}]", f"an end offset in [{int(starts[g])}, {sum_k}]", int(ends[g]))
    starts = starts.clamp(min=0, max=sum_k)
    return ops.KGroups(ends.clamp(max=sum_k).maximum(starts) - starts, starts, starts.new_zeros(0), alignment)


def _groups(ks_cpu, grouped_layout, num_groups: int, sum_k: int, use_psum_layout: bool | None) -> ops.KGroups:
    v.tensor("grouped_layout", grouped_layout, (torch.int32,), 1)
    v.contiguous("grouped_layout", grouped_layout)
    v.shape("grouped_layout", grouped_layout, (num_groups,))
    use_psum_layout = runtime.resolve_use_psum_layout(use_psum_layout, grouped_layout.device)
    alignment = runtime.mk_alignment_for(grouped_layout.device)
    if alignment % 32:
        raise v.fail("mk alignment for contiguous layout", "a multiple of 32 for K-grouped GEMMs", alignment)
    if ks_cpu is not None and not isinstance(ks_cpu, (list, tuple)):
        raise TypeError(f"ks_cpu: expected a list of ints or None, got {type(ks_cpu).__name__}")
    have_ks = bool(ks_cpu)
    if have_ks:
        if len(ks_cpu) != num_groups:
            raise v.fail("ks_cpu", f"{num_groups} entries (one per group of d)", f"{len(ks_cpu)} entries")
        for g, k in enumerate(ks_cpu):
            v.integer(f"ks_cpu[{g}]", k, 0)
            if k % alignment:
                raise v.fail(f"ks_cpu[{g}]", f"a multiple of the mk alignment {alignment}", k)
        if sum(ks_cpu) != sum_k:
            raise v.fail("ks_cpu", f"a sum equal to the K rows of a ({sum_k})", f"sum {sum(ks_cpu)}")
    elif not use_psum_layout:
        raise v.fail("ks_cpu", "the per-group K sizes (only the psum layout may omit them)", ks_cpu)
    if not use_psum_layout and _lib.on_ascend(grouped_layout.device):
        if _lib.LIB.env.get_int("ASCEND_CHECKS", 0) and grouped_layout.tolist() != list(ks_cpu):
            raise v.fail("grouped_layout", f"the values of ks_cpu {list(ks_cpu)}", grouped_layout.tolist())
        return ops.KGroups(list(ks_cpu), _exclusive_sums(ks_cpu), [])  # grouped_layout equals ks_cpu by contract
    if use_psum_layout and _lib.on_ascend(grouped_layout.device):
        return _psum_groups_on_device(grouped_layout, sum_k, alignment)
    values = grouped_layout.tolist()
    if not use_psum_layout:
        if values != list(ks_cpu):
            raise v.fail("grouped_layout", f"the values of ks_cpu {list(ks_cpu)}", values)
        starts, ks = _exclusive_sums(ks_cpu), list(ks_cpu)
    else:
        starts, ks, end = [], [], 0
        for g, e in enumerate(values):
            start = 0 if g == 0 else align(end, alignment)
            if e < start or e > sum_k:
                raise v.fail(f"grouped_layout[{g}]", f"an end offset in [{start}, {sum_k}]", e)
            starts.append(start)
            ks.append(e - start)
            end = e
    return ops.KGroups(ks, starts, [])


def _sf_rows(name: str, sf, groups: ops.KGroups, mn: int, gran_k: int, sum_k: int) -> torch.Tensor:
    """Per-group per-channel scales to FP32 ``[sum_g ceil(k_g/gran_k), mn]``; records ``sf_starts``."""
    v.tensor(name, sf, (torch.float32, torch.float8_e8m0fnu, torch.int32), 2)
    if not groups.on_host:
        return _sf_rows_on_device(name, sf, groups, mn, gran_k, sum_k)
    blocks = [ceil_div(k, gran_k) for k in groups.ks]
    if sf.dtype == torch.int32:
        words = [ceil_div(b, 4) for b in blocks]
        v.shape(name, sf, (sum(words), mn))
        parts, row = [], 0
        for w, b in zip(words, blocks, strict=True):
            part = formats.unpack_ue8m0(sf[row:row + w].t()).view(mn, w, 4)     # [mn, w, 4] K-blocks per word
            parts.append(part.flatten(1)[:, :b].t())
            row += w
        out = torch.cat(parts) if parts else torch.empty(0, mn, device=sf.device)
    else:
        v.shape(name, sf, (sum(blocks), mn))
        out = formats.unpack_ue8m0(sf) if sf.dtype == torch.float8_e8m0fnu else sf.float()
        if sf.dtype == torch.float32 and gran_k == 32 and out.numel() and not bool(formats.is_power_of_two(out).all()):
            raise v.fail(f"{name} values", "positive powers of two for gran_k 32 (UE8M0)",
                         out[~formats.is_power_of_two(out)][0].item())
    starts, acc = [], 0
    for b in blocks:
        starts.append(acc)
        acc += b
    groups.sf_starts = starts
    return out


def _sf_rows_on_device(name: str, sf, groups: ops.KGroups, mn: int, gran_k: int, sum_k: int) -> torch.Tensor:
    """``_sf_rows`` for device groups: the row count is checked against its bounds from the shapes (the
    exact count only with ``DG_ASCEND_CHECKS=1``); int32 words unpack in place, so group g's K-blocks are
    the FP32 rows from 4 x its first word."""
    ks, _, _ = groups.tensors(sf.device)
    blocks = (ks + gran_k - 1) // gran_k
    per_row = 4 if sf.dtype == torch.int32 else 1
    rows = (blocks + per_row - 1) // per_row
    if sf.dim() != 2 or sf.size(1) != mn or sf.size(0) > ceil_div(sum_k, gran_k * per_row) + ks.numel():
        raise v.fail(name, f"shape [S, {mn}] with S <= ceil(sum_K / {gran_k * per_row}) + G (per-group rows)",
                     tuple(sf.shape))
    if _lib.LIB.env.get_int("ASCEND_CHECKS", 0) and int(rows.sum()) != sf.size(0):
        raise v.fail(name, f"{int(rows.sum())} rows (the groups' scale rows)", f"shape {tuple(sf.shape)}")
    groups.sf_starts = (torch.cumsum(rows, 0) - rows) * per_row
    if sf.dtype == torch.int32:
        return formats.unpack_ue8m0(sf.t()).t()
    return formats.unpack_ue8m0(sf) if sf.dtype == torch.float8_e8m0fnu else sf.float()


def _check_common(a_data, b_data, d, c, num_groups_hint=None):
    v.tensor("d", d, (torch.float32,), 3)
    v.contiguous("d", d)
    num_groups, m, n = d.shape
    if c is None:
        raise v.fail("c", "an FP32 accumulator of d's shape (it may be d itself)", None)
    v.tensor("c", c, (torch.float32,), 3)
    v.shape("c", c, d.shape)
    v.contiguous("c", c)
    v.contiguous("a", a_data)
    v.contiguous("b", b_data)
    if a_data.dim() != 2 or a_data.size(1) != m:
        raise v.fail("a", f"shape [sum_K, {m}] (M from d)", tuple(a_data.shape))
    if b_data.dim() != 2 or b_data.size(1) != n or b_data.size(0) != a_data.size(0):
        raise v.fail("b", f"shape [{a_data.size(0)}, {n}] (sum_K from a, N from d)", tuple(b_data.shape))
    v.output("d", d, ("a", a_data), ("b", b_data), ("c", c), in_place=("c",))
    return num_groups, m, n, a_data.size(0)


def _early_return(m, n, sum_k, d, c) -> bool:
    if m == 0 or n == 0:
        return True
    if not v.same_storage(c, d):
        d.copy_(c)
    return sum_k == 0


def k_grouped_fp8_gemm_tn_contiguous(a, b, d: torch.Tensor, ks_cpu: list[int] | None, grouped_layout: torch.Tensor,
                                     c: torch.Tensor | None = None, recipe=(1, 1, 128), compiled_dims: str = "mn",
                                     use_psum_layout: bool | None = None) -> None:
    """FP8 K-grouped GEMM, A ``[sum_K, M]`` and B ``[sum_K, N]`` MN-major (see the module docstring)."""
    data_a, sfa = v.pair("a", a)
    data_b, sfb = v.pair("b", b)
    v.tensor("a[0]", data_a, (formats.FP8_DTYPE,))
    v.tensor("b[0]", data_b, (formats.FP8_DTYPE,))
    if not isinstance(recipe, (tuple, list)) or len(recipe) != 3 or tuple(recipe[:2]) != (1, 1) \
            or recipe[2] not in ops.GRAN_K_CHOICES:
        raise v.fail("recipe", "(1, 1, 32) or (1, 1, 128)", recipe)
    gran_k = recipe[2]
    v.tensor("d", d)
    num_groups, m, n, sum_k = _check_common(data_a, data_b, d, c)
    v.compiled_dims(compiled_dims)
    device = v.same_device([("a[0]", data_a), ("a[1]", v.tensor("a[1]", sfa)), ("b[0]", data_b),
                            ("b[1]", v.tensor("b[1]", sfb)), ("d", d), ("c", c),
                            ("grouped_layout", v.tensor("grouped_layout", grouped_layout))])
    groups = _groups(ks_cpu, grouped_layout, num_groups, sum_k, use_psum_layout)
    sfa32 = _sf_rows("a[1]", sfa, groups, m, gran_k, sum_k)
    sfb32 = _sf_rows("b[1]", sfb, groups, n, gran_k, sum_k)
    if _early_return(m, n, sum_k, d, c):
        return
    _dispatch.run("k_grouped_fp8_gemm_tn", device, data_a, sfa32, data_b, sfb32, d, d, groups, gran_k)


def k_grouped_fp8_gemm_nt_contiguous(a, b, d: torch.Tensor, ks_cpu: list[int] | None, grouped_layout: torch.Tensor,
                                     c: torch.Tensor | None = None, recipe=(1, 1, 128), compiled_dims: str = "mn",
                                     use_psum_layout: bool | None = None) -> None:
    """The SM90 form (upstream keeps it without a warning): re-lays the operands out and forwards to the ``tn`` form.

    Accepts NVIDIA's layout -- A/B flattened with each group's block K-major (``[M, k_g]`` row-major,
    ``numel == sum_K * M``) and scale factors passed transposed (``sf.T``, ``[M, sum_sf_k]``) -- or
    DeepGEMM-Ascend's 2-D ``[M, sum_K]`` operands, transposed as a whole."""
    data_a, sfa = v.pair("a", a)
    data_b, sfb = v.pair("b", b)
    v.tensor("d", d, (torch.float32,), 3)
    num_groups, m, n = d.shape
    if use_psum_layout or not ks_cpu:
        raise v.fail("ks_cpu/use_psum_layout", "explicit ks_cpu without the psum layout (nt form)",
                     f"ks_cpu={ks_cpu!r}, use_psum_layout={use_psum_layout!r}")
    ks = list(ks_cpu)
    sum_k = sum(k for k in ks if isinstance(k, int))

    def to_tn(name, data, sf, mn):
        v.tensor(f"{name}[0]", data, (formats.FP8_DTYPE,))
        v.tensor(f"{name}[1]", sf, ndim=2)
        if data.dim() == 2 and tuple(data.shape) == (mn, sum_k):
            return data.t().contiguous(), sf.t()
        if data.numel() != sum_k * mn:
            raise v.fail(f"{name}[0]", f"{sum_k * mn} elements (sum_K * {mn}) or shape [{mn}, {sum_k}]",
                         f"shape {tuple(data.shape)}")
        v.contiguous(f"{name}[0]", data)
        flat, parts, offset = data.reshape(-1), [], 0
        for k in ks:
            parts.append(flat[offset * mn:(offset + k) * mn].view(mn, k).t())
            offset += k
        return torch.cat(parts).contiguous() if parts else flat.view(0, mn), sf.t()

    a_tn = to_tn("a", data_a, sfa, m)
    b_tn = to_tn("b", data_b, sfb, n)
    k_grouped_fp8_gemm_tn_contiguous(a_tn, b_tn, d, ks_cpu, grouped_layout, c, recipe, compiled_dims, False)


def k_grouped_bf16_gemm_tn_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, ks_cpu: list[int] | None,
                                      grouped_layout: torch.Tensor, c: torch.Tensor | None = None,
                                      compiled_dims: str = "mn", use_psum_layout: bool | None = None) -> None:
    v.tensor("a", a, (torch.bfloat16,))
    v.tensor("b", b, (torch.bfloat16,))
    v.tensor("d", d)
    num_groups, m, n, sum_k = _check_common(a, b, d, c)
    v.compiled_dims(compiled_dims)
    device = v.same_device([("a", a), ("b", b), ("d", d), ("c", c),
                            ("grouped_layout", v.tensor("grouped_layout", grouped_layout))])
    groups = _groups(ks_cpu, grouped_layout, num_groups, sum_k, use_psum_layout)
    if _early_return(m, n, sum_k, d, c):
        return
    _dispatch.run("k_grouped_bf16_gemm_tn", device, a, b, d, d, groups)
