"""Mega MoE: EP dispatch -> L1 GEMM -> SwiGLU -> L2 GEMM -> EP combine, across the local ranks of a group.

On the host path the buffer lives in a ``deepjit.symm.SymmetricWindow`` (the shared-memory windows deep_ep
also uses); on the Ascend path in a ``deepjit.symm.DeviceWindow`` read and written by kernels
(``ascend/mega_moe.py``, which has its own account of a call). Every rank's inputs (``x``, ``x_sf``,
``topk_idx``, ``topk_weights``; on the Ascend path the kernel's copies of them) and its combine slots are mapped
by every local peer. One call on the host path:
1. each rank publishes its token count, then all ranks meet;
2. each rank pulls, from every peer's window, the (token, top-k slot) pairs routed to its experts --
   ordered by source rank, token, slot -- into a psum-grouped layout per local expert;
3. L1 (``m_grouped_*_gemm_nt_contiguous``, psum layout), SwiGLU with clamp and top-k weight, FP8 with
   per-32 UE8M0 scales (FP8xFP4 mode) or BF16 (BF16 mode), L2 likewise;
4. each L2 row is written straight into its source rank's combine slot ``[k, t]``; all ranks meet;
5. ``y[t] = bf16(sum over valid k of float(slot[k, t]))``.
Every step is a public op of this library, so the result is bitwise equal to the same pipeline run
with separate collectives. ``fast_math`` is accepted and has no effect on CPU (exact exp/div).

Weights are the upstream forms: L1 ``([E_l, 2I, H/2] FP4, SF)`` with gate rows then up rows, L2
``([E_l, H, I/2] FP4, SF)``, SFs packed UE8M0 for ``(1, 32)``; ``transform_weights_for_mega_moe``
interleaves gate/up in 8-row groups and reorders SF rows for UTCCP (or, on the Ascend path, gives
DeepGEMM-Ascend's layout), and the host path undoes that before its GEMMs; the Ascend path keeps the
interleave (its SwiGLU kernel reads it) and undoes only the scale order.
"""
from __future__ import annotations

import os
import warnings

import torch

from . import _dispatch, formats, runtime
from . import _validate as v
from .ascend import mega_moe as ascend_mega
from .grouped import m_grouped_bf16_gemm_nt_contiguous, m_grouped_fp8_fp4_gemm_nt_contiguous
from .utils.math import align, ceil_div

TOKEN_ALIGNMENT = 384           # LCM of upstream's BLOCK_M candidates
MMA_TYPES = ("fp8xfp4", "bf16xbf16")
_SLOT = 64                      # byte alignment of the views inside the window


def get_token_alignment_for_mega_moe() -> int:
    return TOKEN_ALIGNMENT


