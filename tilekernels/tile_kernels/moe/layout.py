"""Counting, normalisation, TP masking, de-duplication, the fused (expert-major) layout and the
expand / reduce between token-major and expert-major rows."""
from __future__ import annotations

from typing import Union

import torch

from deepjit import Impl, descriptors
from deepjit import validation as C

from .._dispatch import TABLE
from .._lib import LIB, empty, host_kernel, threads
from ..ascend import expand as ascend_expand
from ..ascend import fused_mapping as ascend_fused_mapping
from ..ascend import reduce as ascend_reduce
from ..ascend import routing as ascend_routing
from ..ascend import routing_helpers as ascend_helpers
from ..reference import moe as ref

INT32_MAX = (1 << 31) - 1


def _args(name: str, **fields):
    """The named launch arguments ``name`` of host/layout_args.hpp."""
    return descriptors.pack(descriptors.struct_type(LIB.source("host/layout_args.hpp"), name), **fields)


def _index_range(name: str, t: torch.Tensor, hi: int) -> None:
    if t.numel():
        lo_v, hi_v = (int(v) for v in torch.aminmax(t))  # one pass over the indices
        if lo_v < -1 or hi_v >= hi:
            raise C.fail(name, f"entries -1 or in [0, {hi})", f"values in [{lo_v}, {hi_v}]")


_GROUP_COUNT, _AUX_FI, _MASK_TP, _UNIQUE = 0, 1, 2, 3


def _index_op(op: int, out, idx: torch.Tensor, groups: int, a: int = 0, b: int = 0, c: int = 0):
    host_kernel("tk_moe_index", "moe_index.cpp")(op, out, idx, idx.shape[0], idx.shape[1] if idx.dim() > 1 else 1,
                                                 groups, a, b, c, threads())
    return out


def group_count(group_idx: torch.Tensor, num_groups: int) -> torch.Tensor:
    """int32 (num_groups,) histogram of a 2-D int64 index tensor, -1 ignored."""
    C.tensor("group_idx", group_idx, dtypes=(torch.int64,), ndim=2, contiguous=True)
    C.integer("num_groups", num_groups, 1, INT32_MAX)
    C.allocation("num_groups", num_groups * 8, group_idx.device, f"histogram of {num_groups} groups")
    if group_idx.device.type == "cpu":  # no host read of a device tensor: the Ascend kernel skips bad ids
        _index_range("group_idx", group_idx, num_groups)
    return TABLE.run("group_count", group_idx.device, group_idx, num_groups)


def _group_count_host(group_idx, num_groups):
    return _index_op(_GROUP_COUNT, torch.empty(num_groups, dtype=torch.int32), group_idx, num_groups)


TABLE.register("group_count", reference=ref.group_count, host=_group_count_host)
TABLE.add_ascend("group_count", Impl(ascend_helpers.group_count, "every input (an id outside [0, num_groups) is "
                                     "not counted)"))


def aux_fi(topk_idx: torch.Tensor, num_experts: int, num_aux_topk: int) -> torch.Tensor:
    C.tensor("topk_idx", topk_idx, dtypes=(torch.int64,), ndim=2, contiguous=True)
    C.integer("num_experts", num_experts, 1, INT32_MAX)
    C.allocation("num_experts", num_experts * 8, topk_idx.device, f"frequencies of {num_experts} experts")
    C.integer("num_aux_topk", num_aux_topk, 1)
    if topk_idx.device.type == "cpu":  # no host read of a device tensor: the Ascend kernel skips bad ids
        _index_range("topk_idx", topk_idx, num_experts)
    return TABLE.run("aux_fi", topk_idx.device, topk_idx, num_experts, num_aux_topk)


def _aux_fi_host(topk_idx, num_experts, num_aux_topk):
    return _index_op(_AUX_FI, torch.empty(num_experts, dtype=torch.float32), topk_idx, num_experts, num_aux_topk)


TABLE.register("aux_fi", reference=ref.aux_fi,
               host=Impl(_aux_fi_host, "at least one token", lambda topk_idx, *_: topk_idx.shape[0] > 0))
TABLE.add_ascend("aux_fi", Impl(ascend_helpers.aux_fi, "every input (no tokens: zeros, launching nothing)"))


