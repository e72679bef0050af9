"""Expert-parallel load balancer: DeepSeek's EPLB placement (deepseek-ai/EPLB ``rebalance_experts``).

Given each logical expert's recent load, EPLB chooses how many copies (replicas) of each expert to
keep and which GPU holds each copy, so that the busiest GPU does as little work as possible:

* **hierarchical** (when ``num_nodes`` divides ``num_groups``): the expert groups are packed onto
  nodes with balanced node loads (group-limited routing then keeps a token's traffic mostly inside a
  few nodes); inside each node the experts are replicated, each extra replica going to the expert
  with the largest load per replica, and the replicas are packed onto the node's GPUs;
* **global** (otherwise): the same with one group on one node, experts replicated across all GPUs.

Both packings are greedy in the order of decreasing load: each item goes to the least-loaded pack
that still has room (lowest index on ties), every pack receiving the same number of items. The
placement equals upstream's for the same input (its float32 arithmetic and tie-breaking included).

``ExpertPlan`` holds one layer's plan in the form ``deepseek_layers.moe.MoE`` applies.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from deepjit import validation as V


def _balanced_packing(weight: torch.Tensor, num_packs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of items -> (pack of each item, its position in that pack), both int64 like ``weight``.

    Items are visited heaviest first, equal loads in the order torch's default (unstable) CPU sort
    gives them, as upstream's does: that order decides which replica of an expert lands where. Each
    goes to the open pack with the smallest float32 load so far, the lowest index among equals.
    Every pack takes n / num_packs items."""
    rows, n = weight.shape
    per_pack = n // num_packs
    if per_pack == 1:  # one item per pack: the identity, whatever the loads
        return torch.arange(n).expand(rows, n).clone(), torch.zeros(rows, n, dtype=torch.int64)
    pack = torch.empty(rows, n, dtype=torch.int64)
    position = torch.empty(rows, n, dtype=torch.int64)
    order = weight.sort(dim=-1, descending=True).indices
    full = torch.tensor(float("inf"))
    for r in range(rows):
        loads = torch.zeros(num_packs, dtype=torch.float32)
        counts = torch.zeros(num_packs, dtype=torch.int64)
        for item in order[r].tolist():
            p = int(torch.where(counts < per_pack, loads, full).argmin())
            pack[r, item] = p
            position[r, item] = counts[p]
            loads[p] += weight[r, item]
            counts[p] += 1
    return pack, position