def _layout(num_ranks, max_tokens, topk, hidden, inter, ring, bf16):
    """Byte offsets of every view in a rank's window data region, and the total size."""
    views, offset = {}, 0

    def add(name, dtype, shape):
        nonlocal offset
        views[name] = (offset, dtype, shape)
        numel = 1
        for s in shape:
            numel *= s
        offset = align(offset + numel * dtype.itemsize, _SLOT)

    add("num_tokens", torch.int64, (1,))
    add("x", torch.bfloat16 if bf16 else torch.float8_e4m3fn, (max_tokens, hidden))
    if not bf16:
        add("x_sf", torch.int32, (max_tokens, hidden // 128))
    add("topk_idx", torch.int64, (max_tokens, topk))
    add("topk_weights", torch.float32, (max_tokens, topk))
    act = torch.bfloat16 if bf16 else torch.float8_e4m3fn
    add("l1_acts", act, (ring, hidden))
    add("l2_acts", act, (ring, inter))
    if not bf16:
        sf_rows = align(ring, 4)
        add("l1_acts_sf", torch.int32, (hidden // 128, sf_rows))
        add("l2_acts_sf", torch.int32, (inter // 128, sf_rows))
    add("combine", torch.bfloat16, (topk, max_tokens, hidden))
    return views, offset


class SymmBuffer:
    """The Mega MoE buffer, one symmetric window over the local ranks of ``group``.

    Fields: ``x``, ``x_sf`` (absent in BF16 mode), ``topk_idx``, ``topk_weights`` (the caller copies its
    inputs into their first T rows), ``l1_acts(_sf)``, ``l2_acts(_sf)`` (ring workspace views kept for
    layout parity; the CPU path computes in private tensors) and ``combine`` (``[topk, T_max, H]`` BF16).
    On the Ascend path the four input fields are the rank's own device tensors, which each call's kernel copies
    into the window before announcing them (``ascend/mega_moe.py``); an NPU window has no host views, so there
    the other fields and ``buffer`` are None."""

    def __init__(self, group, num_experts: int, num_max_tokens_per_rank: int, num_topk: int, hidden: int,
                 intermediate_hidden: int, num_ring_tokens: int | None = None, mma_type: str = "fp8xfp4",
                 activation: str = "swiglu", *, num_shared_experts: int = 0, base=None):
        """Upstream's signature; DeepGEMM-Ascend's keywords ``num_shared_experts`` (0 only: its fused shared
        experts are not provided) and ``base`` (None only) are taken too, and ``num_ring_tokens`` defaults by
        ``get_symm_buffer_for_mega_moe``'s rule applied to the token count as given (the Ascend constructor has
        no such argument)."""
        import torch.distributed as dist

        from deepjit.symm import SymmetricWindow
        if num_shared_experts != 0:
            raise v.fail("num_shared_experts", "0 (DeepGEMM-Ascend's fused shared experts are not provided)",
                         num_shared_experts)
        if base is not None:
            raise v.fail("base", "None (reusing another buffer's allocation is not provided)", type(base).__name__)
        if num_ring_tokens is None:
            for name, value in (("num_max_tokens_per_rank", num_max_tokens_per_rank), ("num_experts", num_experts),
                                ("num_topk", num_topk)):
                v.integer(name, value, 1)
            num_ring_tokens = _default_ring(num_max_tokens_per_rank, num_experts, num_topk,
                                            dist.get_world_size(group))
        if activation != "swiglu":
            raise v.fail("activation", "'swiglu'", repr(activation))
        if mma_type not in MMA_TYPES:
            raise v.fail("mma_type", f"one of {MMA_TYPES}", repr(mma_type))
        num_ranks = dist.get_world_size(group)
        for name, value in (("num_experts", num_experts), ("num_max_tokens_per_rank", num_max_tokens_per_rank),
                            ("num_topk", num_topk), ("hidden", hidden), ("intermediate_hidden", intermediate_hidden),
                            ("num_ring_tokens", num_ring_tokens)):
            v.integer(name, value, 1)
        if num_experts % num_ranks:
            raise v.fail("num_experts", f"a multiple of the group size {num_ranks}", num_experts)
        if hidden % 128 or intermediate_hidden % 128:
            raise v.fail("hidden/intermediate_hidden", "multiples of 128", (hidden, intermediate_hidden))
        if num_topk > num_experts:
            raise v.fail("num_topk", f"at most num_experts = {num_experts}", num_topk)
        self.group = group
        self.num_ranks, self.rank = num_ranks, dist.get_rank(group)
        self.num_experts, self.num_topk = num_experts, num_topk
        self.num_max_tokens_per_rank = num_max_tokens_per_rank
        self.hidden, self.intermediate_hidden = hidden, intermediate_hidden
        self.num_ring_tokens, self.mma_type = num_ring_tokens, mma_type
        self.bf16 = mma_type == "bf16xbf16"
        self._views, num_bytes = _layout(num_ranks, num_max_tokens_per_rank, num_topk, hidden, intermediate_hidden,
                                         num_ring_tokens, self.bf16)
        self.device = torch.device("npu" if dist.get_backend(group) == "hccl" else "cpu")
        self.on_ascend = ascend_mega.on_ascend(self.device)
        if self.on_ascend:
            self.window = ascend_mega.create_window(group, num_bytes, self.device, num_experts, num_topk,
                                                    num_max_tokens_per_rank, intermediate_hidden, self.bf16)
            self._own_rank = self.window.rank
            self.seq, self.workspaces, self.failed = 0, {}, None
        else:
            self.window = SymmetricWindow.create(group, num_bytes, name_hint="mega_moe")
            if self.window.num_local_ranks != num_ranks:
                self.window.destroy()
                raise v.fail("group", "ranks that all live on this host (the CPU Mega MoE is intra-host)",
                             f"{self.window.num_local_ranks} of {num_ranks} ranks local")
            self._own_rank = self.window.local_rank
        host_views = not self.on_ascend or self.device.type == "cpu"   # an NPU window has none (CANN SHMEM)
        for name in self._views:
            setattr(self, name, self.view(self._own_rank, name) if host_views else None)
        self.x_sf = self.view(self._own_rank, "x_sf") if not self.bf16 and host_views else None
        for name in ("l1_acts_sf", "l2_acts_sf"):
            if name in self._views and host_views:
                setattr(self, name, getattr(self, name).t())          # MN-major, strides (1, R_sf)
        if self.on_ascend:   # the caller's inputs: the rank's own tensors, which the kernel copies into the window
            for name in ("x", "x_sf", "topk_idx", "topk_weights"):
                if name in self._views:
                    _, dtype, shape = self._views[name]   # bytes, viewed: no FP8 fill kernel needed
                    raw = torch.zeros(*shape[:-1], shape[-1] * dtype.itemsize, dtype=torch.uint8, device=self.device)
                    setattr(self, name, raw.view(dtype))
        self.buffer = self._tensor(self._own_rank, torch.int8, (num_bytes,), 0) if host_views else None
        if self.buffer is not None:
            self.buffer.zero_()
        self.window.barrier()

    def _tensor(self, peer: int, dtype: torch.dtype, shape, offset: int) -> torch.Tensor:
        if self.on_ascend:
            return self.window.data(peer, dtype, shape, offset)
        return self.window.tensor(peer, dtype, shape, offset)

    def view(self, peer: int, name: str) -> torch.Tensor:
        offset, dtype, shape = self._views[name]
        return self._tensor(peer, dtype, shape, offset)

    def destroy(self) -> None:
        if getattr(self, "window", None) is not None:
            self.window.destroy()
        self.workspaces = {}   # the Ascend path's per-call tensors (ring rows)
        self.window = self.buffer = self.group = None
        self.x = self.x_sf = self.topk_idx = self.topk_weights = self.combine = None


def get_ring_limit_for_mega_moe(num_max_tokens_per_rank: int, num_experts_per_rank: int, num_topk: int,
                                num_ranks: int) -> tuple[int, int]:
    """(min, max) ring rows: one expert's worst-case intake per wave, or every local expert's."""
    per_expert = align(num_max_tokens_per_rank * num_ranks, TOKEN_ALIGNMENT)
    most = align(min(num_max_tokens_per_rank * num_ranks * num_topk, per_expert * num_experts_per_rank),
                 TOKEN_ALIGNMENT)
    return min(per_expert, most), most


def _default_ring(tokens: int, num_experts: int, num_topk: int, num_ranks: int) -> int:
    """Upstream's ring: the prefill budget from 6144 tokens a rank, else one expert's wave, within the limits."""
    low, high = get_ring_limit_for_mega_moe(tokens, max(1, num_experts // num_ranks), num_topk, num_ranks)
    return min(max(align(768 * 1024, TOKEN_ALIGNMENT) if tokens >= 6144 else low, low), high)


def get_symm_buffer_for_mega_moe(group, num_experts: int, num_max_tokens_per_rank: int, num_topk: int, hidden: int,
                                 intermediate_hidden: int, use_fp8_dispatch: bool | None = None,
                                 mma_type: str = "fp8xfp4", activation: str = "swiglu") -> SymmBuffer:
    """A buffer sized for ``num_max_tokens_per_rank`` (rounded up to 384) tokens per rank."""
    import torch.distributed as dist
    v.integer("num_max_tokens_per_rank", num_max_tokens_per_rank, 1)
    v.integer("num_experts", num_experts, 1)
    num_ranks = dist.get_world_size(group)
    tokens = align(num_max_tokens_per_rank, TOKEN_ALIGNMENT)
    if use_fp8_dispatch is not None:
        if use_fp8_dispatch != (mma_type.split("x")[0] == "fp8"):
            raise v.fail("use_fp8_dispatch", f"{mma_type.startswith('fp8')} (agreeing with mma_type {mma_type!r})",
                         use_fp8_dispatch)
        warnings.warn("use_fp8_dispatch is deprecated; pass mma_type", DeprecationWarning, stacklevel=2)
    ring = _default_ring(tokens, num_experts, num_topk, num_ranks)
    return SymmBuffer(group, num_experts, tokens, num_topk, hidden, intermediate_hidden, ring, mma_type, activation)


# ---- weight transforms ------------------------------------------------------------------------------
def _interleave_order(n: int, gran: int) -> torch.Tensor:
    """Source rows of the gate/up interleave: output block j of 2 * gran rows takes gate block j, then up block j."""
    return torch.arange(n).view(2, n // 2 // gran, gran).transpose(0, 1).reshape(n)


def _interleave(t: torch.Tensor, gran: int = 8) -> torch.Tensor:
    return _dispatch.run("permute_rows", t.device, t, _interleave_order(t.shape[1], gran))


def _deinterleave(t: torch.Tensor, gran: int = 8) -> torch.Tensor:
    return _dispatch.run("permute_rows", t.device, t, torch.argsort(_interleave_order(t.shape[1], gran)))


def _utccp(sf: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    g, mn, k = sf.shape
    if mn % 128:
        raise v.fail("weight scale rows", "a multiple of 128 (UTCCP groups)", mn)
    order = torch.arange(mn).view(mn // 128, 4, 32).transpose(1, 2).reshape(mn)  # 4 x 32 rows -> 32 x 4
    return _dispatch.run("permute_rows", sf.device, sf, torch.argsort(order) if inverse else order)


# DeepGEMM-Ascend's FP8 x FP4 layout: weights [E_l, N / 256, 256, K / 2] (N-blocks of its BLOCK_N = 256), L1 gate
# and up interleaved in 128-row halves of each block; scales int16 UE8M0 pairs [E_l, N / 256, K / 64, 256] (each
# block's rows contiguous per K pair) with +6 on every exponent byte but NaN's 255 (its FP4 dequantisation
# yields value / 64), so a byte must be <= 248 before.
ASCEND_BLOCK_N, ASCEND_GRAN, ASCEND_SF_BIAS = 256, 128, ascend_mega.ASCEND_SF_BIAS


def _ascend_layout_fits(w1: torch.Tensor, w2: torch.Tensor) -> bool:
    """DeepGEMM-Ascend's layout needs N-blocks of 256 rows and K pairs of 64 in both layers (2I always fits)."""
    return all(w.dim() == 3 and w.shape[1] % ASCEND_BLOCK_N == 0 and (2 * w.shape[2]) % 64 == 0 for w in (w1, w2))


def _to_ascend_layout(w: torch.Tensor, sf: torch.Tensor, interleave: bool, name: str = "l1_weights"):
    """(w [E, N, K/2], sf [E, N, K/128] int32 or [E, N, K/64] int16 packed UE8M0) -> DeepGEMM-Ascend's layout."""
    e, n, half_k = w.shape
    words = -(-2 * half_k // (32 * formats.PACKED_SF_DTYPES[sf.dtype]))
    v.shape(f"{name}[1]", sf, (e, n, words))
    if interleave:
        w, sf = _interleave(w, ASCEND_GRAN), _interleave(sf, ASCEND_GRAN)
    exps = sf.contiguous().view(-1).view(torch.uint8).view(e, n, -1)[..., :half_k * 2 // 32]   # a byte per 32 K
    too_big = exps.ne(255) & exps.gt(254 - ASCEND_SF_BIAS)
    if bool(too_big.any()):                                                    # a load-time check
        raise v.fail(f"{name}[1]", f"UE8M0 exponent bytes <= {254 - ASCEND_SF_BIAS} or 255 (DeepGEMM-Ascend adds "
                     f"{ASCEND_SF_BIAS})", int(exps[too_big].max()))
    biased = torch.where(exps.eq(255), exps, exps + ASCEND_SF_BIAS).contiguous().view(torch.int16)
    blocks = n // ASCEND_BLOCK_N
    sf4 = biased.view(e, blocks, ASCEND_BLOCK_N, -1).transpose(2, 3).contiguous()
    return w.reshape(e, blocks, ASCEND_BLOCK_N, half_k), sf4


def _from_ascend_layout(w4: torch.Tensor, sf4: torch.Tensor):
    """DeepGEMM-Ascend's layout -> (w [E, N, K/2] in its row order, sf int16 [E, N, K/64] pairs, unbiased): views and
    one element-wise pass over the scales on their device, no host read."""
    e, blocks, rows, half_k = w4.shape
    exps = sf4.transpose(2, 3).reshape(e, blocks * rows, -1).contiguous().view(torch.uint8)
    # bytes below the bias (never made by the transform) clamp to exponent 0 rather than wrap; the Ascend path's
    # GEMMs read the biased bytes as they lie (DeepGEMM-Ascend's reading: 2^(byte - 6 - 127) with the value / 64)
    unbiased = torch.where(exps.eq(255), exps, exps.clamp(min=ASCEND_SF_BIAS) - ASCEND_SF_BIAS)
    return w4.reshape(e, blocks * rows, half_k), unbiased.view(torch.int16)


def transform_weights_for_mega_moe(l1_weights, l2_weights, activation: str = "swiglu"):
    """Upstream's kernel layout: L1 gate/up interleaved in 8-row groups (weights and SF), SF rows of L1
    and L2 reordered per 128 rows for UTCCP; BF16 weights only get the L1 interleave. FP8 x FP4 weights on
    the Ascend path (NPU tensors, or ``DG_BACKEND=ascend``) take DeepGEMM-Ascend's layout instead (above);
    both Mega MoE ops accept either."""
    if activation != "swiglu":
        raise v.fail("activation", "'swiglu'", repr(activation))
    if isinstance(l1_weights, (tuple, list)):
        w1, sf1 = v.pair("l1_weights", l1_weights)
        w2, sf2 = v.pair("l2_weights", l2_weights)
        for name, t in (("l1_weights[1]", sf1), ("l2_weights[1]", sf2)):
            v.tensor(name, t, tuple(formats.PACKED_SF_DTYPES), 3)
        if ascend_mega.on_ascend(w1.device) and _ascend_layout_fits(w1, w2):   # else upstream's (both are taken)
            return _to_ascend_layout(w1, sf1, True), _to_ascend_layout(w2, sf2, False, "l2_weights")
        return (_interleave(w1), _utccp(_interleave(sf1))), (w2, _utccp(sf2))
    v.tensor("l1_weights", l1_weights, ndim=3)
    return _interleave(l1_weights), l2_weights


# ---- the SwiGLU step (a building block of both the fused op and its unfused baseline) -------------------
def swiglu_apply_weight_to_fp8(l1_out: torch.Tensor, topk_weights: torch.Tensor, activation_clamp: float | None,
                               to_fp8: bool = True):
    """``silu(min(gate, c)) * clamp(up, -c, c) * w`` per row of ``l1_out = [gate | up]`` (BF16 values, FP32
    math), then FP8 E4M3 with per-32 UE8M0 scales ``2^ceil(log2(amax / 448))`` (packed int32, K-major),
    or BF16 when ``to_fp8`` is False."""
    inter = l1_out.size(1) // 2
    gate, up = l1_out[:, :inter].float(), l1_out[:, inter:].float()
    if activation_clamp is not None:
        gate = gate.clamp(max=activation_clamp)
        up = up.clamp(-activation_clamp, activation_clamp)
    act = gate * torch.sigmoid(gate) * up * topk_weights.float().unsqueeze(1)
    if not to_fp8:
        return act.bfloat16()
    from .utils.math import per_token_cast_to_fp8
    return per_token_cast_to_fp8(act, use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)


# ---- the fused op -----------------------------------------------------------------------------------
def _expert_rows(buf: SymmBuffer):
    """Per local expert, the (source rank, token, slot) triples routed here, in that order."""
    e_local = buf.num_experts // buf.num_ranks
    first = buf._own_rank * e_local
    picks = [[] for _ in range(e_local)]
    for peer in range(buf.num_ranks):
        tokens = int(buf.view(peer, "num_tokens")[0])
        idx = buf.view(peer, "topk_idx")[:tokens]
        hits = ((idx >= first) & (idx < first + e_local)).nonzero().tolist()
        for t, k in hits:
            picks[int(idx[t, k]) - first].append((peer, t, k))
    return picks


def _run(y, l1, l2, buf: SymmBuffer, stats, activation_clamp, bf16: bool) -> None:
    buf.view(buf._own_rank, "num_tokens")[0] = y.size(0)
    buf.window.barrier()
    try:
        _compute_and_send(l1, l2, buf, stats, activation_clamp, bf16)
    except BaseException:
        buf.window.abort()          # peers waiting on this rank fail fast instead of timing out
        raise
    buf.window.barrier()
    y.copy_(combine_topk(buf.combine[:, :y.size(0)], buf.topk_idx[:y.size(0)]))
    _debug_zero(buf)


def _debug_zero(buf: SymmBuffer) -> None:
    """``DG_COMM_KERNEL_DEBUG=1`` (upstream's switch): the rank's whole buffer is zeroed after each call, so a
    call that reads what an earlier one left shows up (on an NPU window, which has no host view, only the input
    tensors: the window keeps the last call's data). Safe then: no peer reads this rank's window after its
    combine (their pulls came before their sends, which this rank's combine waited for)."""
    if os.environ.get("DG_COMM_KERNEL_DEBUG", "0") not in ("", "0"):
        for t in (buf.buffer, buf.x, buf.x_sf, buf.topk_idx, buf.topk_weights):   # an NPU window: the inputs only
            if t is not None:
                t.zero_()


def _compute_and_send(l1, l2, buf: SymmBuffer, stats, activation_clamp, bf16: bool) -> None:
    picks = _expert_rows(buf)
    alignment = runtime.get_mk_alignment_for_contiguous_layout()
    ends, starts, total = [], [], 0
    for rows in picks:
        starts.append(align(total, alignment) if starts else 0)
        total = starts[-1] + len(rows)
        ends.append(total)
    m = align(total, alignment)
    hidden = buf.hidden
    flat = [p for rows in picks for p in rows]
    order = torch.tensor([s + i for s, rows in zip(starts, picks, strict=True) for i in range(len(rows))],
                         dtype=torch.int64)
    psum = torch.tensor(ends, dtype=torch.int32)
    weights = torch.zeros(m, dtype=torch.float32)
    x = torch.zeros(m, hidden, dtype=torch.bfloat16 if bf16 else torch.float8_e4m3fn)
    x_sf = None if bf16 else torch.zeros(m, hidden // 128, dtype=torch.int32)
    for peer in range(buf.num_ranks):
        mine = [(i, t, k) for i, (p, t, k) in enumerate(flat) if p == peer]
        if not mine:
            continue
        rows = order[[i for i, _, _ in mine]]
        src = torch.tensor([t for _, t, _ in mine])
        x[rows] = buf.view(peer, "x")[src]
        if not bf16:
            x_sf[rows] = buf.view(peer, "x_sf")[src]
        weights[rows] = buf.view(peer, "topk_weights")[src, torch.tensor([k for _, _, k in mine])]
    old_form = runtime.get_psum_layout_form()
    runtime.set_psum_layout_form("end_rows")
    try:
        l1_out = torch.empty(m, l1[0].size(1) if not bf16 else l1.size(1), dtype=torch.bfloat16)
        if bf16:
            m_grouped_bf16_gemm_nt_contiguous(x, l1, l1_out, psum, use_psum_layout=True)
        else:
            m_grouped_fp8_fp4_gemm_nt_contiguous((x, x_sf), l1, l1_out, psum, recipe=(1, 1, 32), use_psum_layout=True)
        act = swiglu_apply_weight_to_fp8(l1_out, weights, activation_clamp, to_fp8=not bf16)
        l2_out = torch.empty(m, hidden, dtype=torch.bfloat16)
        if bf16:
            m_grouped_bf16_gemm_nt_contiguous(act, l2, l2_out, psum, use_psum_layout=True)
        else:
            m_grouped_fp8_fp4_gemm_nt_contiguous(act, l2, l2_out, psum, recipe=(1, 1, 32), use_psum_layout=True)
    finally:
        runtime.set_psum_layout_form(old_form)
    for i, (peer, t, k) in enumerate(flat):
        buf.view(peer, "combine")[k, t] = l2_out[order[i]]
    if stats is not None:
        stats += torch.tensor([len(rows) for rows in picks], dtype=stats.dtype)


def combine_topk(slots: torch.Tensor, topk_idx: torch.Tensor) -> torch.Tensor:
    """``y[t] = bf16(sum_k float(slots[k, t]))`` over the slots with ``topk_idx[t, k] >= 0`` (others ignored,
    whatever they hold). A building block of the fused op and its unfused baseline."""
    valid = (topk_idx.t() >= 0).unsqueeze(-1)
    return torch.where(valid, slots.float(), torch.zeros((), dtype=torch.float32)).sum(0).bfloat16()


def _check_call(y, buf, stats, activation, activation_clamp, fast_math):
    if not isinstance(buf, SymmBuffer) or buf.window is None:
        raise TypeError(f"sym_buffer: expected a live SymmBuffer, got {type(buf).__name__}")
    v.tensor("y", y, (torch.bfloat16,), 2)
    if y.size(0) > buf.num_max_tokens_per_rank or y.size(1) != buf.hidden:
        raise v.fail("y", f"shape [T <= {buf.num_max_tokens_per_rank}, {buf.hidden}]", tuple(y.shape))
    v.contiguous("y", y)
    if activation != "swiglu":
        raise v.fail("activation", "'swiglu'", repr(activation))
    if activation_clamp is not None and not (isinstance(activation_clamp, (int, float)) and activation_clamp >= 0):
        raise v.fail("activation_clamp", "None or a number >= 0", activation_clamp)
    v.boolean("fast_math", fast_math)
    e_local = buf.num_experts // buf.num_ranks
    if stats is not None:
        v.tensor("cumulative_local_expert_recv_stats", stats, (torch.int32,), 1)
        v.shape("cumulative_local_expert_recv_stats", stats, (e_local,))
    if buf.on_ascend:  # the ids stay on the device: the kernels treat ids outside [0, E) as masked
        if y.device.type != buf.device.type or (stats is not None and stats.device != y.device):
            raise v.fail("y / cumulative_local_expert_recv_stats", f"tensors on the buffer's device {buf.device}",
                         f"{y.device}" + ("" if stats is None else f" / {stats.device}"))
        if stats is not None:   # the kernel adds to e_local consecutive words
            v.contiguous("cumulative_local_expert_recv_stats", stats)
        return e_local
    idx = buf.topk_idx[:y.size(0)]
    if y.size(0) and bool(((idx < -1) | (idx >= buf.num_experts)).any()):
        raise v.fail("sym_buffer.topk_idx", f"expert ids in [-1, {buf.num_experts})", idx.tolist())
    return e_local


def _check_ascend_weights(y: torch.Tensor, **weights: torch.Tensor) -> None:
    """The Ascend GEMMs take dense expert groups on y's device: refused here, before the dispatch kernel runs
    (a failure after it leaves the peers waiting)."""
    v.same_device([("y", y), *weights.items()])
    for name, w in weights.items():
        v.contiguous(name, w)


def fp8_fp4_mega_moe(y: torch.Tensor, l1_weights, l2_weights, sym_buffer: SymmBuffer,
                     cumulative_local_expert_recv_stats: torch.Tensor | None = None, recipe=(1, 1, 32),
                     activation: str = "swiglu", activation_clamp: float | None = None,
                     fast_math: bool = True, *, shared_l1_weights=None, shared_l2_weights=None) -> None:
    """FP8 activations x FP4 weights; inputs are read from ``sym_buffer``'s first ``y.size(0)`` rows.
    DeepGEMM-Ascend's ``shared_l1_weights`` / ``shared_l2_weights`` are taken as None only."""
    for name, w in (("shared_l1_weights", shared_l1_weights), ("shared_l2_weights", shared_l2_weights)):
        if w is not None:
            raise v.fail(name, "None (DeepGEMM-Ascend's fused shared experts are not provided)", type(w).__name__)
    e_local = _check_call(y, sym_buffer, cumulative_local_expert_recv_stats, activation, activation_clamp, fast_math)
    if sym_buffer.bf16:
        raise v.fail("sym_buffer", "a buffer made with mma_type 'fp8xfp4'", sym_buffer.mma_type)
    if tuple(recipe) != (1, 1, 32):
        raise v.fail("recipe", "(1, 1, 32)", recipe)
    h, inter = sym_buffer.hidden, sym_buffer.intermediate_hidden
    w1, sf1 = v.pair("l1_weights", l1_weights)
    w2, sf2 = v.pair("l2_weights", l2_weights)
    if isinstance(w1, torch.Tensor) and w1.dim() == 4:   # DeepGEMM-Ascend's layout
        blocks = ASCEND_BLOCK_N
        if h % blocks:
            raise v.fail("l1_weights", f"upstream's layout: DeepGEMM-Ascend's needs hidden a multiple of {blocks}",
                         f"hidden {h}")
        for name, w, sf, n, k in (("l1_weights", w1, sf1, 2 * inter, h), ("l2_weights", w2, sf2, h, inter)):
            v.tensor(f"{name}[0]", w, formats.FP4_DTYPES, 4)
            v.shape(f"{name}[0]", w, (e_local, n // blocks, blocks, k // 2))
            v.tensor(f"{name}[1]", sf, (torch.int16,), 4)
            v.shape(f"{name}[1]", sf, (e_local, n // blocks, k // 64, blocks))
        if not sym_buffer.on_ascend:
            (w1, sf1), l2, gran = _from_ascend_layout(w1, sf1), _from_ascend_layout(w2, sf2), ASCEND_GRAN
    else:
        for name, w, shape in (("l1_weights[0]", w1, (e_local, 2 * inter, h // 2)),
                               ("l2_weights[0]", w2, (e_local, h, inter // 2))):
            v.tensor(name, w, formats.FP4_DTYPES, 3)
            v.shape(name, w, shape)
        for name, sf, n, k in (("l1_weights[1]", sf1, 2 * inter, h), ("l2_weights[1]", sf2, h, inter)):
            v.tensor(name, sf, tuple(formats.PACKED_SF_DTYPES), 3)   # 4 (int32) or 2 (int16) K-blocks of 32 a word
            v.shape(name, sf, (e_local, n, ceil_div(k, 32 * formats.PACKED_SF_DTYPES[sf.dtype])))
            if n % 128:
                raise v.fail(name, "rows a multiple of 128 (UTCCP groups)", n)
        if not sym_buffer.on_ascend:
            sf1, l2, gran = _utccp(sf1, inverse=True), (w2, _utccp(sf2, inverse=True)), 8
    if sym_buffer.on_ascend:  # the grouped GEMMs read either layout as it lies; SwiGLU the interleaved L1 columns
        _check_ascend_weights(y, l1_weights=w1, l2_weights=w2, l1_scales=sf1, l2_scales=sf2)
        ascend_mega.run(y, (w1, sf1), (w2, sf2), sym_buffer, cumulative_local_expert_recv_stats, activation_clamp,
                        ASCEND_GRAN if w1.dim() == 4 else 8)
        _debug_zero(sym_buffer)
        return
    l1 = (_deinterleave(w1, gran), _deinterleave(sf1, gran))
    _run(y, l1, l2, sym_buffer, cumulative_local_expert_recv_stats, activation_clamp, bf16=False)


def bf16_mega_moe(y: torch.Tensor, l1_weights: torch.Tensor, l2_weights: torch.Tensor, sym_buffer: SymmBuffer,
                  cumulative_local_expert_recv_stats: torch.Tensor | None = None, activation: str = "swiglu",
                  activation_clamp: float | None = None, fast_math: bool = True) -> None:
    """BF16 activations and weights (L1 interleaved by ``transform_weights_for_mega_moe``)."""
    e_local = _check_call(y, sym_buffer, cumulative_local_expert_recv_stats, activation, activation_clamp, fast_math)
    if not sym_buffer.bf16:
        raise v.fail("sym_buffer", "a buffer made with mma_type 'bf16xbf16'", sym_buffer.mma_type)
    h, inter = sym_buffer.hidden, sym_buffer.intermediate_hidden
    v.tensor("l1_weights", l1_weights, (torch.bfloat16,), 3)
    v.shape("l1_weights", l1_weights, (e_local, 2 * inter, h))
    v.tensor("l2_weights", l2_weights, (torch.bfloat16,), 3)
    v.shape("l2_weights", l2_weights, (e_local, h, inter))
    if sym_buffer.on_ascend:
        _check_ascend_weights(y, l1_weights=l1_weights, l2_weights=l2_weights)
        ascend_mega.run(y, l1_weights, l2_weights, sym_buffer, cumulative_local_expert_recv_stats, activation_clamp, 8)
        _debug_zero(sym_buffer)
        return
    _run(y, _deinterleave(l1_weights), l2_weights, sym_buffer, cumulative_local_expert_recv_stats, activation_clamp,
         bf16=True)
