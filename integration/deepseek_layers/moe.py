"""A DeepSeek-V3-style MoE layer built from the four libraries' public APIs.

Per call, on the activations ``x`` [T, hidden] BF16:

1. router: ``logits = x @ gate.T`` (deep_gemm BF16 GEMM, FP32 out), then tile_kernels'
   ``top2_sum_gate`` (sigmoid/softmax/sqrtsoftplus scores, bias for ranking only, group-limited
   routing, weights renormalised and scaled by ``routed_scaling_factor``);
2. per-token FP8 cast of ``x`` (tile_kernels ``per_token_cast``, one FP32 scale per 128 channels);
3. dispatch to the experts' ranks (deep_ep ``EPBuffer.dispatch``, expanded layout, each expert's
   rows aligned to deep_gemm's M alignment); without a process group the same expert-major layout
   is built locally (tile_kernels ``get_fused_mapping`` + ``expand_to_fused_with_sf``);
4. gate/up projection: deep_gemm M-grouped FP8 GEMM (psum layout: each expert's rows, the padding
   between experts neither computed nor zeroed);
5. SwiGLU times the row's routing weight, cast to FP8 per token (tile_kernels
   ``swiglu_forward_and_per_token_cast``): the weight is applied here, before the down projection,
   as DeepEP V2's expanded layout expects (its combine only sums);
6. down projection: the same grouped GEMM;
7. combine (deep_ep ``EPBuffer.combine``, the shared expert's output as its ``bias``), or locally
   tile_kernels ``reduce_fused`` plus the shared expert.

Expert weights are quantised once, at construction, to E4M3 with one FP32 scale per 128x128 block
(tile_kernels ``per_block_cast``); an expert-parallel rank keeps only its own experts.

Load balancing (EPLB, ``deepseek_layers.eplb``): the layer counts the rows each of its physical
experts receives (deep_ep's ``cumulative_local_expert_recv_stats``; counted from the routing without
a group), ``expert_load()`` sums them per logical expert over the group, and ``apply_plan`` places
the experts as an ``ExpertPlan`` says: physical slot p holds logical expert ``physical_to_logical[p]``
(rank r the slots ``[r * P / R, (r + 1) * P / R)``), and the token at index t of a batch sends its
expert e to replica ``t % logical_count[e]`` of e.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

import deep_ep
import deep_gemm
from deepjit import validation as V
from deepjit.host_memory import empty_host
from deepseek_layers.eplb import ExpertPlan
from tile_kernels.moe import expand_to_fused_with_sf, get_fused_mapping, reduce_fused, top2_sum_gate
from tile_kernels.quant import per_block_cast, per_token_cast, swiglu_forward_and_per_token_cast

BLOCK = 128  # FP8 scale granularity: 1x128 for activations, 128x128 for weights


@dataclass(frozen=True)
class MoEConfig:
    """Shape and routing of the layer; field names follow DeepSeek-V3's ``ModelArgs``."""
    hidden: int
    moe_inter_dim: int
    n_routed_experts: int
    n_activated_experts: int
    n_expert_groups: int = 0          # 0 (or == n_limited_groups): no group-limited routing
    n_limited_groups: int = 0
    n_shared_experts: int = 0         # 0 or more; their SwiGLU width is n_shared_experts * moe_inter_dim
    route_scale: float = 1.0
    score_func: str = "sigmoid"

    def validate(self) -> None:
        for name in ("hidden", "moe_inter_dim", "n_routed_experts", "n_activated_experts"):
            value = getattr(self, name)
            V.integer(name, value, lo=1)
        if self.hidden % 256:
            raise V.fail("hidden", "a multiple of 256 (FP8 blocks, fused reduction)", self.hidden)
        if self.moe_inter_dim % BLOCK:
            raise V.fail("moe_inter_dim", f"a multiple of {BLOCK}", self.moe_inter_dim)
        V.integer("n_shared_experts", self.n_shared_experts, lo=0)


