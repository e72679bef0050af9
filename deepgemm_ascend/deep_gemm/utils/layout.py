"""Scale-factor layouts the kernels consume, and the grouped-layout alignment settings."""
from __future__ import annotations

from ..layout import (
                      convert_packed_ue8m0,
                      get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor,
                      get_mn_major_tma_aligned_packed_ue8m0_tensor,
                      get_mn_major_tma_aligned_tensor,
                      get_tma_aligned_size,
)
from ..runtime import (
                      get_k_alignment_for_contiguous_layout,
                      get_m_alignment_for_contiguous_layout,
                      get_mk_alignment_for_contiguous_layout,
                      get_theoretical_mk_alignment_for_contiguous_layout,
                      set_mk_alignment_for_contiguous_layout,
)

__all__ = ["convert_packed_ue8m0", "get_k_alignment_for_contiguous_layout",
           "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor", "get_m_alignment_for_contiguous_layout",
           "get_mk_alignment_for_contiguous_layout", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
           "get_mn_major_tma_aligned_tensor", "get_theoretical_mk_alignment_for_contiguous_layout",
           "get_tma_aligned_size", "set_mk_alignment_for_contiguous_layout"]
