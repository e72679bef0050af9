"""Top-k selection and the DeepSeek router."""
from __future__ import annotations

import torch

from deepjit import Impl, descriptors
from deepjit import validation as C

from .._dispatch import TABLE
from .._lib import LIB, host_kernel, threads
from ..ascend import routing as ascend_routing
from ..ascend import routing_helpers as ascend_helpers
from ..reference import topk as ref
from .scoring import ScoringFunc


def topk_gate(scores: torch.Tensor, num_topk: int) -> torch.Tensor:
    """Indices (int64 (T, num_topk)) of the largest scores, descending, ties -> smaller index."""
    C.tensor("scores", scores, dtypes=(torch.float32,), ndim=2, contiguous=True)
    C.integer("num_topk", num_topk, 1, scores.shape[1])
    return TABLE.run("topk_gate", scores.device, scores, num_topk)


def _topk_gate_host(scores, num_topk):
    out = torch.empty((scores.shape[0], num_topk), dtype=torch.int64)
    if scores.shape[0]:
        host_kernel("tk_topk_gate", "topk_gate.cpp")(out, scores, scores.shape[0], scores.shape[1], num_topk, threads())
    return out


TABLE.register("topk_gate", reference=ref.stable_topk, host=_topk_gate_host, ascend=ascend_routing.topk_gate)


def topk_sum_and_topk_group_idx(scores: torch.Tensor, num_topk_sum: int, num_topk_groups: int) -> torch.Tensor:
    """``scores (T, G, E_g)``: groups ranked by the sum of their ``num_topk_sum`` best scores."""
    C.tensor("scores", scores, dtypes=(torch.float32,), ndim=3, contiguous=True)
    _, g, eg = scores.shape
    C.integer("num_topk_sum", num_topk_sum, 1, min(2, eg))
    C.integer("num_topk_groups", num_topk_groups, 1, g)
    if g > 32:
        raise C.fail("scores", "at most 32 groups (dim 1)", f"shape {tuple(scores.shape)}")
    return TABLE.run("topk_sum_and_topk_group_idx", scores.device, scores, num_topk_sum, num_topk_groups)


def _topk_group_host(scores, num_topk_sum, num_topk_groups):
    t, g, eg = scores.shape
    out = torch.empty((t, num_topk_groups), dtype=torch.int64)
    if t:
        host_kernel("tk_topk_group", "topk_group.cpp")(out, scores, t, g, eg, num_topk_sum, num_topk_groups, threads())
    return out


TABLE.register("topk_sum_and_topk_group_idx", reference=ref.topk_sum_and_topk_group_idx, host=_topk_group_host)
TABLE.add_ascend("topk_sum_and_topk_group_idx",
                 Impl(ascend_helpers.topk_sum_and_topk_group_idx, "a token's num_groups * experts_per_group scores "
                      "within 16384 (one core's UB tile); longer rows take the reference",
                      ascend_helpers.topk_group_accepts))


