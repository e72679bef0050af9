"""Argument checks for dispatch and combine: every error names the argument, what was expected
and what came, and is raised before anything is sent or any caller tensor is written."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from deepjit import validation as V

from .layout import MAX_TOPK

TOPK_IDX_DTYPE = torch.int64
FP8_DTYPE = torch.float8_e4m3fn


@dataclass
class DispatchArgs:
    x: torch.Tensor
    sf: torch.Tensor | None
    topk_idx: torch.Tensor
    topk_weights: torch.Tensor | None
    stats: torch.Tensor | None
    num_experts: int
    num_max_tokens_per_rank: int
    expert_alignment: int
    handle: object
    do_cpu_sync: bool
    do_expand: bool
    do_zero_padding: bool
    col_major_sf: bool
    packed_stride: int = 0   # > 0: expert e's rows start at e * packed_stride (the V1 low-latency layout)

    @property
    def num_tokens(self) -> int:
        return self.x.shape[0]

    @property
    def hidden(self) -> int:
        return self.x.shape[1]

    @property
    def num_topk(self) -> int:
        return self.topk_idx.shape[1]


def check_dispatch(num_ranks: int, x, topk_idx, topk_weights, stats, num_experts, num_max_tokens_per_rank,
                   expert_alignment, handle, do_cpu_sync, do_expand, do_zero_padding, col_major_sf) -> DispatchArgs:
    sf = None
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise V.fail("x", "a tensor or an (x_fp8, scales) pair", f"a {type(x).__name__} of {len(x)} elements")
        x, sf = x
        V.tensor("x[0]", x, (FP8_DTYPE,), 2)
        V.tensor("x[1] (scales)", sf, (torch.float32, torch.int32), 2, device=x.device, like="x")
        if sf.shape[0] != x.shape[0]:
            raise V.fail("x[1] (scales)", f"{x.shape[0]} rows like x[0]", f"shape {tuple(sf.shape)}")
    else:
        V.tensor("x", x, (torch.bfloat16,), 2)
    if x.stride(1) != 1:
        raise V.fail("x", "contiguous rows (stride 1 along hidden)", f"strides {x.stride()}")
    if x.shape[1] * x.element_size() % 16:
        raise V.fail("x", "row bytes that are a multiple of 16", f"hidden {x.shape[1]} x {x.element_size()} bytes")
    device = x.device
    if handle is not None:
        from .handle import EPHandle
        if not isinstance(handle, EPHandle):
            raise V.fail("handle", "an EPHandle from dispatch", type(handle).__name__, TypeError)
        if topk_idx is not None:
            raise V.fail("topk_idx", "None with a cached handle (the handle holds the routing)", "a tensor")
        if do_cpu_sync:
            raise V.fail("do_cpu_sync", "False or None with a cached handle", repr(do_cpu_sync))
        handle.check_topk_idx()
        topk_idx = handle._topk_idx
        for name, value, cached in (("num_experts", num_experts, handle.num_experts),
                                    ("expert_alignment", expert_alignment, handle.expert_alignment),
                                    ("num_max_tokens_per_rank", num_max_tokens_per_rank,
                                     handle.num_max_tokens_per_rank)):
            if value is not None and value != cached:
                raise V.fail(name, f"{cached} like the cached handle", value)
        num_experts, expert_alignment = handle.num_experts, handle.expert_alignment
        num_max_tokens_per_rank = handle.num_max_tokens_per_rank
        if do_expand != handle.do_expand:
            raise V.fail("do_expand", f"{handle.do_expand} like the cached handle", do_expand)
        do_cpu_sync = False
    else:
        if topk_idx is None:
            raise V.fail("topk_idx", "a tensor without a cached handle", None)
        if num_experts is None:
            raise V.fail("num_experts", "an int without a cached handle", None)
        do_cpu_sync = True if do_cpu_sync is None else bool(do_cpu_sync)
    V.tensor("topk_idx", topk_idx, (TOPK_IDX_DTYPE,), 2, device=device, like="x")
    V.contiguous("topk_idx", topk_idx)
    T, K = topk_idx.shape
    if T != x.shape[0]:
        raise V.fail("topk_idx", f"one row per token ({x.shape[0]})", f"shape {tuple(topk_idx.shape)}")
    if not 1 <= K <= MAX_TOPK:
        raise V.fail("topk_idx", f"num_topk (dim 1) in [1, {MAX_TOPK}]", f"shape {tuple(topk_idx.shape)}")
    if topk_weights is not None:
        V.tensor("topk_weights", topk_weights, (torch.float32,), 2, device=device, like="x")
        V.contiguous("topk_weights", topk_weights)
        if tuple(topk_weights.shape) != (T, K):
            raise V.fail("topk_weights", f"shape {(T, K)} like topk_idx", tuple(topk_weights.shape))
    num_experts = V.integer("num_experts", num_experts, 1)
    if num_experts % num_ranks:
        raise V.fail("num_experts", f"a multiple of the number of ranks ({num_ranks}): experts are split evenly",
                     num_experts)
    num_max_tokens_per_rank = V.integer("num_max_tokens_per_rank", num_max_tokens_per_rank, 1)
    if T > num_max_tokens_per_rank:
        raise V.fail("x", f"at most num_max_tokens_per_rank ({num_max_tokens_per_rank}) tokens, the capacity every "
                     f"rank agreed on", f"{T} tokens")
    expert_alignment = V.integer("expert_alignment", 1 if expert_alignment is None else expert_alignment, 1)
    if do_zero_padding and not do_expand:
        raise V.fail("do_zero_padding", "False unless do_expand=True", f"{do_zero_padding!r} with do_expand={do_expand!r}")
    if stats is not None:
        V.tensor("cumulative_local_expert_recv_stats", stats, (torch.int32,), 1, device=device, like="x")
        if stats.shape[0] != num_experts // num_ranks:
            raise V.fail("cumulative_local_expert_recv_stats", f"shape ({num_experts // num_ranks},)",
                         tuple(stats.shape))
    return DispatchArgs(x, sf, topk_idx, topk_weights, stats, num_experts, num_max_tokens_per_rank,
                        expert_alignment, handle, do_cpu_sync, bool(do_expand), bool(do_zero_padding),
                        bool(col_major_sf))


@dataclass
class CombineArgs:
    x: torch.Tensor
    handle: object
    topk_weights: torch.Tensor | None
    bias: tuple


def check_combine(x, handle, topk_weights, bias, allow_multiple_reduction: bool) -> CombineArgs:
    from .handle import EPHandle
    if not isinstance(handle, EPHandle):
        raise V.fail("handle", "an EPHandle from dispatch", type(handle).__name__, TypeError)
    handle.check_topk_idx()
    V.tensor("x", x, (torch.bfloat16,), 2)
    if x.stride(1) != 1:
        raise V.fail("x", "contiguous rows (stride 1 along hidden)", f"strides {x.stride()}")
    rows = handle.num_expanded_tokens if handle.do_expand else handle.num_recv_tokens
    if x.shape[0] < handle._valid_rows_for_combine():
        raise V.fail("x", f"the {rows} rows dispatch returned", f"{x.shape[0]} rows")
    hidden = handle._plan.hidden
    if x.shape[1] != hidden:
        raise V.fail("x", f"hidden {hidden} like the dispatched tokens", f"hidden {x.shape[1]}")
    T, K = handle._topk_idx.shape
    if topk_weights is not None:
        if handle.do_expand:
            if not allow_multiple_reduction:
                raise V.fail("topk_weights", "None in an expanded combine without allow_multiple_reduction=True", "a tensor")
            V.tensor("topk_weights", topk_weights, (torch.float32,), 1, device=x.device, like="x")
            if topk_weights.shape[0] < handle._valid_rows_for_combine():
                raise V.fail("topk_weights", f"{rows} entries (one per expanded row)", topk_weights.shape[0])
        else:
            V.tensor("topk_weights", topk_weights, (torch.float32,), 2, device=x.device, like="x")
            if topk_weights.shape[1] != K or topk_weights.shape[0] < handle._valid_rows_for_combine():
                raise V.fail("topk_weights", f"shape ({rows}, {K})", tuple(topk_weights.shape))
        V.contiguous("topk_weights", topk_weights)
    if bias is None:
        biases = ()
    elif isinstance(bias, torch.Tensor):
        biases = (bias,)
    elif isinstance(bias, (tuple, list)) and len(bias) <= 2:
        biases = tuple(b for b in bias if b is not None)
    else:
        raise V.fail("bias", "None, a tensor or a tuple of at most 2 tensors", type(bias).__name__, TypeError)
    for i, b in enumerate(biases):
        V.tensor(f"bias[{i}]", b, (torch.bfloat16,), 2, device=x.device, like="x")
        if tuple(b.shape) != (T, hidden) or b.stride(1) != 1:
            raise V.fail(f"bias[{i}]", f"shape {(T, hidden)} with contiguous rows", f"{tuple(b.shape)} strides {b.stride()}")
    return CombineArgs(x, handle, topk_weights, biases)


MAX_LOW_LATENCY_HIDDEN = 32768


def expert_id_error(code: int, t: int, k: int, value: int, num_experts: int) -> str:
    """The message for an expert id a plan refused (code 1: out of range, 2: repeated within a token), one
    text for every engine."""
    if code == 1:
        return str(V.fail("topk_idx", f"expert ids in [-1, {num_experts})", f"topk_idx[{t}, {k}] = {value}"))
    return str(V.fail("topk_idx", "each expert at most once per token",
                      f"expert {value} twice in topk_idx[{t}] (slot {k})"))


def check_low_latency_dispatch(num_ranks: int, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                               stats) -> None:
    """The arguments of a V1 low-latency dispatch, the same for the host and the Ascend engine."""
    T, H = x.shape
    M = num_max_dispatch_tokens_per_rank
    if not isinstance(topk_idx, torch.Tensor) or topk_idx.dtype != TOPK_IDX_DTYPE or topk_idx.dim() != 2 \
            or topk_idx.shape[0] != T or not 1 <= topk_idx.shape[1] <= MAX_TOPK or topk_idx.device != x.device:
        raise V.fail("topk_idx", f"int64 of shape ({T}, num_topk <= {MAX_TOPK}) on {x.device}",
                     f"{getattr(topk_idx, 'dtype', type(topk_idx))} {tuple(getattr(topk_idx, 'shape', ()))}")
    if isinstance(M, bool) or not isinstance(M, int) or M <= 0:
        raise V.fail("num_max_dispatch_tokens_per_rank", "a positive int", repr(M))
    if T > M:
        raise V.fail("x", f"at most num_max_dispatch_tokens_per_rank ({M}) tokens", f"{T} tokens")
    if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts <= 0 \
            or num_experts % num_ranks:
        raise V.fail("num_experts", f"a positive multiple of the number of ranks ({num_ranks})", repr(num_experts))
    if H % 128 or H > MAX_LOW_LATENCY_HIDDEN:
        raise V.fail("x", f"a hidden size that is a multiple of 128 and at most {MAX_LOW_LATENCY_HIDDEN}", f"hidden {H}")
    e_local = num_experts // num_ranks
    if stats is not None and (not isinstance(stats, torch.Tensor) or stats.dtype != torch.int32
                              or tuple(stats.shape) != (e_local,) or not stats.is_contiguous()
                              or stats.device != x.device):
        raise V.fail("cumulative_local_expert_recv_stats", f"a contiguous int32 tensor of shape ({e_local},) on "
                     f"{x.device}", f"{getattr(stats, 'dtype', type(stats))} {tuple(getattr(stats, 'shape', ()))}"
                     + ("" if not isinstance(stats, torch.Tensor) or stats.is_contiguous() else f" strides {stats.stride()}"))


def check_low_latency_combine(x, topk_idx, topk_weights, dispatched_topk_idx: torch.Tensor,
                              shape: tuple[int, int, int], out) -> None:
    """The arguments of a V1 low-latency combine, the same for the host and the Ascend engine: ``x`` the
    ``[E_local, R*M, hidden]`` expert outputs, ``topk_idx`` the routing the dispatch got (its values are
    compared on CPU only: no device read), float32 weights of its shape, an optional contiguous BF16 out."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.bfloat16 or tuple(x.shape) != shape:
        raise V.fail("x", f"a BF16 tensor of shape {shape}", f"{getattr(x, 'dtype', type(x))} "
                     f"{tuple(getattr(x, 'shape', ()))}")
    T, K = dispatched_topk_idx.shape
    if not isinstance(topk_idx, torch.Tensor) or tuple(topk_idx.shape) != (T, K) or (
            topk_idx.device.type == "cpu" and not torch.equal(topk_idx, dispatched_topk_idx)):
        raise V.fail("topk_idx", f"the one given to the low_latency_dispatch that made the handle (shape ({T}, {K}))",
                     tuple(getattr(topk_idx, 'shape', ())))
    if not isinstance(topk_weights, torch.Tensor) or topk_weights.dtype != torch.float32 \
            or tuple(topk_weights.shape) != (T, K):
        raise V.fail("topk_weights", f"float32 of shape {(T, K)}", f"{getattr(topk_weights, 'dtype', type(topk_weights))} "
                     f"{tuple(getattr(topk_weights, 'shape', ()))}")
    if out is not None and (out.dtype != torch.bfloat16 or tuple(out.shape) != (T, shape[2])
                            or not out.is_contiguous()):
        raise V.fail("out", f"a contiguous BF16 tensor of shape {(T, shape[2])}", f"{out.dtype} {tuple(out.shape)}")
