from ..reference.moe import aux_fi, group_count, inplace_unique_group_indices, mask_indices_by_tp, normalize_weight

__all__ = ["aux_fi", "group_count", "mask_indices_by_tp", "normalize_weight", "inplace_unique_group_indices"]