def top2_sum_gate(logits: torch.Tensor, bias: torch.Tensor, num_topk: int, num_topk_groups: int, num_groups: int,
                  use_shared_as_routed: bool, num_shared_experts: int, routed_scaling_factor: float, ep_rank: int,
                  num_ep_ranks: int, tp_rank: int, num_tp_ranks: int, scoring_func: str,
                  mask: torch.Tensor | None = None, fix_routing_mask: torch.Tensor | None = None,
                  to_physical_map: torch.Tensor | None = None, logical_count: torch.Tensor | None = None,
                  unmapped_topk_idx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The DeepSeek router; returns ``(topk_idx int64, topk_weights fp32)``, both (T, num_topk + S)."""
    C.tensor("logits", logits, dtypes=(torch.float32,), ndim=2, contiguous=True)
    t, e = logits.shape
    C.tensor("bias", bias, dtypes=(torch.float32,), shape=(e,), contiguous=True)
    if not isinstance(scoring_func, str):
        raise C.fail("scoring_func", "a str", type(scoring_func).__name__, TypeError)
    scoring = ScoringFunc.from_str(scoring_func)
    if scoring == ScoringFunc.IDENTITY:
        raise C.fail("scoring_func", "'sigmoid', 'sqrtsoftplus' or 'softmax' (top2_sum_gate does not support "
                     "'identity')", repr(scoring_func))
    if e % 4:
        raise C.fail("logits", "a routed expert count (dim 1) that is a multiple of 4", f"shape {tuple(logits.shape)}")
    C.integer("num_topk", num_topk, 1, min(32, e))
    C.integer("num_groups", num_groups, 0)
    C.integer("num_topk_groups", num_topk_groups, 0)
    if num_groups != num_topk_groups:
        if num_groups == 0 or num_groups > 32 or e % num_groups or e // num_groups > 32 or e // num_groups < 2:
            raise C.fail("num_groups", f"a count dividing the {e} experts into at most 32 groups of 2 to 32", num_groups)
        C.integer("num_topk_groups", num_topk_groups, 1, num_groups)
    use_shared = bool(use_shared_as_routed)
    s = 0
    if use_shared:
        s = C.integer("num_shared_experts", num_shared_experts, 1, 2)
        if num_topk % s:
            raise C.fail("num_topk", f"a multiple of num_shared_experts ({s}) with shared experts as routed", num_topk)
    C.number("routed_scaling_factor", routed_scaling_factor)
    C.integer("num_ep_ranks", num_ep_ranks, 1)
    C.integer("ep_rank", ep_rank, 0, num_ep_ranks - 1)
    C.integer("num_tp_ranks", num_tp_ranks, 1)
    C.integer("tp_rank", tp_rank, 0, num_tp_ranks - 1)
    C.optional("mask", mask, dtypes=(torch.bool,), shape=(t,), contiguous=True)
    C.optional("fix_routing_mask", fix_routing_mask, dtypes=(torch.bool,), shape=(t,), contiguous=True)
    C.optional("unmapped_topk_idx", unmapped_topk_idx, dtypes=(torch.int64,), shape=(t, num_topk), last_stride_one=True)
    if fix_routing_mask is not None and unmapped_topk_idx is None:
        raise C.fail("unmapped_topk_idx", "a tensor (the fixed selections) when fix_routing_mask is given", None)
    if (to_physical_map is None) != (logical_count is None):
        missing, given = ("logical_count", "to_physical_map") if logical_count is None else \
            ("to_physical_map", "logical_count")
        raise C.fail(missing, f"a tensor ({given} is given: the two go together)", None)
    extra = 0
    if to_physical_map is not None:
        C.tensor("to_physical_map", to_physical_map, dtypes=(torch.int32,), ndim=2, contiguous=True)
        if to_physical_map.shape[0] != e + s:
            raise C.fail("to_physical_map", f"{e + s} rows (routed + shared)", f"shape {tuple(to_physical_map.shape)}")
        C.tensor("logical_count", logical_count, dtypes=(torch.int32,), shape=(e + s,), contiguous=True)
        extra = to_physical_map.shape[1] - 1
        if s > extra:
            raise C.fail("to_physical_map", f"at least {s} extra columns (after the first) for the shared experts",
                         f"{extra} (shape {tuple(to_physical_map.shape)})")
    # value checks on CPU tensors only (no host read of a device tensor: graph capture); the Ascend kernel
    # clamps replica counts into [1, extra + 1] and fixed ids into [0, E)
    on_host = logits.device.type == "cpu"
    if on_host and logical_count is not None and logical_count.numel() and (
            int(logical_count.min()) < 1 or int(logical_count.max()) > extra + 1):
        raise C.fail("logical_count", f"entries in [1, {extra + 1}]",
                     f"values in [{int(logical_count.min())}, {int(logical_count.max())}]")
    if on_host and fix_routing_mask is not None and bool(fix_routing_mask.any()):
        fixed = unmapped_topk_idx[fix_routing_mask]
        if fixed.numel() and (int(fixed.min()) < 0 or int(fixed.max()) >= e):
            raise C.fail("unmapped_topk_idx", f"expert ids in [0, {e}) in the rows fix_routing_mask selects",
                         f"values in [{int(fixed.min())}, {int(fixed.max())}]")
    if (e + extra) // num_ep_ranks == 0:
        raise C.fail("num_ep_ranks", f"at most the expert count ({e + extra})", num_ep_ranks)
    C.same_device(logits=logits, bias=bias, mask=mask, fix_routing_mask=fix_routing_mask,
                  to_physical_map=to_physical_map, logical_count=logical_count, unmapped_topk_idx=unmapped_topk_idx)
    return TABLE.run("top2_sum_gate", logits.device, logits, bias, num_topk, num_topk_groups, num_groups, use_shared,
                     num_shared_experts, routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks,
                     scoring_func, mask, fix_routing_mask, to_physical_map, logical_count, unmapped_topk_idx)


def _top2_sum_gate_host(logits, bias, num_topk, num_topk_groups, num_groups, use_shared, num_shared_experts,
                        routed_scaling_factor, ep_rank, num_ep_ranks, tp_rank, num_tp_ranks, scoring_func, mask,
                        fix_routing_mask, to_physical_map, logical_count, unmapped_topk_idx):
    t, e = logits.shape
    s = num_shared_experts if use_shared else 0
    extra = 0 if to_physical_map is None else to_physical_map.shape[1] - 1
    scoring = ScoringFunc.from_str(scoring_func)
    idx = torch.empty((t, num_topk + s), dtype=torch.int64)
    w = torch.empty((t, num_topk + s), dtype=torch.float32)
    if t:
        args = descriptors.pack(
            descriptors.struct_type(LIB.source("host/router_args.hpp"), "Top2SumGateArgs"),
            idx_out=idx, w_out=w, unmapped=unmapped_topk_idx, logits=logits, bias=bias, mask=mask,
            fix=fix_routing_mask, phys_map=to_physical_map, logical_count=logical_count, map_width=extra + 1,
            T=t, E=e, K=num_topk, num_topk_groups=num_topk_groups, num_groups=num_groups, S=s,
            scale=float(routed_scaling_factor), ep_rank=ep_rank, experts_per_rank=(e + extra) // num_ep_ranks,
            tp_rank=tp_rank, num_tp_ranks=num_tp_ranks, scoring=int(scoring))
        host_kernel("tk_top2_sum_gate", "router.cpp")(descriptors.address(args), threads())
    return idx, w


def _contiguous_unmapped(*args) -> bool:
    unmapped_topk_idx = args[-1]
    return unmapped_topk_idx is None or unmapped_topk_idx.is_contiguous()


TABLE.register("top2_sum_gate", reference=ref.top2_sum_gate,
               host=Impl(_top2_sum_gate_host, "a contiguous unmapped_topk_idx (or none)", _contiguous_unmapped),
               ascend=Impl(ascend_routing.top2_sum_gate, "every input (a row-strided unmapped_topk_idx through a "
                           "dense copy, written back)"))
