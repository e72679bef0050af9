"""Upstream's ``deep_ep.utils.refs``: reference dispatch and combine that tests compare with.

``dispatch`` moves every token once to every rank holding one of its experts with
``all_to_all_single`` (rows by source rank, then token: sorted by ``src_token_global_idx``).
``combine`` reduces ``[num_tokens, num_topk, hidden]`` expert outputs in upstream's order: inside
each group of slots (a rank; then a scale-up domain) the slots are summed in slot order in FP32
from zero, rounded to the data type once and kept at the group's last slot; then every slot is
added in slot order to the biases' FP32 sum."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from deepjit import validation as V

from .envs import get_global_seed

__all__ = ["combine", "dispatch", "generate_pre_combine_data", "ordered_accumulate"]


def _a2a(t: torch.Tensor, recv: list[int], send: list[int]) -> torch.Tensor:
    flat = t.reshape(t.shape[0], -1)
    raw = flat.view(torch.uint8) if flat.element_size() == 1 else flat
    out = torch.empty(sum(recv), raw.shape[1], dtype=raw.dtype, device=t.device)
    dist.all_to_all_single(out, raw.contiguous(), recv, send)
    return out.view(t.dtype).view(sum(recv), *t.shape[1:])


def dispatch(x, topk_idx: torch.Tensor, topk_weights: torch.Tensor | None, num_max_tokens_per_rank: int,
             num_experts: int):
    """Returns ``(recv_x, recv_topk_idx, recv_topk_weights, recv_src_token_idx, num_recv_tokens_per_rank)``:
    ``recv_topk_idx`` holds this rank's local expert ids (-1 elsewhere), ``recv_topk_weights`` the
    token's whole weight row, ``recv_src_token_idx`` int32 ``src_rank * num_max_tokens_per_rank + i``."""
    rank, num_ranks = dist.get_rank(), dist.get_world_size()
    if num_experts % num_ranks:
        raise V.fail("num_experts", f"a multiple of the number of ranks ({num_ranks})", num_experts)
    per_rank = num_experts // num_ranks
    x, sf = x if isinstance(x, tuple) else (x, None)
    owner = torch.where(topk_idx >= 0, topk_idx // per_rank, -1)
    sends = [(owner == d).any(1).nonzero().squeeze(1) for d in range(num_ranks)]
    order = torch.cat(sends)
    send = torch.tensor([s.numel() for s in sends], dtype=torch.int32, device=x.device)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    send_list, recv_list = send.tolist(), recv.tolist()
    recv_x = _a2a(x[order], recv_list, send_list)
    if sf is not None:
        recv_x = recv_x, _a2a(sf[order], recv_list, send_list)
    recv_idx = _a2a(topk_idx[order], recv_list, send_list)
    recv_idx = torch.where(recv_idx // per_rank == rank, recv_idx - rank * per_rank, -1)
    recv_w = None if topk_weights is None else _a2a(topk_weights[order], recv_list, send_list)
    src = (order + rank * num_max_tokens_per_rank).int()
    return recv_x, recv_idx, recv_w, _a2a(src, recv_list, send_list), recv.int()


def generate_pre_combine_data(src_token_global_idx: torch.Tensor, num_max_tokens_per_rank: int, num_topk: int,
                              hidden: int) -> torch.Tensor:
    """BF16 ``[num_tokens, num_topk, hidden]``: row ``(i, j)`` at column ``k`` is
    ``sin((seed * 131071 % max_seed + 1) / max_seed * (k + 1) + sin(global_seed))`` with
    ``seed = src_token_global_idx[i] * num_topk + j`` and ``max_seed = ranks * M * num_topk``."""
    max_seed = dist.get_world_size() * num_max_tokens_per_rank * num_topk
    dev = src_token_global_idx.device
    seeds = src_token_global_idx.long()[:, None] * num_topk + torch.arange(num_topk, device=dev)[None, :]
    phase = ((seeds * 131071 % max_seed).float() + 1) / max_seed
    cols = torch.arange(1, hidden + 1, device=dev, dtype=torch.float32)
    return torch.sin(phase[:, :, None] * cols + math.sin(float(get_global_seed()))).to(torch.bfloat16)


def ordered_accumulate(data: torch.Tensor, initial_value: torch.Tensor | None = None) -> torch.Tensor:
    """``data [T, K, H]`` summed over K in order, in FP32 from ``initial_value`` (or zero)."""
    acc = torch.zeros(data.shape[0], data.shape[2], dtype=torch.float32, device=data.device) if initial_value is None \
        else initial_value.float().clone()
    for k in range(data.shape[1]):
        acc += data[:, k].float()
    return acc.to(data.dtype)


def _grouped_reduce(data: torch.Tensor, group_id: torch.Tensor) -> torch.Tensor:
    """Each group's slots summed in slot order (FP32 from zero, rounded once), at its last slot."""
    K = data.shape[1]
    out = torch.zeros_like(data)
    for k in range(K):
        later = torch.zeros_like(group_id[:, k], dtype=torch.bool)
        for q in range(k + 1, K):
            later |= group_id[:, q] == group_id[:, k]
        partial = torch.zeros(data.shape[0], data.shape[2], dtype=torch.float32, device=data.device)
        for q in range(k + 1):
            same = (group_id[:, q] == group_id[:, k])[:, None]
            partial = torch.where(same, partial + data[:, q].float(), partial)
        out[:, k] = torch.where(later[:, None], out[:, k], partial.to(data.dtype))
    return out


def combine(y: torch.Tensor, topk_idx: torch.Tensor, num_scaleout_ranks: int, num_scaleup_ranks: int,
            num_experts: int, bias, reduce_in_local: bool, reduce_in_scaleup: bool) -> torch.Tensor:
    """``y [T, K, H]`` -> ``[T, H]``. ``reduce_in_local``: partial sums per rank first (multiple
    reduction); ``reduce_in_scaleup`` (requires it): then per scale-up domain (hybrid mode)."""
    if reduce_in_scaleup and not reduce_in_local:
        raise V.fail("reduce_in_scaleup", "False unless reduce_in_local=True", f"{reduce_in_scaleup!r} with reduce_in_local={reduce_in_local!r}")
    per_rank = num_experts // (num_scaleout_ranks * num_scaleup_ranks)
    if reduce_in_local:
        y = _grouped_reduce(y, topk_idx // per_rank)
    if reduce_in_scaleup:
        y = _grouped_reduce(y, topk_idx // (per_rank * num_scaleup_ranks))
    if isinstance(bias, tuple):
        bias = bias[0].float() + bias[1].float()
    return ordered_accumulate(y, None if bias is None else bias.float())
