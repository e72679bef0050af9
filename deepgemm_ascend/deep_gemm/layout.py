"""Scale-factor layouts: NVIDIA's TMA-aligned MN-major FP32 / int32-packed forms, Ascend's int16 pairs.

Kernel-ready forms (``MN`` rows, ``SK`` K-blocks):
- FP32 MN-major TMA-aligned: shape ``[B?, MN, SK]``, strides ``(align(MN,4)*SK, 1, align(MN,4))``.
- int32 packed UE8M0 (NVIDIA SM100): ``[B?, MN, ceil(SK/4)]`` with the same MN-major TMA-aligned
  strides; 4 K-blocks per word, little-endian, padding bytes 0.
- int16 packed UE8M0 (Ascend): ``[B?, MN, ceil(K/64)]`` MN-major, ``stride(-1) == MN`` (no padding);
  2 K-blocks of 32 per word.

``transform_sf_into_required_layout`` on CPU follows SM100 (FP32 -> int32 form; with
``disable_ue8m0_cast`` the SM90 FP32 forms), keeps int16 input in the Ascend form, and on NPU
tensors produces the Ascend form. Every GEMM of this library accepts any of these forms (and plain
FP32), so the transform is only needed for parity with callers that pre-transform.
"""
from __future__ import annotations

import torch

from . import _dispatch, _lib, formats, runtime
from . import _validate as v
from .utils.math import align, ceil_div


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """``x`` rounded up so ``x * element_size`` is a multiple of 16 bytes."""
    v.integer("x", x, 0)
    v.integer("element_size", element_size, 1, 16)
    if 16 % element_size:
        raise v.fail("element_size", "a divisor of 16", element_size)
    return align(x, 16 // element_size)


def _mn_major_empty(batch: int | None, mn: int, sk: int, dtype, device, aligned_mn: int) -> torch.Tensor:
    lead = () if batch is None else (batch,)
    storage = torch.zeros(lead + (sk, aligned_mn), dtype=dtype, device=device)
    return storage.transpose(-1, -2)[..., :mn, :]


def _is_mn_major_tma(t: torch.Tensor) -> bool:
    mn, sk = t.size(-2), t.size(-1)
    aligned = get_tma_aligned_size(mn, t.element_size())
    ok = (t.stride(-2) == 1 or mn == 1) and t.stride(-1) == aligned
    if t.dim() == 3:
        ok = ok and t.stride(0) == aligned * sk
    return ok


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor) -> torch.Tensor:
    """FP32 ``[B?, MN, SK]`` with the same values, MN-major and TMA-aligned (the input if it already is)."""
    v.tensor("sf", sf, (torch.float32,), (2, 3))
    if _is_mn_major_tma(sf):
        return sf
    batch = sf.size(0) if sf.dim() == 3 else None
    out = _mn_major_empty(batch, sf.size(-2), sf.size(-1), torch.float32, sf.device, get_tma_aligned_size(sf.size(-2), 4))
    _dispatch.run("sf_copy", sf.device, sf, out, 1)
    return out