@dataclass
class MoEWeights:
    """BF16 master weights (all experts), as a checkpoint holds them.

    ``gate`` [E, hidden], ``gate_bias`` FP32 [E] (ranking only), ``w13`` [E, 2 * inter, hidden]
    (rows ``[0, inter)`` gate projection, ``[inter, 2 * inter)`` up projection), ``w2`` [E, hidden, inter],
    and for the shared experts ``shared_w13`` [2 * S * inter, hidden], ``shared_w2`` [hidden, S * inter]."""
    gate: torch.Tensor
    gate_bias: torch.Tensor
    w13: torch.Tensor
    w2: torch.Tensor
    shared_w13: torch.Tensor | None = None
    shared_w2: torch.Tensor | None = None

    @staticmethod
    def random(cfg: MoEConfig, seed: int = 0) -> MoEWeights:
        """Weights drawn with the usual 1/sqrt(fan_in) scale (for tests, benchmarks and the demo)."""
        g = torch.Generator().manual_seed(seed)

        def draw(*shape):
            return (torch.randn(*shape, generator=g) * shape[-1] ** -0.5).bfloat16()

        e, h, i, s = cfg.n_routed_experts, cfg.hidden, cfg.moe_inter_dim, cfg.n_shared_experts
        shared = (draw(2 * s * i, h), draw(h, s * i)) if s else (None, None)
        return MoEWeights(draw(e, h), torch.randn(e, generator=g) * 0.1, draw(e, 2 * i, h), draw(e, h, i), *shared)


