import torch

from deepjit import validation as C

from .post import mhc_post_fwd
from .pre_apply_mix import apply_mix_fwd


def mhc_multilayer_recompute(initial_residual: torch.Tensor, pre_mix_list, layer_output_list, post_mix_list,
                             comb_mix_list, layer_input_list, residual_list) -> None:
    """Re-runs the residual stream of L layers into preallocated buffers: ``layer_input_i =
    apply_mix(R_i, pre_i)`` and, where a post mix exists, ``R_{i+1} = post(out_i, R_i, post_i, comb_i)``."""
    num_layers = len(pre_mix_list)
    num_post = len(post_mix_list)
    if num_post not in (num_layers - 1, num_layers):
        raise C.fail("post_mix_list", f"{num_layers - 1} or {num_layers} entries (one per layer in pre_mix_list, "
                     "the last optional)", f"{num_post} entries")
    for name, lst, n in (("layer_output_list", layer_output_list, num_post), ("comb_mix_list", comb_mix_list, num_post),
                         ("layer_input_list", layer_input_list, num_layers), ("residual_list", residual_list, num_post)):
        if len(lst) != n:
            raise C.fail(name, f"{n} entries", f"{len(lst)} entries")
    C.tensor("initial_residual", initial_residual, dtypes=(torch.bfloat16,), ndim=4)
    with torch.no_grad():
        r = initial_residual
        for i in range(num_layers):
            C.tensor(f"layer_input_list[{i}]", layer_input_list[i], dtypes=(torch.bfloat16,),
                     shape=(*r.shape[:-2], r.shape[-1]))
            apply_mix_fwd(r, pre_mix_list[i], layer_input_list[i])
            if i < num_post:
                C.tensor(f"residual_list[{i}]", residual_list[i], dtypes=(torch.bfloat16,), shape=tuple(r.shape))
                mhc_post_fwd(layer_output_list[i], r, post_mix_list[i], comb_mix_list[i], residual_list[i])
                r = residual_list[i]
