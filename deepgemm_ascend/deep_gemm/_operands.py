"""Normalising quantised operands into the one canonical form both implementations take.

A quantised operand ``(data, sf)`` becomes a :class:`QuantOperand`:
- ``data``: the caller's tensor as the ``nt`` core sees it, logical ``[G?, MN, K]``; FP8 E4M3, or
  packed FP4 E2M1 (int8 / float4_e2m1fn_x2) packed along its contiguous axis, i.e. ``[.., MN, K/2]``
  when K-major and ``[.., MN/2, K]`` when MN-major;
- ``sf``: FP32 ``[G?, ceil(MN/gran_mn), ceil(K/gran_k)]``, whatever container the caller used
  (FP32, float8_e8m0fnu, int32 with 4 UE8M0 per word, int16 with 2 UE8M0 per word);
- ``gran_mn``, ``gran_k``: the block each scale covers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import _lib, formats
from . import _validate as v
from .utils.math import ceil_div

SF_DTYPES = (torch.float32, torch.float8_e8m0fnu, torch.int32, torch.int16)
AB_DTYPES = (formats.FP8_DTYPE,) + formats.FP4_DTYPES
GRAN_K_CHOICES = (32, 128)
MX_PAIR = 64   # K elements covered by one int16 (two UE8M0 of gran_k 32)


class Deferred:
    """A dataclass field made on first read: ``defer(name, make)`` removes it from the instance, and the first read
    of ``name`` (which then misses the instance) stores and returns ``make()``; setting it cancels ``make``. The
    pending makes are replaced, never changed in place, so a shallow copy keeps its own."""

    def _pending(self, name: str, make=None) -> None:
        rest = {k: v for k, v in self.__dict__.get("_deferred", {}).items() if k != name}
        self.__dict__["_deferred"] = {**rest, name: make} if make is not None else rest

    def defer(self, name: str, make) -> None:
        self.__dict__.pop(name, None)
        self._pending(name, make)

    def __getattr__(self, name):   # reached only for a name missing from the instance
        make = self.__dict__.get("_deferred", {}).get(name)
        if make is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            value = make()
        except AttributeError as exc:   # not "no such attribute": the make itself failed
            raise RuntimeError(f"making {type(self).__name__}.{name} failed: {exc}") from exc
        self._pending(name)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name, value):
        if name in self.__dict__.get("_deferred", {}):
            self._pending(name)
        object.__setattr__(self, name, value)


class PackedScales(Deferred):
    """For an operand dataclass with an ``sf`` field: the caller's packed UE8M0 scales kept as ``packed_sf`` (declare
    it ``field(default=None, init=False, repr=False, compare=False)``), which the Ascend kernels read where they lie,
    with ``sf`` unpacked to FP32 only when first read. Setting ``sf`` drops them (new scales), so a copy made
    through ``__init__`` never carries stale ones."""

    def __setattr__(self, name, value):
        if name == "sf":
            self.__dict__["packed_sf"] = None
        super().__setattr__(name, value)

    def set_packed_sf(self, packed: torch.Tensor, unpack) -> None:
        """Keeps ``packed`` (validated); ``unpack()`` makes ``sf`` when it is first read."""
        self.defer("sf", unpack)
        self.__dict__["packed_sf"] = packed

    @property
    def has_sf(self) -> bool:
        """Whether the operand carries scales, without unpacking them."""
        return self.packed_sf is not None or self.__dict__.get("sf") is not None


@dataclass
class QuantOperand(PackedScales):
    data: torch.Tensor
    sf: torch.Tensor | None
    fp4: bool
    k_major: bool
    mn: int
    k: int
    groups: int | None
    gran_mn: int = 1
    gran_k: int = 128
    # packed UE8M0 scales, one per row and 32 K-elements (PackedScales; ``ascend.fp8_mx_gemm.mx_scales``)
    packed_sf: torch.Tensor | None = field(default=None, init=False, repr=False, compare=False)


def parse_data(name: str, data: torch.Tensor, grouped: bool, require_k_major: bool = False) -> QuantOperand:
    v.tensor(f"{name}[0]", data, AB_DTYPES, 3 if grouped else 2)
    k_major = v.ab_major(f"{name}[0]", data)
    if require_k_major and not k_major:
        raise v.fail(f"{name}[0] strides", "a K-major layout (stride(-1) == 1)", tuple(data.stride()))
    fp4 = formats.is_fp4(data)
    mn, k = data.size(-2), data.size(-1)
    if fp4:
        k, mn = (k * 2, mn) if k_major else (k, mn * 2)
    return QuantOperand(data, None, fp4, k_major, mn, k, data.size(0) if grouped else None)


def resolve_recipes(recipe, recipe_a, recipe_b, sfa: torch.Tensor, sfb: torch.Tensor,
                    default_gran_k: int | None = None) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((gran_m, gran_k_a), (gran_n, gran_k_b))`` from ``recipe`` or the ``recipe_a``/``recipe_b`` pair.

    Without any: ``(1, 128, 128)`` for FP32 SFB (the legacy format), ``(1, 1, 128)`` for int32 SFB,
    ``(1, 1, 32)`` for int16 SFB (Ascend MX pairs only exist at gran_k 32)."""
    if recipe is not None and (recipe_a is not None or recipe_b is not None):
        raise v.fail("recipe", "either recipe or the recipe_a/recipe_b pair", "both")
    if (recipe_a is None) != (recipe_b is None):
        raise v.fail("recipe_a/recipe_b", "both or neither", f"recipe_a={recipe_a!r}, recipe_b={recipe_b!r}")
    if recipe is None and recipe_a is None:
        if sfb.dtype == torch.int16:
            recipe = (1, 1, 32)
        elif sfb.dtype == torch.int32:
            recipe = (1, 1, default_gran_k or 128)
        else:
            recipe = (1, 128, default_gran_k or 128)
    if recipe is not None:
        gm, gn, gk = _granularities("recipe", recipe, 3)
        return (gm, gk), (gn, gk)
    return _granularities("recipe_a", recipe_a, 2), _granularities("recipe_b", recipe_b, 2)


