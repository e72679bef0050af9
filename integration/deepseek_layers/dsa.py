"""A DeepSeek Sparse Attention (DSA, DeepSeek-V3.2) layer built from the libraries' public APIs.

MLA in its absorbed form: every head attends over one shared 576-dim latent per token (512 normed
``kv_lora`` dims + 64 RoPE dims), kept in an FP8 paged cache in FlashMLA's V3.2 format (656 B/token).
The lightning indexer scores past tokens with FP8 keys kept in a second paged cache (deep_gemm's
fused layout: a page's FP8 values, then their FP32 scales); each query attends to its top-k tokens.

Per call, on ``x`` [T, dim] BF16:

1. projections (deep_gemm ``bf16_gemm_nt``; ``wkv_b`` absorbed per head through deep_gemm
   ``einsum``, the ``bhd,hdr->bhr`` form into the query and ``bhr,hdr->bhd`` onto the output),
   RMSNorm / LayerNorm / RoPE in plain torch (element-wise, no library op for them);
2. the new tokens' latents and indexer keys are quantised and written into the two caches
   (flash_mla ``quantize_k_cache``; tile_kernels ``per_token_cast``);
3. indexer logits: prefill deep_gemm ``fp8_mqa_logits`` (causal ranges), decode
   ``fp8_paged_mqa_logits`` over the paged key cache; queries are cast per (token, head) with
   their scale folded into the head weights (``relu(s * a) = s * relu(a)`` for ``s > 0``);
4. top-k positions (``torch.topk``; fewer candidates than ``index_topk`` leave -1 padding);
5. sparse attention: prefill ``flash_mla_sparse_fwd`` over the sequence's latents read back from
   the FP8 cache; decode ``flash_mla_with_kvcache`` over the FP8 cache itself;
6. ``wkv_b``'s value half and ``wo`` back to [T, dim].

Simplifications against DeepSeek-V3.2: no Hadamard rotation of the indexer's q/k, a prefill starts
a sequence (no chunked prefill onto an existing context), RoPE without YaRN scaling.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import deep_gemm
import flash_mla
from deepjit import validation as V
from tile_kernels.quant import per_token_cast

KV_LORA_RANK, ROPE_DIM = 512, 64          # fixed by the V3.2 cache record: 512 FP8 + 64 BF16 dims
LATENT_DIM = KV_LORA_RANK + ROPE_DIM
KV_FORMAT = flash_mla.KVCacheFormat.V32_FP8
RECORD_BYTES = KV_FORMAT.bytes_per_token


@dataclass(frozen=True)
class DSAConfig:
    """Field names follow DeepSeek-V3.2's ``ModelArgs``; defaults are its values where the libraries
    fix them (heads 64 or 128 for flash_mla, indexer head dim <= 128 for deep_gemm)."""
    dim: int
    q_lora_rank: int
    n_heads: int = 64
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    index_n_heads: int = 64
    index_head_dim: int = 128
    index_topk: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    @property
    def softmax_scale(self) -> float:
        return (self.qk_nope_head_dim + ROPE_DIM) ** -0.5

    def validate(self) -> None:
        for name in ("dim", "q_lora_rank", "n_heads", "qk_nope_head_dim", "v_head_dim", "index_n_heads",
                     "index_head_dim", "index_topk"):
            value = getattr(self, name)
            V.integer(name, value, lo=1)
        if self.n_heads not in (64, 128):
            raise V.fail("n_heads", "64 or 128 (flash_mla's sparse kernels)", self.n_heads)
        if self.index_head_dim not in (64, 128):
            raise V.fail("index_head_dim", "64 or 128 (deep_gemm MQA logits, RoPE on 64)", self.index_head_dim)
        if 128 % self.index_n_heads:
            raise V.fail("index_n_heads", "a divisor of 128 (deep_gemm MQA logits)", self.index_n_heads)


@dataclass
class DSAWeights:
    """BF16 projections (``[out, in]`` like ``nn.Linear``) and FP32 norm parameters."""
    wq_a: torch.Tensor        # [q_lora_rank, dim]
    q_norm: torch.Tensor      # [q_lora_rank]
    wq_b: torch.Tensor        # [n_heads * (nope + 64), q_lora_rank], per head: nope dims, then RoPE dims
    wkv_a: torch.Tensor       # [512 + 64, dim]
    kv_norm: torch.Tensor     # [512]
    wkv_b: torch.Tensor       # [n_heads * (nope + v), 512], per head: key (nope) rows, then value rows
    wo: torch.Tensor          # [dim, n_heads * v]
    wq_index: torch.Tensor    # [index_n_heads * index_head_dim, q_lora_rank], per head: RoPE dims first
    wk_index: torch.Tensor    # [index_head_dim, dim]
    k_norm_weight: torch.Tensor  # [index_head_dim] (LayerNorm)
    k_norm_bias: torch.Tensor    # [index_head_dim]
    weights_proj: torch.Tensor   # [index_n_heads, dim]

    @staticmethod
    def random(cfg: DSAConfig, seed: int = 0) -> DSAWeights:
        g = torch.Generator().manual_seed(seed)

        def lin(n_out, n_in):
            return (torch.randn(n_out, n_in, generator=g) * n_in ** -0.5).bfloat16()

        def norm(n):
            return 1 + 0.1 * torch.randn(n, generator=g)

        h, hi, di = cfg.n_heads, cfg.index_n_heads, cfg.index_head_dim
        return DSAWeights(lin(cfg.q_lora_rank, cfg.dim), norm(cfg.q_lora_rank),
                          lin(h * (cfg.qk_nope_head_dim + ROPE_DIM), cfg.q_lora_rank), lin(LATENT_DIM, cfg.dim),
                          norm(KV_LORA_RANK), lin(h * (cfg.qk_nope_head_dim + cfg.v_head_dim), KV_LORA_RANK),
                          lin(cfg.dim, h * cfg.v_head_dim), lin(hi * di, cfg.q_lora_rank), lin(di, cfg.dim),
                          norm(di), 0.1 * torch.randn(di, generator=g), lin(hi, cfg.dim))


def _shapes(cfg: DSAConfig) -> dict:
    h, hi, di, nope = cfg.n_heads, cfg.index_n_heads, cfg.index_head_dim, cfg.qk_nope_head_dim
    bf16, fp32 = torch.bfloat16, torch.float32
    return {"wq_a": ((cfg.q_lora_rank, cfg.dim), bf16), "q_norm": ((cfg.q_lora_rank,), fp32),
            "wq_b": ((h * (nope + ROPE_DIM), cfg.q_lora_rank), bf16), "wkv_a": ((LATENT_DIM, cfg.dim), bf16),
            "kv_norm": ((KV_LORA_RANK,), fp32), "wkv_b": ((h * (nope + cfg.v_head_dim), KV_LORA_RANK), bf16),
            "wo": ((cfg.dim, h * cfg.v_head_dim), bf16), "wq_index": ((hi * di, cfg.q_lora_rank), bf16),
            "wk_index": ((di, cfg.dim), bf16), "k_norm_weight": ((di,), fp32), "k_norm_bias": ((di,), fp32),
            "weights_proj": ((hi, cfg.dim), bf16)}


class DSACache:
    """Both paged caches of one layer for ``batch`` sequences of up to ``max_seq_len`` tokens.

    ``kv`` uint8 [num_blocks, page, 1, 656] (FlashMLA V3.2 records), ``index`` uint8
    [num_blocks, page, 1, index_head_dim + 4] (deep_gemm's fused FP8 key pages), ``block_table`` int32
    [batch, blocks_per_seq] (sequence b owns a shuffled set of pages), ``seq_lens`` tokens cached."""

    def __init__(self, cfg: DSAConfig, batch: int, max_seq_len: int, page_block_size: int = 64, seed: int = 0):
        if page_block_size not in (32, 64):
            raise V.fail("page_block_size", "32 or 64 (deep_gemm paged MQA logits)", page_block_size)
        V.integer("batch", batch, lo=1)
        V.integer("max_seq_len", max_seq_len, lo=1)
        self.page = page_block_size
        blocks_per_seq = -(-max_seq_len // page_block_size)
        num_blocks = batch * blocks_per_seq
        self.max_seq_len = max_seq_len
        self.kv = torch.zeros(num_blocks, page_block_size, 1, RECORD_BYTES, dtype=torch.uint8)
        self.index = torch.zeros(num_blocks, page_block_size, 1, cfg.index_head_dim + 4, dtype=torch.uint8)
        order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed))
        self.block_table = order.view(batch, blocks_per_seq).to(torch.int32).contiguous()
        self.seq_lens = torch.zeros(batch, dtype=torch.int32)
        self.index_head_dim = cfg.index_head_dim

    @property
    def batch(self) -> int:
        return self.block_table.shape[0]

    def slots(self, seq: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Physical token ids of positions ``pos`` of sequences ``seq`` (int64)."""
        return self.block_table[seq, pos // self.page].long() * self.page + pos % self.page

    def write(self, slots: torch.Tensor, latent: torch.Tensor, index_key) -> None:
        records = flash_mla.quantize_k_cache(latent.view(-1, 1, 1, LATENT_DIM), KV_FORMAT)
        self.kv.view(-1, RECORD_BYTES)[slots] = records.view(torch.uint8).reshape(-1, RECORD_BYTES)
        values, scales = index_key
        di, nb = self.index_head_dim, self.index.shape[0]
        pages = self.index.view(nb, -1)
        blk, off = slots // self.page, slots % self.page
        pages[:, :self.page * di].view(nb, self.page, di)[blk, off] = values.view(torch.uint8)
        pages[:, self.page * di:].view(torch.float32)[blk, off] = scales.view(-1)

    def latents(self, slots: torch.Tensor) -> torch.Tensor:
        """BF16 latents [n, 1, 576] read back from the FP8 cache."""
        records = self.kv.view(-1, RECORD_BYTES)[slots]
        return flash_mla.dequantize_k_cache(records.view(-1, 1, 1, RECORD_BYTES), KV_FORMAT).view(-1, 1, LATENT_DIM)


def _linear(x: torch.Tensor, w: torch.Tensor, dtype=torch.bfloat16) -> torch.Tensor:
    out = torch.empty(x.shape[0], w.shape[0], dtype=dtype)
    deep_gemm.bf16_gemm_nt(x, w, out)
    return out


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight).bfloat16()


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotates consecutive pairs of the last dim by ``pos * theta ** (-2i / d)``; x [T, ..., d]."""
    d = x.shape[-1]
    freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = pos.float().view(-1, *([1] * (x.dim() - 2)), 1) * freq
    pairs = x.float().unflatten(-1, (d // 2, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    cos, sin = angle.cos(), angle.sin()
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2).to(x.dtype)


class DSA:
    """The layer; ``prefill`` starts one sequence, ``decode`` adds one token to every sequence."""

    def __init__(self, cfg: DSAConfig, weights: DSAWeights):
        cfg.validate()
        for name, (shape, dtype) in _shapes(cfg).items():
            t = getattr(weights, name)
            V.tensor(f"weights.{name}", t, dtypes=(dtype,), shape=shape)
        self.cfg = cfg
        self.w = weights
        h, nope = cfg.n_heads, cfg.qk_nope_head_dim
        wkv_b = weights.wkv_b.view(h, nope + cfg.v_head_dim, KV_LORA_RANK)
        # DeepSeek's absorbed MLA: both halves stay [h, d, 512] and go through deep_gemm's two
        # per-head einsum forms (the key half into the query, the value half onto the output).
        self.w_uk = wkv_b[:, :nope].contiguous()   # [h, nope, 512]
        self.w_uv = wkv_b[:, nope:].contiguous()   # [h, v, 512]

    # ---- projections -----------------------------------------------------------------------------
    def _project(self, x: torch.Tensor, pos: torch.Tensor):
        cfg, w = self.cfg, self.w
        t, h, hi, di = x.shape[0], cfg.n_heads, cfg.index_n_heads, cfg.index_head_dim
        cq = _rms_norm(_linear(x, w.wq_a), w.q_norm, cfg.norm_eps)
        q = _linear(cq, w.wq_b).view(t, h, cfg.qk_nope_head_dim + ROPE_DIM)
        q_full = torch.empty(t, h, LATENT_DIM, dtype=torch.bfloat16)
        deep_gemm.einsum("bhd,hdr->bhr", q[..., :cfg.qk_nope_head_dim], self.w_uk, q_full[..., :KV_LORA_RANK])
        q_full[..., KV_LORA_RANK:] = _rope(q[..., cfg.qk_nope_head_dim:], pos, cfg.rope_theta)
        kv = _linear(x, w.wkv_a)
        latent = torch.cat([_rms_norm(kv[:, :KV_LORA_RANK], w.kv_norm, cfg.norm_eps),
                            _rope(kv[:, KV_LORA_RANK:], pos, cfg.rope_theta)], dim=-1)
        # indexer: RoPE on the first 64 dims of each query head and of the key
        qi = _linear(cq, w.wq_index).view(t, hi, di)
        qi = torch.cat([_rope(qi[..., :ROPE_DIM], pos, cfg.rope_theta), qi[..., ROPE_DIM:]], dim=-1)
        ki = torch.nn.functional.layer_norm(_linear(x, w.wk_index).float(), (di,), w.k_norm_weight, w.k_norm_bias,
                                            cfg.norm_eps).bfloat16()
        ki = torch.cat([_rope(ki[:, :ROPE_DIM], pos, cfg.rope_theta), ki[:, ROPE_DIM:]], dim=-1)
        q_fp8, q_sf = per_token_cast(qi.reshape(t * hi, di), "e4m3", di)
        head_weights = _linear(x, w.weights_proj, torch.float32) * (hi ** -0.5 * di ** -0.5) * q_sf.view(t, hi)
        k_fp8, k_sf = per_token_cast(ki, "e4m3", di)
        return q_full, latent, q_fp8.view(t, hi, di), head_weights, (k_fp8, k_sf.view(-1))

    def _select(self, logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Top-``index_topk`` positions per row among ``valid`` ones, -1 padded, int32."""
        k = self.cfg.index_topk
        logits = logits.masked_fill(~valid, float("-inf"))
        values, idx = logits.topk(min(k, logits.shape[1]), dim=-1)
        idx = torch.where(values == float("-inf"), -1, idx).to(torch.int32)
        out = torch.full((logits.shape[0], k), -1, dtype=torch.int32)
        out[:, :idx.shape[1]] = idx
        return out

    def _output(self, o: torch.Tensor) -> torch.Tensor:
        t, h = o.shape[0], self.cfg.n_heads
        v = torch.empty(t, h, self.cfg.v_head_dim, dtype=torch.bfloat16)
        deep_gemm.einsum("bhr,hdr->bhd", o, self.w_uv, v)
        return _linear(v.view(t, -1), self.w.wo)

    def _check_x(self, x, rows: int | None = None) -> None:
        V.tensor("x", x, dtypes=(torch.bfloat16,), device=self.w.wq_a.device, like="the layer's weights")
        V.tensor("x", x, shape=(rows, self.cfg.dim))

    def _check_cache(self, cache) -> None:
        if not isinstance(cache, DSACache):
            raise V.fail("cache", "a DSACache", type(cache).__name__, TypeError)
        if cache.index_head_dim != self.cfg.index_head_dim:
            raise V.fail("cache", f"a cache built for the layer config's index_head_dim {self.cfg.index_head_dim}",
                         f"one built for index_head_dim {cache.index_head_dim}")

    # ---- the two phases ----------------------------------------------------------------------------
    def prefill(self, x: torch.Tensor, cache: DSACache, seq: int, return_topk: bool = False):
        """``x`` [T, dim]: tokens 0..T-1 of sequence ``seq`` (empty so far), causal. Returns [T, dim]
        (and the attended positions int32 [T, index_topk], -1 padded, with ``return_topk``)."""
        self._check_x(x)
        self._check_cache(cache)
        V.integer("seq", seq, 0, cache.batch - 1)
        if int(cache.seq_lens[seq]):
            raise V.fail("seq", "an empty sequence of cache (prefill starts a sequence)",
                         f"seq {seq}, which already holds {int(cache.seq_lens[seq])} tokens")
        t = x.shape[0]
        if not 0 < t <= cache.max_seq_len:
            raise V.fail("x", f"1 to {cache.max_seq_len} (the cache's max_seq_len) tokens", t)
        x = x.contiguous()
        pos = torch.arange(t)
        q, latent, q_idx, head_weights, key = self._project(x, pos)
        slots = cache.slots(torch.full((t,), seq), pos)
        cache.write(slots, latent, key)
        cache.seq_lens[seq] = t
        ends = (pos + 1).to(torch.int32)
        logits = deep_gemm.fp8_mqa_logits(q_idx, key, head_weights, torch.zeros(t, dtype=torch.int32), ends)
        topk = self._select(logits, pos.view(1, -1) < ends.view(-1, 1))
        o = flash_mla.flash_mla_sparse_fwd(q, cache.latents(slots), topk.view(t, 1, -1), self.cfg.softmax_scale,
                                           KV_LORA_RANK)[0]
        out = self._output(o)
        return (out, topk) if return_topk else out

    def decode(self, x: torch.Tensor, cache: DSACache, return_topk: bool = False):
        """``x`` [batch, dim]: the next token of every sequence of ``cache``. Returns [batch, dim]
        (and the attended positions int32 [batch, index_topk], -1 padded, with ``return_topk``)."""
        self._check_cache(cache)
        self._check_x(x, cache.batch)
        b = x.shape[0]
        pos = cache.seq_lens.long()
        if int(pos.max()) >= cache.max_seq_len:
            raise V.fail("cache", f"room for one more token in every sequence (max_seq_len {cache.max_seq_len})",
                         f"sequence {int(pos.argmax())} full")
        x = x.contiguous()
        q, latent, q_idx, head_weights, key = self._project(x, pos)
        cache.write(cache.slots(torch.arange(b), pos), latent, key)
        cache.seq_lens += 1
        lens = cache.seq_lens.view(b, 1).contiguous()
        width = int(lens.max())
        meta = deep_gemm.get_paged_mqa_logits_metadata(lens, cache.page, deep_gemm.get_num_sms())
        logits = deep_gemm.fp8_paged_mqa_logits(q_idx.view(b, 1, *q_idx.shape[1:]), cache.index, head_weights,
                                                lens, cache.block_table, meta, width)
        topk = self._select(logits, torch.arange(width).view(1, -1) < lens)
        slots = flash_mla.abs_indices_to_indices_in_kvcache(topk.view(b, 1, -1), cache.block_table, cache.page)
        sched, _ = flash_mla.get_mla_metadata()
        o = flash_mla.flash_mla_with_kvcache(q.view(b, 1, *q.shape[1:]), cache.kv.view(torch.float8_e4m3fn), None,
                                             None, KV_LORA_RANK, sched, None, self.cfg.softmax_scale, False, True,
                                             indices=slots.to(torch.int32))[0]
        out = self._output(o.view(b, *o.shape[2:]))
        return (out, topk) if return_topk else out
