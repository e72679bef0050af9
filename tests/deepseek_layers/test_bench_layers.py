"""Benchmarks (make bench): each layer at a modest DeepSeek-like size against the same layer written
with plain torch BF16 ops (eager, the way DeepSeek's reference inference code writes it: an expert
loop for the MoE, dense attention under a top-k mask for DSA). FLOPs count the useful work once for
both sides (routed/shared expert GEMMs and router; projections, indexer over the causal range and
attention over the attended tokens), so the ratio is the time ratio.

The machine is shared: the layer and its baseline are timed alternately, each keeping its best."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from deepseek_layers.dsa import DSA, KV_LORA_RANK, LATENT_DIM, ROPE_DIM, DSACache, DSAConfig, DSAWeights
from deepseek_layers.moe import MoE, MoEConfig, MoEWeights
from tests.deepseek_layers import references as ref
from tests.testkit.bench_plugin import Bench
from tests.testkit.numerics import calc_diff, randn

pytestmark = pytest.mark.bench

# DeepSeek-V3's routing (8 groups, 4 kept, scaled sigmoid weights, 2 shared experts) at a quarter
# of its width and 64 experts.
MOE = MoEConfig(hidden=2048, moe_inter_dim=512, n_routed_experts=64, n_activated_experts=6, n_expert_groups=8,
                n_limited_groups=4, n_shared_experts=2, route_scale=2.5)
# DeepSeek-V3.2's attention shape (64 heads, 576-dim latent, 64 indexer heads of 128) at dim 2048.
DSA_CFG = DSAConfig(dim=2048, q_lora_rank=512, n_heads=64, index_n_heads=64, index_head_dim=128, index_topk=512)


# ---- MoE ---------------------------------------------------------------------------------------
class TorchMoE:
    """The MoE in eager torch BF16: FP32 router, then one gathered BF16 FFN per selected expert."""

    def __init__(self, cfg: MoEConfig, w: MoEWeights):
        self.cfg, self.w = cfg, w

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        cfg, w = self.cfg, self.w
        idx, weights = ref.route(x, w.gate, w.gate_bias, cfg.n_activated_experts, cfg.n_expert_groups,
                                 cfg.n_limited_groups, cfg.route_scale, cfg.score_func)
        out = torch.zeros(x.shape[0], cfg.hidden, dtype=torch.bfloat16)
        for e in idx.unique().tolist():
            tokens, slot = (idx == e).nonzero(as_tuple=True)
            gate, up = (x[tokens] @ w.w13[e].T).chunk(2, dim=-1)
            y = (F.silu(gate) * up) @ w.w2[e].T
            out.index_add_(0, tokens, y * weights[tokens, slot, None].bfloat16())
        gate, up = (x @ w.shared_w13.T).chunk(2, dim=-1)
        return out + (F.silu(gate) * up) @ w.shared_w2.T


def _moe_flops(cfg: MoEConfig, tokens: int) -> float:
    ffn = 2 * 3 * cfg.hidden * cfg.moe_inter_dim
    return tokens * (ffn * (cfg.n_activated_experts + cfg.n_shared_experts) + 2 * cfg.hidden * cfg.n_routed_experts)


@pytest.mark.parametrize("tokens", [128, 2048], ids=["decode-128", "prefill-2048"])
def test_moe_layer_speed(bench, tokens):
    w = MoEWeights.random(MOE, seed=0)
    layer, baseline = MoE(MOE, w), TorchMoE(MOE, w)
    x = randn(tokens, MOE.hidden, seed=1).bfloat16()
    assert calc_diff(layer(x), baseline(x)) < 5e-3  # the two sides compute the same layer
    seconds, base_seconds = Bench.paired(lambda: layer(x), lambda: baseline(x), reps=5)
    bench.record("deepseek_layers", f"MoE layer, {tokens} tokens", f"h{MOE.hidden} i{MOE.moe_inter_dim} "
                 f"e{MOE.n_routed_experts} k{MOE.n_activated_experts}", seconds, flops=_moe_flops(MOE, tokens),
                 baseline="torch BF16 eager MoE", baseline_seconds=base_seconds)


# ---- DSA ---------------------------------------------------------------------------------------
class TorchDSA:
    """The DSA layer in eager torch BF16 with BF16 caches [batch, max_len, ...]: the indexer over every
    cached key, then attention over every cached latent with the non-selected ones masked out."""

    def __init__(self, cfg: DSAConfig, w: DSAWeights, batch: int, max_len: int):
        self.cfg, self.w, self.layer = cfg, w, DSA(cfg, w)  # the layer lends its absorbed wkv_b halves
        self.latent = torch.zeros(batch, max_len, LATENT_DIM, dtype=torch.bfloat16)
        self.keys = torch.zeros(batch, max_len, cfg.index_head_dim, dtype=torch.bfloat16)
        self.lens = [0] * batch

    def _project(self, x: torch.Tensor, pos: torch.Tensor):
        cfg, w = self.cfg, self.w
        t, h, nope = x.shape[0], cfg.n_heads, cfg.qk_nope_head_dim
        cq = _norm(x @ w.wq_a.T, w.q_norm, cfg.norm_eps)
        q = (cq @ w.wq_b.T).view(t, h, nope + ROPE_DIM)
        q = torch.cat([torch.einsum("thd,hdr->thr", q[..., :nope], self.layer.w_uk),
                       _rope(q[..., nope:], pos, cfg.rope_theta)], dim=-1)
        kv = x @ w.wkv_a.T
        latent = torch.cat([_norm(kv[:, :KV_LORA_RANK], w.kv_norm, cfg.norm_eps),
                            _rope(kv[:, KV_LORA_RANK:], pos, cfg.rope_theta)], dim=-1)
        qi = (cq @ w.wq_index.T).view(t, cfg.index_n_heads, cfg.index_head_dim)
        qi = torch.cat([_rope(qi[..., :ROPE_DIM], pos, cfg.rope_theta), qi[..., ROPE_DIM:]], dim=-1)
        ki = F.layer_norm(x @ w.wk_index.T, (cfg.index_head_dim,), w.k_norm_weight.bfloat16(),
                          w.k_norm_bias.bfloat16(), cfg.norm_eps)
        ki = torch.cat([_rope(ki[:, :ROPE_DIM], pos, cfg.rope_theta), ki[:, ROPE_DIM:]], dim=-1)
        head_w = (x @ w.weights_proj.T).float() * (cfg.index_n_heads * cfg.index_head_dim) ** -0.5
        return q, latent, qi, ki, head_w

    def _attend(self, q, qi, head_w, seq: int, visible: torch.Tensor) -> torch.Tensor:
        """Rows of one sequence; ``visible`` [rows, ctx] bool (causal / context mask)."""
        ctx = visible.shape[1]
        keys, latent = self.keys[seq, :ctx], self.latent[seq, :ctx]
        logits = torch.einsum("thd,sd->tsh", qi, keys).relu_().float() @ head_w.unsqueeze(-1)
        logits = logits.squeeze(-1).masked_fill_(~visible, float("-inf"))
        top = logits.topk(min(self.cfg.index_topk, ctx), dim=-1)
        mask = torch.full_like(logits, float("-inf")).scatter_(1, top.indices, 0.0)
        mask = mask.masked_fill_(~visible, float("-inf"))
        scores = torch.einsum("thc,sc->ths", q, latent).float() * self.cfg.softmax_scale + mask.unsqueeze(1)
        o = torch.einsum("ths,sc->thc", scores.softmax(-1).bfloat16(), latent[:, :KV_LORA_RANK])
        return o

    def _output(self, o: torch.Tensor) -> torch.Tensor:
        v = torch.einsum("thr,hdr->thd", o, self.layer.w_uv)
        return v.flatten(1) @ self.w.wo.T

    def prefill(self, x: torch.Tensor, seq: int, attend: bool = True) -> torch.Tensor | None:
        """``attend=False`` only fills the caches (benchmark set-up)."""
        t = x.shape[0]
        pos = torch.arange(t)
        q, latent, qi, ki, head_w = self._project(x, pos)
        self.latent[seq, :t], self.keys[seq, :t], self.lens[seq] = latent, ki, t
        if not attend:
            return None
        causal = pos.view(1, -1) <= pos.view(-1, 1)
        return self._output(self._attend(q, qi, head_w, seq, causal))

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.tensor(self.lens)
        q, latent, qi, ki, head_w = self._project(x, pos)
        outs = []
        for b, p in enumerate(self.lens):
            self.latent[b, p], self.keys[b, p] = latent[b], ki[b]
            self.lens[b] = p + 1
            visible = torch.ones(1, p + 1, dtype=torch.bool)
            outs.append(self._attend(q[b:b + 1], qi[b:b + 1], head_w[b:b + 1], b, visible))
        return self._output(torch.cat(outs))


def _norm(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight).bfloat16()


def _rope(x, pos, theta):
    d = x.shape[-1]
    angle = pos.float().view(-1, *([1] * (x.dim() - 2)), 1) * theta ** (-torch.arange(0, d, 2).float() / d)
    a, b = x.float().unflatten(-1, (d // 2, 2)).unbind(-1)
    return torch.stack([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], -1).flatten(-2).to(x.dtype)


def _dsa_flops(cfg: DSAConfig, contexts: list[int]) -> float:
    """Per query row with ``ctx`` visible tokens: projections, indexer over ctx, attention over min(topk, ctx)."""
    h, hi, di, nope, v = cfg.n_heads, cfg.index_n_heads, cfg.index_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim
    proj = 2 * (cfg.dim * (cfg.q_lora_rank + LATENT_DIM + di + hi) + cfg.q_lora_rank * (h * (nope + ROPE_DIM) + hi * di)
                + h * nope * KV_LORA_RANK + h * v * KV_LORA_RANK + h * v * cfg.dim)
    return sum(proj + 2 * ctx * hi * di + 2 * h * min(cfg.index_topk, ctx) * (LATENT_DIM + KV_LORA_RANK)
               for ctx in contexts)


def test_dsa_prefill_speed(bench):
    t = 1024
    w = DSAWeights.random(DSA_CFG, seed=0)
    x = randn(t, DSA_CFG.dim, seed=1).bfloat16()
    layer, baseline = DSA(DSA_CFG, w), TorchDSA(DSA_CFG, w, 1, t)

    def run():
        cache = DSACache(DSA_CFG, batch=1, max_seq_len=t)
        return layer.prefill(x, cache, 0)

    assert calc_diff(run(), baseline.prefill(x, 0)) < 2e-2  # same layer (a few FP8-noise selection swaps)
    seconds, base_seconds = Bench.paired(run, lambda: baseline.prefill(x, 0), reps=3)
    bench.record("deepseek_layers", f"DSA prefill, {t} tokens", f"d{DSA_CFG.dim} h64 topk{DSA_CFG.index_topk}",
                 seconds, flops=_dsa_flops(DSA_CFG, list(range(1, t + 1))),
                 baseline="torch BF16 eager DSA (masked dense)", baseline_seconds=base_seconds)


def _fill(layer: DSA, cache: DSACache, x: torch.Tensor, seq: int) -> None:
    """What ``layer.prefill`` writes to the caches for prompt ``x`` of sequence ``seq``, without its
    attention (decode set-up: the 16 full prefills took ~30 s here)."""
    pos = torch.arange(x.shape[0])
    _, latent, _, _, key = layer._project(x, pos)
    cache.write(cache.slots(torch.full_like(pos, seq), pos), latent, key)
    cache.seq_lens[seq] = x.shape[0]


def test_dsa_decode_speed(bench):
    batch, context, steps = 16, 1024, 4
    w = DSAWeights.random(DSA_CFG, seed=0)
    layer = DSA(DSA_CFG, w)
    cache = DSACache(DSA_CFG, batch=batch, max_seq_len=context + 64)
    baseline = TorchDSA(DSA_CFG, w, batch, context + 64)
    for b in range(batch):  # the same prompts in both caches, written without attending over them
        x = randn(context, DSA_CFG.dim, seed=10 + b).bfloat16()
        _fill(layer, cache, x, b)
        baseline.prefill(x, b, attend=False)
    x = randn(batch, DSA_CFG.dim, seed=100).bfloat16()
    assert calc_diff(layer.decode(x, cache), baseline.decode(x)) < 2e-2
    # each call appends one token per sequence on its own side; the contexts stay within a few tokens
    seconds, base_seconds = Bench.paired(lambda: layer.decode(x, cache), lambda: baseline.decode(x), reps=steps)
    bench.record("deepseek_layers", f"DSA decode, batch {batch}", f"ctx {context} topk{DSA_CFG.index_topk}", seconds,
                 flops=_dsa_flops(DSA_CFG, [context + 1] * batch),
                 baseline="torch BF16 eager DSA (masked dense)", baseline_seconds=base_seconds)