def normalize_weight(topk_weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(den, topk_weights / den)`` with den the FP32 row sum from 1e-20, in column order."""
    C.tensor("topk_weights", topk_weights, dtypes=(torch.float32,), ndim=2, contiguous=True)
    return TABLE.run("normalize_weight", topk_weights.device, topk_weights)


def _normalize_weight_host(topk_weights):
    t, k = topk_weights.shape
    den, out = torch.empty(t, dtype=torch.float32), torch.empty((t, k), dtype=torch.float32)
    if t:
        host_kernel("tk_normalize_weight", "normalize_weight.cpp")(den, out, topk_weights, t, k, threads())
    return den, out


TABLE.register("normalize_weight", reference=ref.normalize_weight, host=_normalize_weight_host,
               ascend=ascend_routing.normalize_weight)


def mask_indices_by_tp(indices: torch.Tensor, n: int, num_ep_ranks: int, tp_rank: int, num_tp_ranks: int) -> torch.Tensor:
    C.tensor("indices", indices, dtypes=(torch.int32, torch.int64))
    C.integer("num_ep_ranks", num_ep_ranks, 1)
    C.integer("n", n, num_ep_ranks)
    C.integer("num_tp_ranks", num_tp_ranks, 1)
    C.integer("tp_rank", tp_rank, 0, num_tp_ranks - 1)
    return TABLE.run("mask_indices_by_tp", indices.device, indices, n, num_ep_ranks, tp_rank, num_tp_ranks)


def _mask_indices_by_tp_host(indices, n, num_ep_ranks, tp_rank, num_tp_ranks):
    flat = indices.contiguous().view(-1, 1)
    out = torch.empty_like(flat)
    _index_op(_MASK_TP, out, flat, n, n // num_ep_ranks, tp_rank, num_tp_ranks)
    return out.view(indices.shape)


TABLE.register("mask_indices_by_tp", reference=ref.mask_indices_by_tp,
               host=Impl(_mask_indices_by_tp_host, "int64 indices of at least one dimension",
                         lambda indices, *_: indices.dtype == torch.int64 and indices.dim() > 0))
TABLE.add_ascend("mask_indices_by_tp", Impl(ascend_helpers.mask_indices_by_tp, "int32 or int64 indices of any shape "
                                            "and strides, with n // num_ep_ranks * num_tp_ranks < 2**31",
                                            ascend_helpers.mask_accepts))


def inplace_unique_group_indices(group_indices: torch.Tensor, num_groups: int) -> None:
    C.tensor("group_indices", group_indices, dtypes=(torch.int64,), ndim=2, contiguous=True)
    C.integer("num_groups", num_groups, 1, 128)
    if group_indices.device.type == "cpu":  # no host read of a device tensor: the kernel indexes nothing by them
        _index_range("group_indices", group_indices, num_groups)
    TABLE.run("inplace_unique_group_indices", group_indices.device, group_indices, num_groups)


def _unique_group_indices_host(group_indices, num_groups):
    if group_indices.numel():
        _index_op(_UNIQUE, None, group_indices, num_groups)


TABLE.register("inplace_unique_group_indices", reference=ref.inplace_unique_group_indices,
               host=_unique_group_indices_host)
TABLE.add_ascend("inplace_unique_group_indices", ascend_helpers.inplace_unique_group_indices)


def get_fused_mapping(topk_idx: torch.Tensor, num_experts: int, num_expanded_tokens: int, alignment: int,
                      force_no_sync: bool = False):
    """Returns ``(pos_to_expert, pos_to_token, pos_to_token_topk, token_topk_to_pos, expert_start,
    expert_end, num_tokens_per_expert, num_tokens_per_expert_list)``; see the spec (section 3.5)."""
    C.tensor("topk_idx", topk_idx, dtypes=(torch.int64,), ndim=2, contiguous=True)
    C.integer("num_experts", num_experts, 1, INT32_MAX)  # expert ids are int32 in pos_to_expert
    C.allocation("num_experts", num_experts * 32, topk_idx.device, f"per-expert counts of {num_experts} experts")
    # positions are int32 (pos_to_* rows, token_topk_to_pos values): the expanded rows must index as one
    C.integer("num_expanded_tokens", num_expanded_tokens, 0, INT32_MAX)
    C.integer("alignment", alignment, 1, INT32_MAX)
    t, k = topk_idx.shape
    rows = num_expanded_tokens or (t * k + (alignment - 1) * num_experts) // alignment * alignment
    if rows > INT32_MAX:
        raise C.fail("alignment", f"an alignment whose padded positions (T * K + (alignment - 1) * E) fit int32 "
                     f"({INT32_MAX})", f"{alignment}, giving {rows} positions")
    C.allocation("num_expanded_tokens" if num_expanded_tokens else "alignment", rows * 12 + t * k * 4,
                 topk_idx.device, f"{rows} expanded positions")
    # value checks on CPU tensors only (no host read of a device tensor: graph capture); the Ascend kernel
    # skips ids outside [0, num_experts) and gives -1 to a slot that would land past num_expanded_tokens
    if topk_idx.device.type == "cpu":
        _check_fused_mapping_values(topk_idx, num_experts, num_expanded_tokens, alignment)
    return TABLE.run("get_fused_mapping", topk_idx.device, topk_idx, num_experts, num_expanded_tokens, alignment,
                     force_no_sync)


def _check_fused_mapping_values(topk_idx, num_experts: int, num_expanded_tokens: int, alignment: int) -> None:
    _index_range("topk_idx", topk_idx, num_experts)
    if num_expanded_tokens:
        counts = torch.bincount(topk_idx[topk_idx >= 0], minlength=num_experts)
        need = int(((counts + alignment - 1) // alignment * alignment).sum())
        if need > num_expanded_tokens:
            raise C.fail("num_expanded_tokens", f"0 or at least the {need} aligned positions the routing needs",
                         num_expanded_tokens)


def _fused_mapping_host(topk_idx, num_experts, num_expanded_tokens, alignment, force_no_sync):
    t, k = topk_idx.shape
    sync = num_expanded_tokens == 0 and not force_no_sync
    rows = num_expanded_tokens or (t * k + (alignment - 1) * num_experts) // alignment * alignment
    p2e, p2t, p2tt = (torch.empty(rows, dtype=torch.int32) for _ in range(3))
    t2p = torch.empty((t, k), dtype=torch.int32)
    start, end, per_expert = (torch.empty(num_experts, dtype=torch.int32) for _ in range(3))
    args = _args("FusedMappingArgs", p2e=p2e, p2t=p2t, p2tt=p2tt, t2p=t2p, start=start, end=end,
                 per_expert=per_expert, idx=topk_idx, T=t, K=k, E=num_experts, P=rows, alignment=alignment)
    host_kernel("tk_fused_mapping", "fused_mapping.cpp")(descriptors.address(args))
    counts_list = []
    if sync:
        counts_list = per_expert.tolist()
        total = sum(counts_list)
        p2e, p2t, p2tt = p2e[:total], p2t[:total], p2tt[:total]
    return p2e, p2t, p2tt, t2p, start, end, per_expert, counts_list


TABLE.register("get_fused_mapping", reference=ref.get_fused_mapping, host=_fused_mapping_host,
               ascend=ascend_fused_mapping.get_fused_mapping)


def _check_maps(token_topk_to_pos, pos_to_expert, num_tokens: int):
    C.tensor("token_topk_to_pos", token_topk_to_pos, dtypes=(torch.int32,), ndim=2, contiguous=True)
    if token_topk_to_pos.shape[0] != num_tokens:
        raise C.fail("token_topk_to_pos", f"{num_tokens} rows (one per token)", f"shape {tuple(token_topk_to_pos.shape)}")
    C.tensor("pos_to_expert", pos_to_expert, dtypes=(torch.int32,), ndim=1, contiguous=True)


def _check_slots(token_topk_to_pos: torch.Tensor, num_rows: int) -> None:
    """The expansions' value checks, on CPU tensors only (no host read of a device tensor: graph capture);
    the Ascend kernel skips slots outside ``[0, num_rows)``."""
    if token_topk_to_pos.device.type == "cpu":
        _index_range("token_topk_to_pos", token_topk_to_pos, num_rows)
        _one_slot_per_position(token_topk_to_pos, num_rows)


def _one_slot_per_position(token_topk_to_pos: torch.Tensor, num_rows: int) -> None:
    """An expansion writes each position once: two slots on one position would race for the row."""
    pos = token_topk_to_pos.flatten()
    pos = pos[pos >= 0].long()
    if pos.numel():
        counts = torch.bincount(pos, minlength=num_rows)
        if int(counts.max()) > 1:
            row = int(counts.argmax())
            slots = (token_topk_to_pos == row).nonzero().tolist()
            raise C.fail("token_topk_to_pos", "each position the target of at most one slot",
                         f"{int(counts[row])} slots (token, k) {slots} mapped to position {row}")


def _expand_rows(x: torch.Tensor, token_topk_to_pos: torch.Tensor, num_rows: int) -> torch.Tensor:
    out = empty(num_rows, *x.shape[1:], dtype=x.dtype)
    if num_rows:
        covered = torch.zeros(num_rows, dtype=torch.uint8)
        row_bytes = x[0].numel() * x.element_size() if x.shape[0] else out[0].numel() * out.element_size()
        host_kernel("tk_expand", "expand.cpp")(out, x.contiguous(), token_topk_to_pos, covered, x.shape[0],
                                                      token_topk_to_pos.shape[1], num_rows, row_bytes, threads())
    return out


def expand_to_fused(x: torch.Tensor, token_topk_to_pos: torch.Tensor, pos_to_expert: torch.Tensor) -> torch.Tensor:
    """``out[token_topk_to_pos[t, k]] = x[t]``; rows no slot maps to are zero."""
    C.tensor("x", x, ndim=2, contiguous=True)
    _check_maps(token_topk_to_pos, pos_to_expert, x.shape[0])
    C.same_device(x=x, token_topk_to_pos=token_topk_to_pos, pos_to_expert=pos_to_expert)
    _check_slots(token_topk_to_pos, pos_to_expert.shape[0])
    return TABLE.run("expand_to_fused", x.device, x, token_topk_to_pos, pos_to_expert)


def _expand_to_fused_host(x, token_topk_to_pos, pos_to_expert):
    return _expand_rows(x, token_topk_to_pos, pos_to_expert.shape[0])


TABLE.register("expand_to_fused", reference=ref.expand_to_fused, host=_expand_to_fused_host,
               ascend=ascend_expand.expand_to_fused)


def expand_to_fused_with_sf(x, num_per_channels: int, token_topk_to_pos: torch.Tensor, pos_to_expert: torch.Tensor,
                            use_tma_aligned_col_major_sf: bool = False):
    """Expands data and per-token scales; the output sf is row-major or (col-major flag) a
    column-major view of padded storage (hidden_sf, align(P, 4))."""
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise C.fail("x", "a (data, sf) pair", f"a {type(x).__name__} of length {len(x)}"
                     if isinstance(x, (tuple, list)) else type(x).__name__, TypeError)
    data, sf = x
    C.tensor("x[0]", data, ndim=2, contiguous=True)
    C.choice("num_per_channels", num_per_channels, (32, 128))
    C.tensor("x[1]", sf, dtypes=(torch.float32, torch.int32), ndim=2, contiguous=True)
    if sf.shape[0] != data.shape[0]:
        raise C.fail("x[1]", f"one row per token ({data.shape[0]})", f"shape {tuple(sf.shape)}")
    if sf.dtype == torch.int32 and not use_tma_aligned_col_major_sf:
        raise C.fail("use_tma_aligned_col_major_sf", "True for packed UE8M0 (int32) scales x[1]",
                     repr(use_tma_aligned_col_major_sf))
    _check_maps(token_topk_to_pos, pos_to_expert, data.shape[0])
    _check_slots(token_topk_to_pos, pos_to_expert.shape[0])
    return TABLE.run("expand_to_fused_with_sf", data.device, (data, sf), num_per_channels, token_topk_to_pos,
                     pos_to_expert, use_tma_aligned_col_major_sf)


def _expand_to_fused_with_sf_host(x, num_per_channels, token_topk_to_pos, pos_to_expert, use_tma_aligned_col_major_sf):
    data, sf = x
    num_rows = pos_to_expert.shape[0]
    out = _expand_rows(data, token_topk_to_pos, num_rows)
    rows = _expand_rows(sf, token_topk_to_pos, num_rows)
    if not use_tma_aligned_col_major_sf:
        return out, rows
    from ..utils import align
    storage = torch.zeros((sf.shape[1], align(num_rows, 4)), dtype=sf.dtype)
    storage[:, :num_rows] = rows.T
    return out, storage[:, :num_rows].T


TABLE.register("expand_to_fused_with_sf", reference=ref.expand_to_fused_with_sf, host=_expand_to_fused_with_sf_host,
               ascend=Impl(ascend_expand.expand_to_fused_with_sf, "every data dtype; FP32/int32 scales, row- or "
                                                                  "column-major"))


_DT = {torch.float32: 0, torch.bfloat16: 1, torch.float8_e4m3fn: 2}


def reduce_fused(x: Union[torch.Tensor, tuple], topk_weights: torch.Tensor | None, token_topk_to_pos: torch.Tensor,
                 fp8_format: str = "", sf: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Per token, in k order and with FMAs: ``acc += x[pos] * (w[t, k] * x_sf[pos])``; then ``* sf[0]``
    and a cast to E4M3 (``fp8_format='e4m3'``) or x's dtype."""
    x_sf = None
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise C.fail("x", "a tensor or a (data, x_sf) pair", f"a {type(x).__name__} of length {len(x)}", TypeError)
        x, x_sf = x
    C.tensor("x" if x_sf is None else "x[0]", x, dtypes=tuple(_DT), ndim=2, contiguous=True)
    rows, hidden = x.shape
    if hidden % 256:
        raise C.fail("x" if x_sf is None else "x[0]", "a hidden size (dim 1) that is a multiple of 256",
                     f"shape {tuple(x.shape)}")
    C.optional("x[1]", x_sf, dtypes=(torch.float32,), shape=(rows,), contiguous=True)
    C.tensor("token_topk_to_pos", token_topk_to_pos, dtypes=(torch.int32,), ndim=2, contiguous=True)
    num_tokens = token_topk_to_pos.shape[0]
    C.optional("topk_weights", topk_weights, dtypes=(torch.float32,), shape=tuple(token_topk_to_pos.shape),
               contiguous=True)
    C.choice("fp8_format", fp8_format, ("", "e4m3"))
    C.optional("sf", sf, dtypes=(torch.float32,), shape=(1,))
    if sf is not None and fp8_format != "e4m3":
        raise C.fail("sf", "None unless fp8_format='e4m3' (sf is the output scale of an E4M3 result)",
                     f"a tensor with fp8_format={fp8_format!r}")
    if token_topk_to_pos.device.type == "cpu":  # no host read of a device tensor: the Ascend kernel skips
        _index_range("token_topk_to_pos", token_topk_to_pos, rows)  # positions outside [0, rows) like -1
    out_dtype = torch.float8_e4m3fn if fp8_format == "e4m3" else x.dtype
    C.optional("out", out, dtypes=(out_dtype,), shape=(num_tokens, hidden), contiguous=True)
    if out is not None:
        C.output("out", out, ("x" if x_sf is None else "x[0]", x), ("x[1]", x_sf), ("topk_weights", topk_weights),
                 ("token_topk_to_pos", token_topk_to_pos), ("sf", sf))
    return TABLE.run("reduce_fused", x.device, x, x_sf, topk_weights, token_topk_to_pos, fp8_format, sf, out)


def _reduce_fused_ref(x, x_sf, topk_weights, token_topk_to_pos, fp8_format, sf, out):
    res = ref.reduce_fused((x, x_sf) if x_sf is not None else x, topk_weights, token_topk_to_pos, fp8_format, sf)
    return res if out is None else out.copy_(res)


def _reduce_fused_host(x, x_sf, topk_weights, token_topk_to_pos, fp8_format, sf, out):
    num_tokens, hidden = token_topk_to_pos.shape[0], x.shape[1]
    out_dtype = torch.float8_e4m3fn if fp8_format == "e4m3" else x.dtype
    if out is None:
        out = empty(num_tokens, hidden, dtype=out_dtype)
    if num_tokens:
        args = _args("ReduceArgs", out=out, x=x, weights=topk_weights, x_sf=x_sf, sf=sf, t2p=token_topk_to_pos,
                     in_dt=_DT[x.dtype], out_dt=_DT[out_dtype], T=num_tokens, K=token_topk_to_pos.shape[1], H=hidden)
        host_kernel("tk_reduce", "reduce.cpp")(descriptors.address(args), threads())
    return out


TABLE.register("reduce_fused", reference=_reduce_fused_ref, host=_reduce_fused_host,
               ascend=Impl(lambda x, x_sf, w, pos, fmt, sf, out: ascend_reduce.reduce_fused(x, w, pos, fmt, sf, out,
                                                                                             x_sf),
                           "BF16/FP32/E4M3 x, x_sf, sf, fp8_format and out"))