def _granularities(name: str, recipe, length: int) -> tuple[int, ...]:
    if not isinstance(recipe, (tuple, list)) or len(recipe) != length:
        raise TypeError(f"{name}: expected a tuple of {length} ints, got {recipe!r}")
    for i, g in enumerate(recipe):
        v.integer(f"{name}[{i}]", g, 1)
    *mn_grans, gran_k = recipe
    for i, g in enumerate(mn_grans):
        if g & (g - 1) or g > 128:
            raise v.fail(f"{name}[{i}]", "a power of two in [1, 128] (an M/N granularity)", g)
    if gran_k not in GRAN_K_CHOICES:
        raise v.fail(f"{name}[{length - 1}]", f"a K granularity in {GRAN_K_CHOICES}", gran_k)
    return tuple(recipe)


def may_read_values(device) -> bool:
    """Whether a check may read values derived from a layout on ``device``: always off the Ascend path,
    there only in the debug mode ``DG_ASCEND_CHECKS=1``."""
    return not _lib.on_ascend(device) or bool(_lib.LIB.env.get_int("ASCEND_CHECKS", 0))


def sf_to_fp32(name: str, sf: torch.Tensor, mn: int, k: int, gran_mn: int, gran_k: int,
               groups: int | None, require_pow2: bool, valid_rows: torch.Tensor | None = None) -> torch.Tensor:
    """Any accepted SF container to FP32 ``[G?, ceil(mn/gran_mn), ceil(k/gran_k)]`` (any strides in).

    ``valid_rows`` (bool over the SF rows, ``[G?, rows]``) limits the power-of-two check to rows
    that are read: grouped layouts may leave the scales of padding rows uninitialised. The check reads
    values, so NPU tensors skip it (no host sync; the Ascend kernels use the exponent byte), and so does
    the twin where ``valid_rows`` comes from a device layout, unless ``DG_ASCEND_CHECKS=1``."""
    v.tensor(name, sf, SF_DTYPES, 2 if groups is None else 3)
    rows, sf_k = ceil_div(mn, gran_mn), ceil_div(k, gran_k)
    lead = () if groups is None else (groups,)
    if sf.dtype in (torch.float32, torch.float8_e8m0fnu):
        v.shape(name, sf, lead + (rows, sf_k))
        if sf.dtype == torch.float8_e8m0fnu:
            return formats.unpack_ue8m0(sf)
        if require_pow2 and sf.device.type != "npu" and (valid_rows is None or may_read_values(sf.device)):
            checked = sf if valid_rows is None else sf[valid_rows]
            if checked.numel() and not bool(formats.is_power_of_two(checked).all()):
                bad = checked[~formats.is_power_of_two(checked)].flatten()[0].item()
                raise v.fail(f"{name} values", "positive powers of two (UE8M0-representable) for this recipe/format "
                             "(FP4 operands or gran_k 32); round with ceil_to_ue8m0 or pass packed UE8M0", bad)
        return sf.float()
    check_packed(name, sf, rows, sf_k, gran_k, lead)
    return formats.unpack_ue8m0(sf)[..., :sf_k]


def check_packed(name: str, sf: torch.Tensor, rows: int, sf_k: int, gran_k: int, lead: tuple) -> None:
    per_word = formats.PACKED_SF_DTYPES[sf.dtype]
    if sf.dtype == torch.int16 and gran_k != 32:
        raise v.fail(f"{name} (int16 UE8M0 pairs)", "gran_k 32", gran_k)
    v.shape(name, sf, lead + (rows, ceil_div(sf_k, per_word)))


