"""Scale-factor layouts the kernels consume, and the grouped-layout alignment settings."""
from __future__ import annotations

from ..runtime import (get_k_alignment_for_contiguous_layout, get_m_alignment_for_contiguous_layout,
                       get_mk_alignment_for_contiguous_layout, get_theoretical_mk_alignment_for_contiguous_layout,
                       set_mk_alignment_for_contiguous_layout)

__all__ = ["get_k_alignment_for_contiguous_layout", "get_m_alignment_for_contiguous_layout",
           "get_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout",
           "set_mk_alignment_for_contiguous_layout"]