def _quantize_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., N, K] BF16 -> (E4M3 [..., N, K], FP32 scales [..., N/128, K/128]) per 128x128 block."""
    flat = w.reshape(-1, *w.shape[-2:])
    parts = [per_block_cast(m.contiguous(), "e4m3", (BLOCK, BLOCK)) for m in flat]
    q = torch.stack([p[0] for p in parts]).reshape(w.shape)
    sf = torch.stack([p[1] for p in parts])
    return q, sf.reshape(*w.shape[:-2], *sf.shape[-2:])


def _check_weights(cfg: MoEConfig, w: MoEWeights) -> None:
    e, h, i, s = cfg.n_routed_experts, cfg.hidden, cfg.moe_inter_dim, cfg.n_shared_experts
    expected = {"gate": ((e, h), torch.bfloat16), "gate_bias": ((e,), torch.float32),
                "w13": ((e, 2 * i, h), torch.bfloat16), "w2": ((e, h, i), torch.bfloat16)}
    if s:
        expected.update(shared_w13=((2 * s * i, h), torch.bfloat16), shared_w2=((h, s * i), torch.bfloat16))
    for name, (shape, dtype) in expected.items():
        t = getattr(w, name)
        V.tensor(f"weights.{name}", t, dtypes=(dtype,), shape=shape)
    if not s and (w.shared_w13 is not None or w.shared_w2 is not None):
        raise V.fail("weights.shared_w13" if w.shared_w13 is not None else "weights.shared_w2",
                     "None when cfg.n_shared_experts is 0", "a tensor")


class MoE:
    """The layer. ``group``: a torch.distributed group for expert parallelism (its size must divide
    ``n_routed_experts``; rank r owns experts ``[r * E / R, (r + 1) * E / R)``), or None for one
    process without communication. ``num_max_tokens_per_rank`` sizes deep_ep's buffer (every rank
    must pass the same value); call ``destroy()`` before destroying the group. ``plan``: an EPLB
    placement (see ``apply_plan``), the same on every rank; None keeps each expert once, in order."""

    def __init__(self, cfg: MoEConfig, weights: MoEWeights, group: dist.ProcessGroup | None = None,
                 num_max_tokens_per_rank: int = 4096, plan: ExpertPlan | None = None):
        cfg.validate()
        _check_weights(cfg, weights)
        self.cfg = cfg
        self.group = group
        self.rank, self.num_ranks = (group.rank(), group.size()) if group is not None else (0, 1)
        if cfg.n_routed_experts % self.num_ranks:
            raise V.fail("group", f"a size that divides cfg.n_routed_experts ({cfg.n_routed_experts})",
                         f"size {self.num_ranks}")
        self.gate = weights.gate.contiguous()
        self.gate_bias = weights.gate_bias.contiguous()
        self.apply_plan(plan, weights)
        self.shared = None
        if cfg.n_shared_experts:
            self.shared = (_quantize_blocks(weights.shared_w13), _quantize_blocks(weights.shared_w2))
        self.alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
        self.num_max_tokens_per_rank = num_max_tokens_per_rank
        self.buffer = None
        if group is not None:
            self.buffer = deep_ep.EPBuffer(group, num_max_tokens_per_rank=num_max_tokens_per_rank, hidden=cfg.hidden,
                                           num_topk=cfg.n_activated_experts, use_fp8_dispatch=True,
                                           explicitly_destroy=True)

    def apply_plan(self, plan: ExpertPlan | None, weights: MoEWeights) -> None:
        """Places the routed experts as ``plan`` says (None: each expert once, rank r holding
        ``[r * E / R, (r + 1) * E / R)``), taking this rank's experts from the BF16 master ``weights``,
        and restarts the load counts. Every rank of the group applies the same plan."""
        e = self.cfg.n_routed_experts
        if plan is not None:
            if not isinstance(plan, ExpertPlan):
                raise V.fail("plan", "a deepseek_layers.eplb.ExpertPlan or None", type(plan).__name__, TypeError)
            plan.validate(e, self.num_ranks)
        _check_weights(self.cfg, weights)
        physical_to_logical = torch.arange(e) if plan is None else plan.physical_to_logical
        num_local = physical_to_logical.shape[0] // self.num_ranks
        local = physical_to_logical[self.rank * num_local:(self.rank + 1) * num_local]
        self.w13 = _quantize_blocks(weights.w13[local])
        self.w2 = _quantize_blocks(weights.w2[local])
        self.plan, self.physical_to_logical = plan, physical_to_logical
        self.num_physical_experts, self.num_local_experts = physical_to_logical.shape[0], num_local
        # rows received per local physical expert since the last reset (deep_ep adds to it in dispatch)
        self.local_expert_recv_stats = torch.zeros(self.num_local_experts, dtype=torch.int32)

    def reset_expert_load(self) -> None:
        self.local_expert_recv_stats.zero_()

    def expert_load(self) -> torch.Tensor:
        """int64 [n_routed_experts]: rows each logical expert received since the last reset, summed
        over its replicas and the group's ranks (a collective: every rank calls it). The ``weight``
        row ``rebalance_experts`` takes."""
        stats = self.local_expert_recv_stats.long()
        if self.group is not None:
            parts = [torch.empty_like(stats) for _ in range(self.num_ranks)]
            dist.all_gather(parts, stats, group=self.group)
            stats = torch.cat(parts)
        return torch.zeros(self.cfg.n_routed_experts, dtype=torch.int64).index_add_(0, self.physical_to_logical, stats)

    def to_physical(self, topk_idx: torch.Tensor) -> torch.Tensor:
        """Logical expert ids [T, k] -> the physical slots serving them: token t takes replica
        ``t % logical_count[e]`` of expert e (the identity without a plan; -1 stays -1)."""
        if self.plan is None:
            return topk_idx
        valid = topk_idx >= 0
        idx = topk_idx.clamp(min=0)
        replica = torch.arange(topk_idx.shape[0])[:, None] % self.plan.logical_count[idx]
        return torch.where(valid, self.plan.logical_to_physical[idx, replica], -1)

    def destroy(self) -> None:
        if self.buffer is not None:
            self.buffer.destroy()
            self.buffer = None

    # ---- pieces ----------------------------------------------------------------------------------
    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(topk_idx int64 [T, k] global expert ids, topk_weights FP32 [T, k])."""
        cfg = self.cfg
        logits = torch.empty(x.shape[0], cfg.n_routed_experts, dtype=torch.float32)
        deep_gemm.bf16_gemm_nt(x, self.gate, logits)
        # ep/tp arguments (rank, R, 0, 1): tile_kernels' EP masking is the identity with one TP rank,
        # so the ids stay global, which is what deep_ep's dispatch takes.
        return top2_sum_gate(logits, self.gate_bias, cfg.n_activated_experts, cfg.n_limited_groups,
                             cfg.n_expert_groups, False, 0, cfg.route_scale, self.rank, self.num_ranks, 0, 1,
                             cfg.score_func)

    def _experts(self, xq, layout: torch.Tensor, use_psum: bool, row_map, weights: torch.Tensor) -> torch.Tensor:
        """Gate/up GEMM, weighted SwiGLU + FP8 cast, down GEMM over expert-major rows."""
        rows, inter = xq[0].shape[0], self.cfg.moe_inter_dim
        h13 = empty_host(rows, 2 * inter, dtype=torch.bfloat16)
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous(xq, self.w13, h13, layout, use_psum_layout=use_psum,
                                                   ensure_zero_padding=False)
        pos_to_token_topk, pos_to_expert = row_map
        act = swiglu_forward_and_per_token_cast(h13, "e4m3", BLOCK, pos_to_token_topk=pos_to_token_topk,
                                                topk_weights=weights, pos_to_expert=pos_to_expert)
        y = empty_host(rows, self.cfg.hidden, dtype=torch.bfloat16)
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous(act, self.w2, y, layout, use_psum_layout=use_psum,
                                                   ensure_zero_padding=False)
        return y

    def shared_expert(self, x: torch.Tensor, xq=None) -> torch.Tensor | None:
        if self.shared is None:
            return None
        (w13, w2), cfg = self.shared, self.cfg
        xq = per_token_cast(x, "e4m3", BLOCK) if xq is None else xq
        h13 = empty_host(x.shape[0], w13[0].shape[0], dtype=torch.bfloat16)
        deep_gemm.fp8_gemm_nt(xq, w13, h13)
        act = swiglu_forward_and_per_token_cast(h13, "e4m3", BLOCK)
        out = torch.empty(x.shape[0], cfg.hidden, dtype=torch.bfloat16)
        deep_gemm.fp8_gemm_nt(act, w2, out)
        return out

    def _check_input(self, x) -> None:
        # named by the layer, before any library op would name its own argument
        V.tensor("x", x, dtypes=(torch.bfloat16,), device=self.gate.device, like="the layer's weights")
        V.tensor("x", x, shape=(None, self.cfg.hidden))
        if self.buffer is not None and x.shape[0] > self.num_max_tokens_per_rank:
            raise V.fail("x", f"at most num_max_tokens_per_rank ({self.num_max_tokens_per_rank}) tokens",
                         f"{x.shape[0]} tokens")

    # ---- forward ---------------------------------------------------------------------------------
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [T, hidden] BF16 -> [T, hidden] BF16 (routed experts' weighted sum + shared experts)."""
        self._check_input(x)
        x = x.contiguous()
        topk_idx, topk_weights = self.route(x)
        topk_idx = self.to_physical(topk_idx)
        xq = per_token_cast(x, "e4m3", BLOCK)
        if self.buffer is None:
            return self._forward_local(x, xq, topk_idx, topk_weights)
        return self._forward_ep(x, xq, topk_idx, topk_weights)

    def _forward_ep(self, x, xq, topk_idx, topk_weights) -> torch.Tensor:
        recv_x, _, recv_weights, handle, _ = self.buffer.dispatch(
            xq, topk_idx, topk_weights, cumulative_local_expert_recv_stats=self.local_expert_recv_stats,
            num_experts=self.num_physical_experts, expert_alignment=self.alignment, do_expand=True)
        psum = handle.psum_num_recv_tokens_per_expert  # exclusive end rows, expert i starts at align(end[i-1])
        rows = recv_x[0].shape[0]
        pos_to_expert = torch.full((rows,), -1, dtype=torch.int32)
        start = 0
        for expert, end in enumerate(psum.tolist()):
            pos_to_expert[start:end] = expert
            start = -(-end // self.alignment) * self.alignment
        # each expanded row carries its own weight: a [rows, 1] weight table indexed by the row itself
        pos_to_token_topk = torch.where(pos_to_expert >= 0, torch.arange(rows, dtype=torch.int32), -1)
        if deep_gemm.get_psum_layout_form() == "counts":   # deep_ep gives end rows: the same placement as counts
            starts = torch.cat([psum.new_zeros(1), (psum[:-1] + self.alignment - 1) // self.alignment * self.alignment])
            psum = psum - starts
        y = self._experts(recv_x, psum, True, (pos_to_token_topk, pos_to_expert), recv_weights.view(-1, 1))
        shared = self.shared_expert(x, xq)
        return self.buffer.combine(y, handle, bias=shared)[0]

    def _forward_local(self, x, xq, topk_idx, topk_weights) -> torch.Tensor:
        pos_to_expert, _, pos_to_token_topk, token_topk_to_pos, expert_start, *_ = get_fused_mapping(
            topk_idx, self.num_physical_experts, 0, self.alignment)
        counts = torch.bincount(topk_idx[topk_idx >= 0], minlength=self.num_physical_experts).to(torch.int32)
        self.local_expert_recv_stats += counts
        expanded = expand_to_fused_with_sf(xq, BLOCK, token_topk_to_pos, pos_to_expert)
        # A psum layout of each expert's real rows: with m_indices, every aligned block holding a row is
        # computed whole (padding too) or its padding zeroed; at decode (~12 rows per 128-row block)
        # that was ~10x the rows, and the grouped GEMMs never took their few-row path.
        psum = counts if deep_gemm.get_psum_layout_form() == "counts" else expert_start + counts
        y = self._experts(expanded, psum, True, (pos_to_token_topk, pos_to_expert), topk_weights)
        out = reduce_fused(y, None, token_topk_to_pos)
        shared = self.shared_expert(x, xq)
        return out if shared is None else shared + out
