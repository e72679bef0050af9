"""Process-wide settings of the library (upstream's device and heuristics runtimes).

On the host kernels the "SM count" is their worker-thread count. Settings that steer
GPU/NPU kernel selection (tensor-core utilisation, PDL, compiled dims, block-size multiples,
NPU arch) are recorded and returned, and have no effect on CPU results.

Two sets of defaults (see the package README): the NVIDIA ones (mk alignment 128, the
``m_indices`` grouped layout, SM count = host worker threads) for CPU tensors on the host kernels,
and DeepGEMM-Ascend's (mk alignment 256, ``use_psum_layout=True``, SM count = the NPU's AI cores)
on the Ascend path: NPU tensors, or ``DG_BACKEND=ascend`` (CPU tensors on deepjit's Ascend twin).
Device-free queries take the Ascend defaults when ``DG_BACKEND=ascend`` or an NPU is present.
"""
from __future__ import annotations

import os
from typing import Union

import torch

from deepjit import validation as V

from . import _lib

_LEGACY_MK_ALIGNMENT = 128
ASCEND_MK_ALIGNMENT = 256  # DeepGEMM-Ascend's fixed M/K alignment of contiguous grouped layouts
_PSUM_FORMS = ("end_rows", "counts")


class _State:
    tc_util = 0
    pdl = False
    ignore_compile_dims = False
    block_m_multiple_of = 1
    block_n_multiple_of = 1
    mk_alignment: int | None = None  # None: the default of the path (NVIDIA 128, Ascend 256)
    num_sms: int | None = None       # set_num_sms on the Ascend path (None: every AI core)
    deterministic = False
    npu_arch = 0
    psum_layout_form: str | None = None


_state = _State()


def _max_workers() -> int:
    return os.cpu_count() or 1


def ascend_defaults(device=None) -> bool:
    """Whether DeepGEMM-Ascend's defaults apply: for tensors on ``device`` (NPU tensors, or
    ``DG_BACKEND=ascend``); with no device, when ``DG_BACKEND=ascend`` or torch_npu reports an NPU."""
    if device is not None:
        return _lib.on_ascend(device)
    if _lib.LIB.forced_backend() == "ascend":
        return True
    npu = getattr(torch, "npu", None)
    return bool(npu is not None and npu.is_available())


def _num_ai_cores() -> int:
    """AI cores of the current NPU (torch_npu's device properties, else ACL through deepjit), or of
    the twin's dav-3510 when no NPU is present."""
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        cores = getattr(npu.get_device_properties(npu.current_device()), "cube_core_num", 0)
        return int(cores) or _lib.LIB.ascend_runtime(twin=False).device.get_num_aicore_cores()
    return _lib.LIB.ascend_runtime(twin=True).device.get_num_aicore_cores()


# ---- SMs / worker threads ---------------------------------------------------------------------
def set_num_sms(new_num_sms: int) -> None:
    """Host kernels: their worker threads (at most the CPU count). Ascend path: the AI cores the
    kernels may use (at most the device's). 0 restores the default (every core, or DG_NUM_THREADS)."""
    if ascend_defaults():
        n = V.integer("new_num_sms", new_num_sms, lo=0, hi=_num_ai_cores())
        _state.num_sms = n or None
        return
    n = V.integer("new_num_sms", new_num_sms, lo=0, hi=_max_workers())
    _lib.LIB.set_num_threads(n if n > 0 else _lib.DEFAULT_NUM_THREADS)


def get_num_sms() -> int:
    """The host kernels' worker threads, or on the Ascend path the AI-core count of the current NPU
    (the twin's on CPU tensors), as ``set_num_sms`` limits it."""
    if ascend_defaults():
        return _state.num_sms or _num_ai_cores()
    return _lib.LIB.num_threads


def ascend_blocks(cores: int) -> int:
    """The blocks an Ascend kernel may launch on a device of ``cores`` AI cores: all of them, or as
    many as ``set_num_sms`` allowed on the Ascend path."""
    return min(cores, _state.num_sms or cores)


# ---- heuristics-only knobs --------------------------------------------------------------------
def set_tc_util(new_tc_util: int) -> None:
    _state.tc_util = V.integer("new_tc_util", new_tc_util, lo=0, hi=100)


def get_tc_util() -> int:
    return 100 if _state.tc_util == 0 else _state.tc_util


def set_pdl(new_enable_pdl: bool) -> None:
    _state.pdl = V.boolean("new_enable_pdl", new_enable_pdl)


def get_pdl() -> bool:
    return _state.pdl