def _aligned_starts(ends: torch.Tensor, alignment: int) -> torch.Tensor:
    """int64 ``[G]``: group g of a psum layout starts at the aligned end of group g - 1 (group 0 at 0)."""
    ends = ends.to(torch.int64)
    return torch.cat([ends.new_zeros(min(1, ends.numel())), (ends[:-1] + alignment - 1) // alignment * alignment])


def _in_ranges(starts: torch.Tensor, ends: torch.Tensor, size: int) -> torch.Tensor:
    """bool ``[size]``: index i lies in some ``[starts[g], ends[g])`` (tensor ops only: no host read)."""
    i = torch.arange(size, device=starts.device)
    return ((i >= starts[:, None]) & (i < ends[:, None])).any(0)


def _psum_valid_rows(psum_layout: torch.Tensor, mn: int) -> torch.Tensor:
    starts = _aligned_starts(psum_layout, runtime.get_mk_alignment_for_contiguous_layout())
    return _in_ranges(starts, psum_layout.to(torch.int64).clamp(max=mn), mn)


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor, psum_layout: torch.Tensor | None = None) -> torch.Tensor:
    """FP32 ``[B?, MN, SK]`` -> int32 ``[B?, MN, ceil(SK/4)]`` MN-major TMA-aligned (exponent bytes only;
    a mantissa is dropped, as NVIDIA does). With ``psum_layout`` (M-grouped end rows), rows in the
    gaps between groups are written as 0."""
    v.tensor("sf", sf, (torch.float32,), (2, 3))
    if psum_layout is not None:
        v.tensor("psum_layout", psum_layout, (torch.int32,), 1)
    return _packed(sf, sf.size(-2), 1, torch.int32, psum_layout)


def _packed(sf: torch.Tensor, mn: int, gran_mn: int, dtype: torch.dtype, psum_layout=None) -> torch.Tensor:
    """FP32 ``[B?, ceil(mn/gran_mn), SK]`` -> packed UE8M0 ``[B?, mn, words]`` MN-major: int32 TMA-aligned
    (NVIDIA) or int16 without padding (Ascend); rows in the gaps of ``psum_layout`` are 0."""
    batch = sf.size(0) if sf.dim() == 3 else None
    aligned = get_tma_aligned_size(mn, 4) if dtype == torch.int32 else mn
    out = _mn_major_empty(batch, mn, ceil_div(sf.size(-1), formats.PACKED_SF_DTYPES[dtype]), dtype, sf.device, aligned)
    _dispatch.run("sf_pack_ue8m0", sf.device, sf, out, gran_mn)
    if psum_layout is not None:
        out.masked_fill_(~_psum_valid_rows(psum_layout, mn).unsqueeze(-1), 0)
    return out


def get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor, grouped_layout: torch.Tensor,
                                                           ks_cpu: list[int] | None, gran_k: int, k_alignment: int,
                                                           use_psum_layout: bool = False) -> torch.Tensor:
    """Per-group FP32 scales ``[sum_g ceil(k_g/gran_k), MN]`` -> int32 ``[P, MN]``; each group packs its own
    K-blocks 4 per word (``ceil(k_g/(4*gran_k))`` rows), never mixing groups. Without ``ks_cpu`` (psum
    only) the group sizes come from ``grouped_layout`` and the output has the upper-bound row count
    ``(SK + 3G) // 4`` (trailing rows 0). In the psum layout ``grouped_layout`` places the groups and
    ``ks_cpu``, exact or aligned (upper-bound) sizes, only sets the row count ``sum ceil(k_g/(4*gran_k))``."""
    v.tensor("sf", sf, (torch.float32,), 2)
    v.tensor("grouped_layout", grouped_layout, (torch.int32,), 1)
    v.integer("gran_k", gran_k, 1)
    v.integer("k_alignment", k_alignment, 1)
    if use_psum_layout:
        # The psum layout places every group; ks_cpu (real or aligned upper-bound sizes) only sizes the output.
        packed = _k_grouped_packed_on_device(sf, grouped_layout, gran_k, k_alignment)
        if not ks_cpu:
            return packed
        if len(ks_cpu) != grouped_layout.numel():
            raise v.fail("ks_cpu", f"{grouped_layout.numel()} sizes (one per group of grouped_layout)", len(ks_cpu))
        rows = sum(ceil_div(v.integer(f"ks_cpu[{g}]", k, 0), 4 * gran_k) for g, k in enumerate(ks_cpu))
        out = packed.new_zeros(rows, packed.size(1))
        kept = min(rows, packed.size(0))
        out[:kept] = packed[:kept]
        return out
    if not ks_cpu:
        raise v.fail("ks_cpu", "the per-group K sizes (only the psum layout may omit them)", ks_cpu)
    ks, mn = list(ks_cpu), sf.size(1)
    blocks = [ceil_div(k, gran_k) for k in ks]
    if sum(blocks) != sf.size(0):
        raise v.fail("sf", f"{sum(blocks)} rows (sum of ceil(k_g/{gran_k}))", f"shape {tuple(sf.shape)}")
    words = [ceil_div(b, 4) for b in blocks]
    out = torch.zeros(sum(words), mn, dtype=torch.int32, device=sf.device)
    row = word = 0
    for b, w in zip(blocks, words, strict=True):  # each group packs its own K-blocks, as rows of out
        if b:
            _dispatch.run("sf_pack_ue8m0", sf.device, sf[row:row + b].t(), out[word:word + w].t(), 1)
        row, word = row + b, word + w
    return out


