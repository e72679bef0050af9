"""Redundant-expert load balancing for ``EPBuffer``: push expert weights into the redundant slots
peers host, and add the peers' redundant-slot gradients back into the owners' gradients.

The LB region follows the EP region in the same symmetric window, so a tensor planned there sits
at the same offset on every rank and a rank reads or writes a peer's slot directly. Across hosts
the same transfers go through point-to-point collectives.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import torch
import torch.distributed as dist

from deepjit import validation as V

from ..utils.event import EventHandle, EventOverlap


def lb_storage(buf) -> torch.Tensor:
    session = buf._session
    if session.transport_kind == "shm":
        return session.transport.region(buf.rank_idx, torch.uint8, (buf.num_lb_bytes,), buf.num_bytes)
    return torch.zeros(buf.num_lb_bytes, dtype=torch.uint8)


def _check_mapping(buf, mapping: torch.Tensor, num_redundant: int, num_local: int) -> None:
    R = buf.num_ranks
    if not isinstance(mapping, torch.Tensor) or mapping.dtype != torch.int32 or tuple(mapping.shape) != (R, num_redundant):
        raise V.fail("redundancy_mapping", f"int32 of shape {(R, num_redundant)}",
                     f"{getattr(mapping, 'dtype', type(mapping))} {tuple(getattr(mapping, 'shape', ()))}")
    bad = (mapping < -1) | (mapping >= R * num_local)
    if bool(bad.any()):
        raise V.fail("redundancy_mapping", f"entries in [-1, {R * num_local})", mapping[bad][0].item())
    own = (mapping >= 0) & (mapping // num_local == torch.arange(R, dtype=torch.int32)[:, None])
    if bool(own.any()):
        raise V.fail("redundancy_mapping", "rows naming other ranks' experts (a rank must not host its own experts)",
                     f"rank {int(own.nonzero()[0, 0])} hosting its own expert {int(mapping[own][0])}")


def _offset(buf, t: torch.Tensor, name: str) -> int:
    storage = buf.lb_storage
    if storage is None:
        raise V.fail(name, "a tensor planned in the buffer's LB region", "a buffer created without one "
                     "(lb_allocation_plan_or_num_bytes)")
    off = t.data_ptr() - storage.data_ptr()
    if not t.is_contiguous() or off < 0 or off + t.numel() * t.element_size() > storage.numel():
        raise V.fail(name, "a contiguous tensor planned in the buffer's LB region (lb_allocation_plan_or_num_bytes)",
                     "a tensor outside it" if t.is_contiguous() else f"strides {t.stride()}")
    return buf.num_bytes + off


def lb_prefetch_weights(buf, redundant_expert_weights: Union[torch.Tensor, Sequence[torch.Tensor]],
                        expert_weights: Union[torch.Tensor, Sequence[torch.Tensor]], redundancy_mapping: torch.Tensor,
                        num_sms: int = 0, previous_event=None) -> EventOverlap:
    buf._check_alive()
    dsts = [redundant_expert_weights] if isinstance(redundant_expert_weights, torch.Tensor) else list(redundant_expert_weights)
    srcs = [expert_weights] if isinstance(expert_weights, torch.Tensor) else list(expert_weights)
    session, R, me = buf._session, buf.num_ranks, buf.rank_idx
    state = {}

    def check():
        if len(dsts) != len(srcs):
            raise V.fail("redundant_expert_weights", f"{len(srcs)} tensors like expert_weights", len(dsts))
        for i, (d, s) in enumerate(zip(dsts, srcs, strict=True)):
            if d.dtype != s.dtype or d.shape[1:] != s.shape[1:]:
                raise V.fail(f"redundant_expert_weights[{i}]", f"{s.dtype} rows of shape {tuple(s.shape[1:])} like "
                             f"expert_weights[{i}]", f"{d.dtype} {tuple(d.shape[1:])}")
        _check_mapping(buf, redundancy_mapping, dsts[0].shape[0], srcs[0].shape[0])
        state["offsets"] = [_offset(buf, d, f"redundant_expert_weights[{i}]") for i, d in enumerate(dsts)] if session.transport_kind == "shm" else None
        return [21, len(dsts), dsts[0].shape[0], srcs[0].shape[0]]

    session.start("lb_prefetch_weights", ("operation", "tensors", "redundant slots", "local experts"), check)
    if previous_event is not None:
        previous_event.current_stream_wait()
    num_local = srcs[0].shape[0]
    owners = redundancy_mapping.long()

    def run():
        ops = []
        for r in range(R):
            for c in range(owners.shape[1]):
                e = int(owners[r, c])
                if e < 0:
                    continue
                owner, local = e // num_local, e % num_local
                for i, (d, s) in enumerate(zip(dsts, srcs, strict=True)):
                    if session.transport_kind == "shm":
                        if owner == me:  # push into rank r's slot c, at the same offset
                            row = d[c].numel() * d.element_size()
                            view = session.transport.region(r, torch.uint8, (row,), state["offsets"][i] + c * row)
                            view.copy_(s[local].contiguous().view(-1).view(torch.uint8))
                    elif owner == me and r != me:
                        ops.append(dist.P2POp(dist.isend, s[local].contiguous(), r, buf.group))
                    elif r == me:
                        ops.append(dist.P2POp(dist.irecv, d[c], owner, buf.group))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    session.guard(run)
    session.start("lb_prefetch_weights", ("operation",), lambda: [22])  # every push has landed
    return EventOverlap(EventHandle())


def lb_reduce_grads(buf, redundant_expert_grads: torch.Tensor, expert_grads: torch.Tensor,
                    redundancy_mapping: torch.Tensor, num_sms: int = 0, previous_event=None) -> EventOverlap:
    """``expert_grads[local] += redundant_expert_grads[c]`` of every peer hosting that expert in slot c,
    added in (rank, slot) order."""
    buf._check_alive()
    session, R, me = buf._session, buf.num_ranks, buf.rank_idx
    state = {}

    def check():
        for name, t in (("redundant_expert_grads", redundant_expert_grads), ("expert_grads", expert_grads)):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.dim() != 2:
                raise V.fail(name, "a 2-D float32 tensor", f"{getattr(t, 'dtype', type(t))} {tuple(getattr(t, 'shape', ()))}")
        if redundant_expert_grads.shape[1] != expert_grads.shape[1]:
            raise V.fail("redundant_expert_grads", f"width {expert_grads.shape[1]} like expert_grads",
                         redundant_expert_grads.shape[1])
        _check_mapping(buf, redundancy_mapping, redundant_expert_grads.shape[0], expert_grads.shape[0])
        state["offset"] = _offset(buf, redundant_expert_grads, "redundant_expert_grads") if session.transport_kind == "shm" else None
        return [23, redundant_expert_grads.shape[0], expert_grads.shape[0], expert_grads.shape[1]]

    session.start("lb_reduce_grads", ("operation", "redundant slots", "local experts", "width"), check)
    if previous_event is not None:
        previous_event.current_stream_wait()
    num_local, width = expert_grads.shape
    owners = redundancy_mapping.long()

    def run():
        incoming = []
        ops = []
        for r in range(R):
            for c in range(owners.shape[1]):
                e = int(owners[r, c])
                if e < 0 or e // num_local != me and r != me:
                    continue
                if session.transport_kind == "shm":
                    if e // num_local == me:
                        view = session.transport.region(r, torch.float32, (width,), state["offset"] + c * width * 4)
                        incoming.append((e % num_local, view))
                elif e // num_local == me:
                    t = torch.empty(width, dtype=torch.float32)
                    ops.append(dist.P2POp(dist.irecv, t, r, buf.group))
                    incoming.append((e % num_local, t))
                else:  # r == me: send my slot c to its owner
                    ops.append(dist.P2POp(dist.isend, redundant_expert_grads[c].contiguous(), e // num_local,
                                          buf.group))
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        for local, grad in incoming:
            expert_grads[local] += grad

    session.guard(run)
    session.start("lb_reduce_grads", ("operation",), lambda: [24])
    return EventOverlap(EventHandle())