def set_ignore_compile_dims(new_value: bool) -> None:
    _state.ignore_compile_dims = V.boolean("new_value", new_value)


def get_ignore_compile_dims() -> bool:
    return _state.ignore_compile_dims


def set_block_size_multiple_of(new_value: Union[int, tuple[int, int]]) -> None:
    """Force BLOCK_M / BLOCK_N to multiples of ``x`` (both) or ``(bm, bn)``."""
    if isinstance(new_value, (tuple, list)):
        if len(new_value) != 2:
            raise V.fail("new_value", "an int or a (block_m, block_n) pair", repr(new_value))
        bm, bn = new_value
    else:
        bm = bn = new_value
    _state.block_m_multiple_of = V.integer("block_m_multiple_of", bm, lo=1)
    _state.block_n_multiple_of = V.integer("block_n_multiple_of", bn, lo=1)


def get_block_size_multiple_of() -> tuple[int, int]:
    return _state.block_m_multiple_of, _state.block_n_multiple_of


# ---- Ascend additions ---------------------------------------------------------------------------
def use_deterministic_algorithms(enabled: bool) -> None:
    """Ascend's library-level determinism switch; CPU results are deterministic either way."""
    _state.deterministic = V.boolean("enabled", enabled)


def get_deterministic_algorithms() -> bool:
    return _state.deterministic


def set_npu_arch(arch: int) -> None:
    """0 means auto-detect; kept for Ascend parity, no effect on CPU."""
    _state.npu_arch = V.integer("arch", arch, lo=0)


def get_npu_arch() -> int:
    return _state.npu_arch


# ---- grouped layouts ----------------------------------------------------------------------------
def set_mk_alignment_for_contiguous_layout(new_value: int) -> None:
    _state.mk_alignment = V.integer("new_value", new_value, lo=1)


def get_mk_alignment_for_contiguous_layout() -> int:
    return mk_alignment_for(None)


def mk_alignment_for(device) -> int:
    """The alignment in force for tensors on ``device``: the value set, else the path's default."""
    if _state.mk_alignment is not None:
        return _state.mk_alignment
    return ASCEND_MK_ALIGNMENT if ascend_defaults(device) else _LEGACY_MK_ALIGNMENT


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m: int | None = None) -> int:
    """SM100's rule: BLOCK_M starts at 224 and shrinks by 32 while it stays > 32 and covers expected_m;
    DeepGEMM-Ascend's fixed 256 on the Ascend path."""
    block_m, step = 224, 32
    if expected_m is not None:
        V.integer("expected_m", expected_m, lo=0)
    if ascend_defaults():
        return ASCEND_MK_ALIGNMENT
    if expected_m is not None:
        while block_m > 32 and block_m - step >= expected_m:
            block_m -= step
    return block_m


get_m_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout
get_k_alignment_for_contiguous_layout = get_mk_alignment_for_contiguous_layout


def set_psum_layout_form(form: str) -> None:
    """How ``grouped_layout`` is read when ``use_psum_layout=True`` (a project setting).

    ``"end_rows"`` (default, NVIDIA upstream and the Ascend forks): ``grouped_layout[g]`` is the
    exclusive end row of group g; group g starts at ``align(grouped_layout[g-1], mk_alignment)``.
    ``"counts"`` (the official DeepGEMM-Ascend binding's wording): ``grouped_layout[g]`` is group g's
    row count, with the same aligned placement. The two cannot be told apart from the values, so
    the form is chosen here (or with ``DG_PSUM_LAYOUT_FORM``), never guessed."""
    if form not in _PSUM_FORMS:
        raise V.fail("form", f"one of {_PSUM_FORMS}", repr(form))
    _state.psum_layout_form = form


def get_psum_layout_form() -> str:
    if _state.psum_layout_form is not None:
        return _state.psum_layout_form
    form = os.environ.get("DG_PSUM_LAYOUT_FORM", "end_rows")
    if form not in _PSUM_FORMS:
        raise V.fail("DG_PSUM_LAYOUT_FORM", f"one of {_PSUM_FORMS}", repr(form))
    return form


def resolve_use_psum_layout(use_psum_layout, device) -> bool:
    """``use_psum_layout`` as given, or for None the path's default: True on the Ascend path (the
    layout DeepGEMM-Ascend requires and defaults to), False (``m_indices`` / ``ks_cpu``) otherwise."""
    if use_psum_layout is None:
        return ascend_defaults(device)
    return V.boolean("use_psum_layout", use_psum_layout)