def attach_sf(name: str, op: QuantOperand, sf: torch.Tensor, gran: tuple[int, int],
              disable_ue8m0_cast: bool, other_fp4: bool, valid_mn=None) -> QuantOperand:
    """Checks and converts ``sf`` for ``op``; ``valid_mn`` (bool ``[G?, MN]``, or a function making it: only FP32
    scales need it) marks the rows that are read."""
    op.gran_mn, op.gran_k = gran
    if op.fp4 and op.k % 2:
        raise v.fail(f"{name}[0]", "an even K for packed FP4", op.k)
    # FP32 scales are exact only on the FP8 x FP8, gran_k 128 path (SM90's contract); MX formats
    # (FP4 operands, gran_k 32) store UE8M0 exponents, so other FP32 scales would be silently
    # truncated upstream and are refused here (the Ascend contract).
    ue8m0_only = op.fp4 or other_fp4 or op.gran_k == 32
    if disable_ue8m0_cast and ue8m0_only and sf.dtype == torch.float32:
        raise v.fail("disable_ue8m0_cast", "False for FP4 operands or gran_k 32 with FP32 scale factors", True)
    if sf.dtype in formats.PACKED_SF_DTYPES and op.gran_mn == 1 and op.gran_k == 32:   # exact: nothing to check
        v.tensor(f"{name}[1]", sf, SF_DTYPES, 2 if op.groups is None else 3)
        check_packed(f"{name}[1]", sf, op.mn, ceil_div(op.k, 32), 32, () if op.groups is None else (op.groups,))
        sf_k = ceil_div(op.k, 32)
        op.set_packed_sf(sf, lambda: formats.unpack_ue8m0(sf)[..., :sf_k])
        return op
    valid_rows = None
    if valid_mn is not None:
        pad = (-op.mn) % op.gran_mn
        valid_mn = valid_mn() if callable(valid_mn) else valid_mn
        valid_rows = torch.nn.functional.pad(valid_mn.to(torch.int8), (0, pad)).unflatten(-1, (-1, op.gran_mn)).any(-1)
    op.sf = sf_to_fp32(f"{name}[1]", sf, op.mn, op.k, op.gran_mn, op.gran_k, op.groups, ue8m0_only, valid_rows)
    return op


def transpose_pair(name: str, p, dim0: int, dim1: int, ndim: int):
    """The ``nn``/``tn``/``tt`` wrappers' view change, after checking it can be applied."""
    data, sf = v.pair(name, p)
    v.tensor(f"{name}[0]", data, ndim=ndim)
    v.tensor(f"{name}[1]", sf, ndim=ndim)
    return data.transpose(dim0, dim1), sf.transpose(dim0, dim1)


def transpose_tensor(name: str, t, dim0: int, dim1: int, ndim: int):
    v.tensor(name, t, ndim=ndim)
    return t.transpose(dim0, dim1)


@dataclass
class GroupedRows(Deferred):
    """An M-grouped contiguous layout, validated: ``row_group[i]`` is the group row i is computed with, or -1
    (padding); ``layout`` is the int32 form the kernels read (``m_indices [M]`` -- ``row_group``: each row
    labelled with its tile's group --, or psum as exclusive END rows ``[G]`` -- row counts are converted),
    with groups starting at multiples of ``alignment``. ``lazy`` makes one whose ``row_group`` is computed when
    first read (the Ascend kernels read ``layout`` alone)."""
    row_group: torch.Tensor
    layout: torch.Tensor
    use_psum_layout: bool
    alignment: int

    @classmethod
    def lazy(cls, make_row_group, layout: torch.Tensor, use_psum_layout: bool, alignment: int) -> GroupedRows:
        rows = cls(None, layout, use_psum_layout, alignment)
        rows.defer("row_group", make_row_group)
        return rows


class KGroups:
    """A K-grouped layout, validated: group g covers K rows ``[k_starts[g], k_starts[g] + ks[g])`` and its
    scales are the ``ceil(ks[g] / gran_k)`` per-channel rows from ``sf_starts[g]``.

    Each field is a host list (from ``ks_cpu``) or, on the Ascend path with the psum layout and no
    ``ks_cpu``, an int64 device tensor derived from ``grouped_layout`` without a host read; every
    start is then a multiple of ``alignment``. Reading a field as a list (``ks``, ``k_starts``,
    ``sf_starts``, ``k_ranges``) copies device values to the host: only the reference and the host
    kernels do; the Ascend kernels take ``tensors()``."""

    def __init__(self, ks, k_starts, sf_starts, alignment: int = 1):
        self._ks, self._k_starts, self._sf_starts, self.alignment = ks, k_starts, sf_starts, alignment

    @staticmethod
    def _list(x) -> list:
        return x.tolist() if isinstance(x, torch.Tensor) else list(x)

    @property
    def on_host(self) -> bool:
        return not isinstance(self._ks, torch.Tensor)

    @property
    def ks(self) -> list:
        return self._list(self._ks)

    @property
    def k_starts(self) -> list:
        return self._list(self._k_starts)

    @property
    def sf_starts(self) -> list:
        return self._list(self._sf_starts)

    @sf_starts.setter
    def sf_starts(self, value) -> None:
        self._sf_starts = value

    @property
    def k_ranges(self) -> list:
        return [(s, s + k) for s, k in zip(self.k_starts, self.ks, strict=True)]

    def tensors(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(ks, k_starts, sf_starts)`` as int64 tensors on ``device`` (no host read)."""
        return tuple(x.to(device=device, dtype=torch.int64) if isinstance(x, torch.Tensor)
                     else torch.tensor(list(x), dtype=torch.int64, device=device)
                     for x in (self._ks, self._k_starts, self._sf_starts))