def _replicate(weight: torch.Tensor, num_physical: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of logical loads [rows, n] -> (physical -> logical [rows, num_physical], replica index of
    each physical expert, replica count per logical expert [rows, n]).

    Physical expert i < n is logical expert i; each further one copies the expert whose load per
    replica is largest at that moment (the first such expert on ties)."""
    rows, n = weight.shape
    phy2log = torch.empty(rows, num_physical, dtype=torch.int64)
    phy2log[:, :n] = torch.arange(n)
    replica = torch.zeros(rows, num_physical, dtype=torch.int64)
    count = torch.ones(rows, n, dtype=torch.int64)
    row = torch.arange(rows)
    for i in range(n, num_physical):
        busiest = (weight / count).argmax(-1)
        phy2log[:, i] = busiest
        replica[:, i] = count[row, busiest]
        count[row, busiest] += 1
    return phy2log, replica, count


def _rebalance_hierarchical(weight: torch.Tensor, num_physical: int, num_groups: int, num_nodes: int,
                            num_gpus: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float32 [L, E] loads -> (physical -> logical [L, P], replica index [L, P], replica counts [L, E])."""
    layers, num_logical = weight.shape
    group_size = num_logical // num_groups
    experts_per_node, physical_per_node = num_logical // num_nodes, num_physical // num_nodes
    gpus_per_node, physical_per_gpu = num_gpus // num_nodes, num_physical // num_gpus

    # 1. groups -> nodes. A node lists its groups in packing order, each group's experts in id order:
    # node_experts[l, node, j] is the logical expert at position j of that node.
    group_node, group_position = _balanced_packing(weight.view(layers, num_groups, group_size).sum(-1), num_nodes)
    slot_of_group = group_node * (num_groups // num_nodes) + group_position             # [L, G], node-major
    slot_of_expert = (slot_of_group[:, :, None] * group_size + torch.arange(group_size)).flatten(1)
    node_experts = torch.empty_like(slot_of_expert)
    node_experts.scatter_(1, slot_of_expert, torch.arange(num_logical).expand(layers, -1))
    node_experts = node_experts.view(layers * num_nodes, experts_per_node)

    # 2. replicate inside each node
    node_loads = weight.view(-1).gather(0, (node_experts.view(layers, -1)
                                            + torch.arange(layers)[:, None] * num_logical).view(-1))
    node_loads = node_loads.view(layers * num_nodes, experts_per_node)
    phy2local, replica, local_count = _replicate(node_loads, physical_per_node)

    # 3. replicas -> the node's GPUs, balanced by each replica's share of its expert's load
    replica_loads = (node_loads / local_count).gather(1, phy2local)
    gpu, gpu_position = _balanced_packing(replica_loads, gpus_per_node)
    placed_at = gpu * physical_per_gpu + gpu_position              # where each replica lands in its node
    local_at_slot = torch.empty_like(phy2local).scatter_(1, placed_at, phy2local)
    replica_at_slot = torch.empty_like(replica).scatter_(1, placed_at, replica)

    phy2log = node_experts.gather(1, local_at_slot).view(layers, num_physical)
    count = torch.empty(layers, num_logical, dtype=torch.int64)
    count.scatter_(1, node_experts.view(layers, -1), local_count.view(layers, -1))
    return phy2log, replica_at_slot.view(layers, num_physical), count


def _positive_int(name: str, value) -> int:
    return V.integer(name, value, lo=1)


def rebalance_experts(weight: torch.Tensor, num_replicas: int, num_groups: int, num_nodes: int,
                      num_gpus: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DeepSeek's EPLB entry point.

    ``weight`` [layers, num_logical_experts]: each expert's load (token counts or their moving
    average); ``num_replicas``: physical experts per layer, a multiple of ``num_gpus``;
    ``num_groups``: expert groups of the router; ``num_nodes``: server nodes; ``num_gpus``: GPUs
    (expert-parallel ranks), a multiple of ``num_nodes`` for the hierarchical policy.

    Returns int64 CPU tensors: ``physical_to_logical_map`` [layers, num_replicas] (the logical expert
    held by each physical slot; GPU g holds slots ``[g * num_replicas / num_gpus, (g + 1) * ...)``),
    ``logical_to_physical_map`` [layers, num_logical_experts, max replica count] (each expert's slots
    by replica index, padded with -1), ``logical_count`` [layers, num_logical_experts]."""
    V.tensor("weight", weight, ndim=2)
    if weight.shape[1] == 0:
        raise V.fail("weight", "[num_layers, num_logical_experts] with at least one expert", tuple(weight.shape))
    if weight.is_complex() or weight.dtype == torch.bool:
        raise V.fail("weight", "real loads (a real dtype)", weight.dtype, TypeError)
    weight = weight.float().cpu()
    if not bool(torch.isfinite(weight).all()) or bool((weight < 0).any()):
        raise V.fail("weight", "finite loads >= 0", "a non-finite load" if not bool(torch.isfinite(weight).all())
                     else f"a negative load (min {float(weight.min())})")
    num_replicas, num_groups = _positive_int("num_replicas", num_replicas), _positive_int("num_groups", num_groups)
    num_nodes, num_gpus = _positive_int("num_nodes", num_nodes), _positive_int("num_gpus", num_gpus)
    layers, num_logical = weight.shape
    if num_replicas % num_gpus:
        raise V.fail("num_replicas", f"a multiple of num_gpus ({num_gpus})", num_replicas)
    if num_groups % num_nodes == 0:
        if num_logical % num_groups:
            raise V.fail("weight", f"a number of logical experts (dim 1) that is a multiple of num_groups ({num_groups})",
                         f"shape {tuple(weight.shape)}")
        if num_gpus % num_nodes:
            raise V.fail("num_gpus", f"a multiple of num_nodes ({num_nodes})", num_gpus)
    else:  # global policy: one group, one node
        num_groups = num_nodes = 1
    if num_replicas // num_nodes < num_logical // num_nodes:
        raise V.fail("num_replicas", f"at least the number of logical experts ({num_logical})", num_replicas)
    phy2log, replica, count = _rebalance_hierarchical(weight, num_replicas, num_groups, num_nodes, num_gpus)
    width = int(count.max())
    log2phy = torch.full((layers, num_logical * width), -1, dtype=torch.int64)
    log2phy.scatter_(1, phy2log * width + replica, torch.arange(num_replicas).expand(layers, -1))
    return phy2log, log2phy.view(layers, num_logical, width), count


@dataclass(frozen=True)
class ExpertPlan:
    """One MoE layer's placement: row ``layer`` of ``rebalance_experts``' three outputs.

    ``physical_to_logical`` int64 [P], ``logical_to_physical`` int64 [E, X] (-1 padded),
    ``logical_count`` int64 [E]. Rank r of R holds physical slots ``[r * P / R, (r + 1) * P / R)``."""
    physical_to_logical: torch.Tensor
    logical_to_physical: torch.Tensor
    logical_count: torch.Tensor

    @staticmethod
    def from_rebalance(maps: tuple[torch.Tensor, torch.Tensor, torch.Tensor], layer: int = 0) -> ExpertPlan:
        phy2log, log2phy, count = maps
        return ExpertPlan(phy2log[layer].contiguous(), log2phy[layer].contiguous(), count[layer].contiguous())

    @property
    def num_physical(self) -> int:
        return self.physical_to_logical.shape[0]

    def validate(self, num_logical: int, num_ranks: int) -> None:
        """Refuses a plan the layer cannot run: wrong shapes, a slot naming no expert, an expert
        without a replica, or maps that disagree."""
        p2l, l2p, cnt = self.physical_to_logical, self.logical_to_physical, self.logical_count
        for name, t, dim in (("physical_to_logical", p2l, 1), ("logical_to_physical", l2p, 2),
                             ("logical_count", cnt, 1)):
            V.tensor(f"plan.{name}", t, dtypes=(torch.int64,), ndim=dim)
        num_physical = p2l.shape[0]
        if num_physical % num_ranks or num_physical < num_logical:
            raise V.fail("plan.physical_to_logical", f"a number of physical experts that is a multiple of the group "
                         f"size ({num_ranks}) and at least n_routed_experts ({num_logical})",
                         f"{num_physical} physical experts")
        if l2p.shape[0] != num_logical or cnt.shape[0] != num_logical:
            name, t = ("plan.logical_to_physical", l2p) if l2p.shape[0] != num_logical else ("plan.logical_count", cnt)
            raise V.fail(name, f"{num_logical} rows (n_routed_experts)", f"shape {tuple(t.shape)}")
        if bool(((p2l < 0) | (p2l >= num_logical)).any()):
            raise V.fail("plan.physical_to_logical", f"expert ids in [0, {num_logical})",
                         f"values in [{int(p2l.min())}, {int(p2l.max())}]")
        if not torch.equal(cnt, torch.bincount(p2l, minlength=num_logical)) or bool((cnt < 1).any()):
            raise V.fail("plan.logical_count", "each expert's count of physical slots in plan.physical_to_logical, at "
                         "least one each", "an expert without a slot" if bool((cnt < 1).any())
                         else "counts that disagree with plan.physical_to_logical")
        if l2p.shape[1] < int(cnt.max()):
            raise V.fail("plan.logical_to_physical", f"at least {int(cnt.max())} columns (the largest replica count)",
                         f"shape {tuple(l2p.shape)}")
        used = torch.arange(l2p.shape[1]) < cnt[:, None]
        slots = l2p[used]
        if bool(((l2p[~used]) != -1).any()) or bool(((slots < 0) | (slots >= num_physical)).any()) \
                or torch.unique(slots).numel() != num_physical \
                or not torch.equal(p2l[slots], torch.arange(num_logical).repeat_interleave(cnt)):
            raise V.fail("plan.logical_to_physical", "each expert's own physical slots, then -1",
                         "maps that disagree with plan.physical_to_logical and plan.logical_count")
