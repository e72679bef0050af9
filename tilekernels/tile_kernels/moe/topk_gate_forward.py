"""``moe_topk_gate_forward``: TileKernels 2.x's DeepSeek-V4.1 router (sqrt-softplus scores, bias or image
bias, optional fixed / random / masked tokens, shared-expert slots, logical -> physical replicas). The
semantics are in ``tile_kernels.reference.moe_topk_gate``; CPU tensors run the host kernel
(``host/moe_topk_gate.cpp``), NPU tensors the Ascend kernel (``ascend/moe_topk_gate.py``)."""
from __future__ import annotations

import torch

from deepjit import Impl, descriptors, guard
from deepjit import validation as C

from .._dispatch import TABLE
from .._lib import LIB, host_kernel, threads
from ..ascend import moe_topk_gate as ascend_gate
from ..reference import moe_topk_gate as ref

WARP = 32   # upstream routes a token per warp: at most 32 physical slots


def moe_topk_gate_forward(logits: torch.Tensor, num_topk: int, use_shared_as_routed: bool, num_shared_experts: int,
                          routed_scaling_factor: float, ep_rank: int, scoring_func: str = "sqrtsoftplus",
                          mask: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                          image_bias: torch.Tensor | None = None, image_token_mask: torch.Tensor | None = None,
                          fix_routing_mask: torch.Tensor | None = None, to_physical_map: torch.Tensor | None = None,
                          logical_count: torch.Tensor | None = None, unmapped_topk_idx: torch.Tensor | None = None,
                          force_random: torch.Tensor | None = None,
                          out: tuple[torch.Tensor, torch.Tensor] | None = None,
                          scores: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(topk_idx int64, topk_weights fp32)``, both ``[T, num_topk + S]`` (``out`` when given)."""
    if scoring_func != "sqrtsoftplus":
        raise C.fail("scoring_func", "'sqrtsoftplus' (the only scoring moe_topk_gate_forward has)", repr(scoring_func))
    C.tensor("logits", logits, dtypes=(torch.float32,), ndim=2, contiguous=True)
    t, e = logits.shape
    C.integer("num_topk", num_topk, 1, min(WARP, e))
    use_shared = C.boolean("use_shared_as_routed", use_shared_as_routed, allow_int=True)
    s = C.integer("num_shared_experts", num_shared_experts, 1, 2) if use_shared else 0
    if num_topk + s > WARP:
        raise C.fail("num_topk", f"num_topk + num_shared_experts <= {WARP}", num_topk + s)
    C.number("routed_scaling_factor", routed_scaling_factor)
    C.integer("ep_rank", ep_rank, 0)
    C.optional("bias", bias, dtypes=(torch.float32,), shape=(e,), contiguous=True)
    if (image_bias is None) != (image_token_mask is None):
        raise C.fail("image_bias/image_token_mask", "both given or both None",
                     f"image_bias {'given' if image_bias is not None else 'None'}, image_token_mask "
                     f"{'given' if image_token_mask is not None else 'None'}")
    C.optional("image_bias", image_bias, dtypes=(torch.float32,), shape=(e,), contiguous=True)
    C.optional("image_token_mask", image_token_mask, dtypes=(torch.bool,), shape=(t,), contiguous=True)
    C.optional("mask", mask, dtypes=(torch.bool,), shape=(t,))
    C.optional("force_random", force_random, dtypes=(torch.bool,), shape=(t,), contiguous=True)
    C.optional("unmapped_topk_idx", unmapped_topk_idx, dtypes=(torch.int64,), shape=(t, num_topk),
               last_stride_one=True)
    C.optional("fix_routing_mask", fix_routing_mask, dtypes=(torch.bool,), shape=(t,), contiguous=True)
    if fix_routing_mask is not None and unmapped_topk_idx is None:
        raise C.fail("unmapped_topk_idx", "the fixed selections (fix_routing_mask is given)", None)
    if (to_physical_map is None) != (logical_count is None):
        raise C.fail("to_physical_map/logical_count", "both given or both None",
                     f"to_physical_map {'given' if to_physical_map is not None else 'None'}")
    if to_physical_map is not None:
        C.tensor("to_physical_map", to_physical_map, dtypes=(torch.int32,), ndim=2, contiguous=True)
        C.shape("to_physical_map", to_physical_map, (e + s, to_physical_map.shape[1]))
        C.tensor("logical_count", logical_count, dtypes=(torch.int32,), shape=(e + s,), contiguous=True)
    C.optional("scores", scores, dtypes=(torch.float32,), shape=(t, e), contiguous=True)
    if out is None:
        topk_idx = torch.empty((t, num_topk + s), dtype=torch.int64, device=logits.device)
        topk_weights = torch.empty((t, num_topk + s), dtype=torch.float32, device=logits.device)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise C.fail("out", "a (topk_idx, topk_weights) pair", type(out).__name__, TypeError)
        topk_idx, topk_weights = out
        C.tensor("out[0]", topk_idx, dtypes=(torch.int64,), shape=(t, num_topk + s))
        C.tensor("out[1]", topk_weights, dtypes=(torch.float32,), shape=(t, num_topk + s))
    C.same_device(logits=logits, bias=bias, image_bias=image_bias, image_token_mask=image_token_mask, mask=mask,
                  fix_routing_mask=fix_routing_mask, to_physical_map=to_physical_map, logical_count=logical_count,
                  unmapped_topk_idx=unmapped_topk_idx, force_random=force_random, out_0=topk_idx,
                  out_1=topk_weights, scores=scores)
    if t == 0:
        return topk_idx, topk_weights
    if logits.device.type == "cpu":  # no host read of a device tensor: the Ascend kernel clamps ids and counts
        _check_values(logits, mask, force_random, fix_routing_mask, unmapped_topk_idx, logical_count, to_physical_map,
                      e, num_topk + s)
    guard.warn_if_cuda("tile_kernels", logits.device)
    TABLE.run("moe_topk_gate_forward", logits.device, logits, num_topk, s, float(routed_scaling_factor), ep_rank,
              mask, bias, image_bias, image_token_mask, fix_routing_mask, to_physical_map, logical_count,
              unmapped_topk_idx, force_random, topk_idx, topk_weights, scores)
    return topk_idx, topk_weights


def _host(logits, num_topk, num_shared, scale, ep_rank, mask, bias, image_bias, image_token_mask, fix_routing_mask,
          to_physical_map, logical_count, unmapped_topk_idx, force_random, topk_idx, topk_weights, scores) -> None:
    t, e = logits.shape
    # The kernel writes dense rows: a strided out= tensor is filled through a dense copy.
    idx = topk_idx if topk_idx.is_contiguous() else torch.empty(topk_idx.shape, dtype=torch.int64)
    weights = topk_weights if topk_weights.is_contiguous() else torch.empty(topk_weights.shape, dtype=torch.float32)
    num_physical = e + num_shared if logical_count is None else int(logical_count.sum())
    dense_mask = None if mask is None else mask.contiguous()   # held until the launch returns
    args = descriptors.pack(
        descriptors.struct_type(LIB.source("host/moe_topk_gate_args.hpp"), "MoeTopkGateArgs"),
        idx_out=idx, w_out=weights, unmapped=unmapped_topk_idx, scores=scores, logits=logits, bias=bias,
        image_bias=image_bias, mask=dense_mask, image_mask=image_token_mask,
        fix=fix_routing_mask, force=force_random, phys_map=to_physical_map, logical_count=logical_count,
        map_width=0 if to_physical_map is None else to_physical_map.shape[1],
        unmapped_stride=0 if unmapped_topk_idx is None else unmapped_topk_idx.stride(0),
        T=t, E=e, K=num_topk, S=num_shared, num_physical=num_physical, scale=scale, ep_rank=ep_rank)
    host_kernel("tk_moe_topk_gate", "moe_topk_gate.cpp")(descriptors.address(args), threads())
    if idx is not topk_idx:
        topk_idx.copy_(idx)
    if weights is not topk_weights:
        topk_weights.copy_(weights)


TABLE.register("moe_topk_gate_forward", reference=ref.moe_topk_gate_forward, host=_host)
TABLE.add_ascend("moe_topk_gate_forward",
                 Impl(ascend_gate.moe_topk_gate_forward, "every option (strided outputs through dense copies) "
                      "with at most 4096 experts, a to_physical_map of at most 32 KiB and ep_rank < 2**62; FP32 "
                      "scores (the reference rounds FP64 ones: indices agree but for near-ties within a few ulps, "
                      "as upstream's test allows)", ascend_gate.accepts))


def _check_values(logits, mask, force_random, fix_routing_mask, unmapped_topk_idx, logical_count, to_physical_map,
                  num_experts, width) -> None:
    """The values upstream's kernel asserts on (finite logits of routed tokens, fixed ids in range), and
    the replica counts that index ``to_physical_map`` (an out-of-range one would read past it)."""
    routed = torch.ones(logits.shape[0], dtype=torch.bool, device=logits.device) if mask is None else mask
    if force_random is not None:
        routed = routed & ~force_random
    if not bool(torch.isfinite(logits[routed]).all()):
        raise C.fail("logits", "finite values in every routed row (upstream's kernel asserts this)", "NaN or Inf")
    if fix_routing_mask is not None:
        fixed = unmapped_topk_idx[routed & fix_routing_mask]
        if fixed.numel() and (int(fixed.min()) < 0 or int(fixed.max()) >= num_experts):
            raise C.fail("unmapped_topk_idx", f"expert ids in [0, {num_experts}) in the fix_routing_mask rows",
                         f"values in [{int(fixed.min())}, {int(fixed.max())}]")
    if logical_count is not None and logical_count.numel():
        lo, hi = int(logical_count.min()), int(logical_count.max())
        if lo < 1 or hi > to_physical_map.shape[1]:
            raise C.fail("logical_count", f"values in [1, {to_physical_map.shape[1]}] (the replicas of to_physical_map)",
                         f"values in [{lo}, {hi}]")
        if force_random is not None and bool(force_random.any()) and int(logical_count.sum()) < width:
            raise C.fail("logical_count", f"at least {width} physical experts in all for force_random",
                         int(logical_count.sum()))


def moe_topk_gate(*args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The name TileKernels gave the forward before the backward existed."""
    return moe_topk_gate_forward(*args, **kwargs)
