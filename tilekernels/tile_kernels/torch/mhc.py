from ..reference.mhc import (
                             expand_to_mhc_ref,
                             mhc_head_compute_mix_ref,
                             mhc_post_ref,
                             mhc_pre_apply_mix_ref,
                             mhc_pre_norm_fn_ref,
                             mhc_pre_split_mixes_ref,
                             sinkhorn_normalize_ref,
)

__all__ = ["expand_to_mhc_ref", "sinkhorn_normalize_ref", "mhc_head_compute_mix_ref", "mhc_pre_split_mixes_ref",
           "mhc_pre_apply_mix_ref", "mhc_post_ref", "mhc_pre_norm_fn_ref"]