def _k_grouped_packed_on_device(sf: torch.Tensor, grouped_layout: torch.Tensor, gran_k: int,
                                k_alignment: int) -> torch.Tensor:
    """The psum form without ``ks_cpu``, with tensor ops only (no host read of ``grouped_layout``): the
    upper-bound ``(SK + 3G) // 4`` rows, K-block j of group g in byte ``j % 4`` of row ``word_start[g] + j // 4``.
    The row count ``sum ceil(k_g / gran_k) == SK`` is checked only with ``DG_ASCEND_CHECKS=1`` on the
    Ascend path (elsewhere always: a host read is allowed there)."""
    num_groups, mn = grouped_layout.numel(), sf.size(1)
    ends = grouped_layout.to(torch.int64)
    blocks = ((ends - _aligned_starts(ends, k_alignment)).clamp_min(0) + gran_k - 1) // gran_k
    if not _lib.on_ascend(sf.device) or _lib.LIB.env.get_int("ASCEND_CHECKS", 0):
        if int(blocks.sum()) != sf.size(0):
            raise v.fail("sf", f"{int(blocks.sum())} rows (sum of ceil(k_g/{gran_k}))", f"shape {tuple(sf.shape)}")
    rows = (sf.size(0) + 3 * num_groups) // 4
    block_ends = blocks.cumsum(0)
    word_starts = ((blocks + 3) // 4).cumsum(0) - (blocks + 3) // 4
    r = torch.arange(sf.size(0), device=sf.device)
    g = torch.searchsorted(block_ends, r, right=True).clamp(max=max(num_groups - 1, 0))
    j = r - (block_ends - blocks)[g] if num_groups else r
    slot = (word_starts[g] * 4 + j).clamp(max=rows * 4 - 1) if num_groups else r
    exponents = torch.zeros(rows * 4, mn, dtype=torch.uint8, device=sf.device)
    exponents.index_copy_(0, slot, formats.ue8m0_exponent(sf).to(torch.uint8))
    # [rows, mn] row-major as the ks_cpu form; little-endian: K-block j is byte j % 4 of its word
    return exponents.view(rows, 4, mn).permute(0, 2, 1).contiguous().view(torch.int32).squeeze(-1)


def _ascend_gaps(ends: torch.Tensor, alignment: int, grouping: str, size: int) -> torch.Tensor:
    """bool ``[size]``: the rows (``grouping="m"``) or 32-element K-blocks (``"k"``) lying between the
    groups of a psum layout (from a group's end to the next group's aligned start), zeroed in the
    Ascend form as DeepGEMM-Ascend's transform does."""
    ends = ends.to(torch.int64)
    starts = (ends + alignment - 1) // alignment * alignment
    if grouping == "k":
        ends, starts = (ends + 31) // 32, starts // 32
    return _in_ranges(ends.clamp_min(0), starts.clamp_min(0), size)


def _ascend_int16(sf_fp32: torch.Tensor, mn: int, grouping: str = "none", ends: torch.Tensor | None = None,
                  alignment: int = runtime.ASCEND_MK_ALIGNMENT) -> torch.Tensor:
    """FP32 per-row scales (gran_k 32) ``[B?, MN, SK]`` -> Ascend int16 pairs, MN-major without padding;
    with a psum layout (``ends``) the gaps between groups are zeroed (``_ascend_gaps``)."""
    if sf_fp32.numel() and not bool(formats.is_power_of_two(sf_fp32).all()):
        raise v.fail("sf values", "positive powers of two (the Ascend UE8M0 contract)",
                     sf_fp32[~formats.is_power_of_two(sf_fp32)][0].item())
    packed = _packed(sf_fp32, mn, 1, torch.int16)
    if grouping == "k":
        gap = _ascend_gaps(ends, alignment, "k", 2 * packed.size(-1)).view(-1, 2)
        pairs = packed.contiguous().view(torch.uint8).view(*packed.shape, 2)  # MN-major: bytes need a row-major copy
        packed.copy_((pairs * ~gap).flatten(-2).view(torch.int16))
    elif grouping == "m":
        packed.masked_fill_(_ascend_gaps(ends, alignment, "m", mn).unsqueeze(-1), 0)
    return packed


def _broadcast_rows(sf: torch.Tensor, mn: int, gran_mn: int) -> torch.Tensor:
    if gran_mn == 1:
        return sf
    return sf.index_select(-2, torch.arange(mn, device=sf.device) // gran_mn)


def transform_sf_into_required_layout(sf: torch.Tensor, mn: int, k: int, recipe, num_groups: int | None = None,
                                      is_sfa: bool | None = None, disable_ue8m0_cast: bool = False,
                                      psum_layout: torch.Tensor | None = None) -> torch.Tensor:
    """Scale factors ``[G?, ceil(mn/gran_mn), SK]`` in any accepted container -> the kernel-ready form.

    ``recipe``: ``(gran_m, gran_n, gran_k)`` with ``is_sfa`` choosing gran_m or gran_n, or
    ``(gran_mn, gran_k)`` with ``is_sfa=None``."""
    v.integer("mn", mn, 0)
    v.integer("k", k, 0)
    if not isinstance(recipe, (tuple, list)) or len(recipe) not in (2, 3):
        raise TypeError(f"recipe: expected a 2- or 3-tuple of ints, got {recipe!r}")
    if len(recipe) == 3:
        if is_sfa is None:
            raise v.fail("is_sfa", "True or False with a 3-tuple recipe", None)
        gran_mn, gran_k = (recipe[0] if v.boolean("is_sfa", is_sfa) else recipe[1]), recipe[2]
    else:
        if is_sfa is not None:
            raise v.fail("is_sfa", "None with a 2-tuple recipe", is_sfa)
        gran_mn, gran_k = recipe
    v.integer("gran_mn", gran_mn, 1)
    if gran_k not in (32, 128):
        raise v.fail("recipe gran_k", "32 or 128", gran_k)
    if num_groups is not None:
        v.integer("num_groups", num_groups, 1)
    v.boolean("disable_ue8m0_cast", disable_ue8m0_cast)
    from ._operands import sf_to_fp32
    v.tensor("sf", sf, (torch.float32, torch.float8_e8m0fnu, torch.int32, torch.int16), 2 if num_groups is None else 3)
    if psum_layout is not None:
        v.tensor("psum_layout", psum_layout, (torch.int32,), 1)
        v.contiguous("psum_layout", psum_layout)
    ascend = _lib.on_ascend(sf.device)
    if sf.dtype == torch.int16 or ascend:
        _check_ascend_form(sf, gran_k, disable_ue8m0_cast)
    if ascend and sf.dtype in (torch.float32, torch.int16):
        # the Ascend vector kernel, from shapes and dtypes only (no host read of sf or psum_layout)
        return _ascend_transform(sf, mn, k, gran_mn, num_groups, "m" if psum_layout is not None else "none",
                                 psum_layout)
    # FP32 scales packed into UE8M0 keep only their exponent byte (upstream shifts the bits, so 3.0
    # would become 2.0): refuse any that are not powers of two, as the GEMMs do, unless the cast is off.
    values = sf_to_fp32("sf", sf, mn, k, gran_mn, gran_k, num_groups, require_pow2=not disable_ue8m0_cast)
    if sf.dtype == torch.int16 or ascend:
        grouping = "m" if psum_layout is not None else "none"
        return _ascend_int16(_broadcast_rows(values, mn, gran_mn), mn, grouping, psum_layout,
                             runtime.mk_alignment_for(sf.device))
    if sf.dtype == torch.int32:
        if gran_mn != 1:
            raise v.fail("recipe gran_mn", "1 for int32-packed scale factors", gran_mn)
        return sf if _is_mn_major_tma(sf) else get_mn_major_tma_aligned_packed_ue8m0_tensor(values, psum_layout)
    if disable_ue8m0_cast:
        if sf.dtype == torch.float32 and gran_k == 128 and gran_mn == 1:
            return get_mn_major_tma_aligned_tensor(sf)
        if sf.dtype == torch.float32 and gran_k == 128 and gran_mn == 128:
            return sf
        raise v.fail("disable_ue8m0_cast", "False unless FP32 scales of recipe (1|128, 128)", True)
    return _packed(values, mn, gran_mn, torch.int32, psum_layout)


def _check_ascend_form(sf: torch.Tensor, gran_k: int, disable_ue8m0_cast: bool) -> None:
    if gran_k != 32:
        raise v.fail("recipe gran_k", "32 for the Ascend int16 form", gran_k)
    if sf.dtype == torch.float32 and disable_ue8m0_cast:
        raise v.fail("disable_ue8m0_cast", "False with FP32 input (Ascend)", True)


def _is_ascend_form(sf: torch.Tensor, mn: int, gran_mn: int) -> bool:
    """An int16 tensor already in the kernel-ready Ascend layout (returned as is, as upstream does)."""
    words = sf.size(-1)
    mn_major = (sf.stride(-2) == 1 or mn <= 1) and (sf.stride(-1) == mn or words <= 1)
    ok = sf.dtype == torch.int16 and gran_mn == 1 and mn_major
    return ok and (sf.dim() == 2 or sf.stride(0) == mn * words)


def _ascend_transform(sf: torch.Tensor, mn: int, k: int, gran_mn: int, num_groups: int | None, grouping: str,
                      ends: torch.Tensor | None) -> torch.Tensor:
    """The Ascend path: shapes checked, then ``deep_gemm/ascend/sf_layout.asc`` (values read on the device only)."""
    from .ascend.sf_layout import transform_sf
    lead = () if num_groups is None else (num_groups,)
    k_blocks = ceil_div(k, 32)
    v.shape("sf", sf, lead + (ceil_div(mn, gran_mn), k_blocks if sf.dtype == torch.float32 else ceil_div(k_blocks, 2)))
    if _is_ascend_form(sf, mn, gran_mn) and ends is None:
        return sf
    if ends is not None and ends.device != sf.device:
        raise v.fail("psum_layout", f"a tensor on {sf.device} (as sf)", ends.device)
    return transform_sf(sf, mn, k_blocks, gran_mn, grouping, ends, runtime.mk_alignment_for(sf.device))


def transform_k_grouped_sf_into_required_layout(sf: torch.Tensor, mn: int, k: int, recipe, is_sfa: bool | None,
                                                psum_layout: torch.Tensor) -> torch.Tensor:
    """DeepGEMM-Ascend's K-grouped form: scales ``[ceil(mn/gran_mn), ceil(k/32)]`` (FP32) or int16 pairs of
    a K-grouped contiguous operand (``k`` the total K, groups placed by the psum ``psum_layout``: exclusive
    K ends, each group starting at the aligned end of the previous) -> int16 ``[mn, ceil(k/64)]`` MN-major,
    the K-blocks between groups zeroed. ``recipe`` as ``transform_sf_into_required_layout``; gran_k 32."""
    v.integer("mn", mn, 0)
    v.integer("k", k, 0)
    if not isinstance(recipe, (tuple, list)) or len(recipe) != 3:
        raise TypeError(f"recipe: expected a 3-tuple of ints, got {recipe!r}")
    gran_mn = recipe[0] if v.boolean("is_sfa", is_sfa) else recipe[1]
    v.integer("gran_mn", gran_mn, 1)
    _check_ascend_form(sf, recipe[2], False)
    v.tensor("sf", sf, (torch.float32, torch.int16), 2)
    v.tensor("psum_layout", psum_layout, (torch.int32,), 1)
    v.contiguous("psum_layout", psum_layout)
    if _lib.on_ascend(sf.device):
        return _ascend_transform(sf, mn, k, gran_mn, None, "k", psum_layout)
    from ._operands import sf_to_fp32
    values = sf_to_fp32("sf", sf, mn, k, gran_mn, 32, None, require_pow2=True)
    return _ascend_int16(_broadcast_rows(values, mn, gran_mn), mn, "k", psum_layout,
                         runtime.mk_alignment_for(sf.device))


def convert_packed_ue8m0(sf: torch.Tensor, k: int, gran_k: int = 32, dtype: torch.dtype = torch.int16) -> torch.Tensor:
    """Between NVIDIA int32 (4 per word) and Ascend int16 (2 per word) packed UE8M0 ``[B?, MN, words]``.

    The result is in the target's kernel-ready layout (int16: MN-major, no padding; int32: MN-major
    TMA-aligned). Both cover ``ceil(k / gran_k)`` K-blocks; the int16 form needs gran_k 32."""
    v.tensor("sf", sf, (torch.int32, torch.int16), (2, 3))
    if dtype not in (torch.int32, torch.int16):
        raise v.fail("dtype", "torch.int32 or torch.int16", dtype)
    if (sf.dtype == torch.int16 or dtype == torch.int16) and gran_k != 32:
        raise v.fail("gran_k", "32 (int16 pairs cover 2 x 32 K elements)", gran_k)
    sk = ceil_div(k, gran_k)
    need = ceil_div(sk, formats.PACKED_SF_DTYPES[sf.dtype])
    if sf.size(-1) != need:
        raise v.fail("sf", f"{need} words in the last dim for K = {k}", f"shape {tuple(sf.shape)}")
    values = torch.empty(sf.shape[:-1] + (sk,), dtype=torch.float32, device=sf.device)
    _dispatch.run("sf_unpack_ue8m0", sf.device, sf, values)
    if dtype == torch.int16:
        return _ascend_int16(values, sf.size(-2))
    return _packed(values, sf.size(-2), 1, torch.int32)
