"""mHC ops as autograd functions. Residual gradients are handed over through the residual's
storage: ``mhc_post`` backward leaves ``d_residual`` on ``residual.untyped_storage().grad_from_mhc_post``,
and ``mhc_pre_norm_fn`` / ``mhc_pre_apply_mix`` backward add theirs into it in place."""
from .expand import expand_to_mhc
from .head_compute_mix import mhc_head_compute_mix
from .multilayer_recompute import mhc_multilayer_recompute
from .norm_fn import mhc_pre_norm_fn
from .post import mhc_post, mhc_post_bwd, mhc_post_fwd
from .pre_apply_mix import mhc_pre_apply_mix
from .pre_big_fuse import mhc_pre_big_fuse
from .pre_split_mixes import mhc_pre_split_mixes
from .sinkhorn import sinkhorn_normalize

__all__ = ["expand_to_mhc", "mhc_head_compute_mix", "mhc_multilayer_recompute", "mhc_pre_norm_fn", "mhc_post",
           "mhc_post_bwd", "mhc_post_fwd", "mhc_pre_apply_mix", "mhc_pre_big_fuse", "mhc_pre_split_mixes",
           "sinkhorn_normalize"]
