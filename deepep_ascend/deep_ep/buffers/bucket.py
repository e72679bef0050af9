"""``BucketBuffer`` (V2.5): all-gather, reduce-scatter and all-reduce over registered storage.

The storage is this rank's part of a symmetric window (same size and offsets on every rank), so
a registered tensor at offset o on one rank is at offset o on every peer: gathers and reductions
read the peers' memory directly. Across hosts the same operations go through collectives.
Reductions add the ranks' contributions in rank order in FP32, so every rank and both transports
produce identical bits.

Under ``EP_BACKEND=ascend`` with CPU tensors (the twin) on ranks of one host (``EP_ASCEND_TRANSPORT=auto``, the
default, or ``symm``: deep_ep/ascend/transport_choice.py) the storage is
this rank's symmetric device window (deep_ep/ascend/bucket_window.py) and the collectives are Ascend kernels reading the peers'
windows (bucket.asc), with flags in the window for completion: same results, bit for bit, and nothing
read back on the host. Without the window (a group over several hosts, or ``hccl``) the Ascend
engine keeps its storage on the group's device and uses ``torch.distributed`` collectives there; so
does an NPU for now (deepjit's DeviceWindow has no torch view of CANN SHMEM memory yet).
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Union

import torch
import torch.distributed as dist

from deepjit import validation as V

from ..engine.session import CommSession
from ..utils.event import EventHandle, EventOverlap
from .allocator import BufferAllocator
from .base import BufferBase

_OPS = {"all_gather": 11, "reduce_scatter": 12, "all_reduce": 13}
_SIGNATURE = ("operation", "tensor count", "total bytes", "scale bits", "precision", "registered offsets")


class BucketBuffer(BufferBase):
    def __init__(self, group: Union[dist.ProcessGroup, Sequence[dist.ProcessGroup]],
                 allocation_plan_or_num_bytes: Union[BufferAllocator, int], sl_idx: int | None = None,
                 num_gpu_timeout_secs: int = 100, explicitly_destroy: bool = False):
        super().__init__(explicitly_destroy)
        self.groups = list(group) if isinstance(group, (list, tuple)) else [group]
        plan = allocation_plan_or_num_bytes if isinstance(allocation_plan_or_num_bytes, BufferAllocator) else None
        self.num_bytes = plan.num_bytes if plan is not None else int(allocation_plan_or_num_bytes)
        if self.num_bytes <= 0:
            raise V.fail("allocation_plan_or_num_bytes", "a positive size", self.num_bytes)
        # Storage and a staging area of the same size for session() inputs.
        self.contexts = [CommSession(g, 2 * self.num_bytes, float(num_gpu_timeout_secs)) for g in self.groups]
        main = self.contexts[0]
        self._win = _bucket_window(main, 2 * self.num_bytes)
        if self._win is not None:
            self._all = self._win.storage()
        elif main.transport_kind == "shm":
            self._all = main.transport.region(main.rank, torch.uint8, (2 * self.num_bytes,))
        else:
            self._all = torch.zeros(2 * self.num_bytes, dtype=torch.uint8, device=main.device)
        self.storage = self._all[: self.num_bytes]
        self._in_session = False
        self._staged = 0
        if plan is not None:
            plan.materialize(self.storage)
        for g in self.groups:
            dist.barrier(group=g)

    def _release(self) -> None:
        if not self._destroyed:
            self.storage = self._all = None
            if self._win is not None:
                self._win.destroy()
                self._win = None
            for c in self.contexts:
                c.destroy()
        super()._release()

    def get_context_idx(self, group: dist.ProcessGroup | None = None) -> int:
        if group is None:
            return 0
        for i, g in enumerate(self.groups):
            if g is group:
                return i
        raise V.fail("group", "one of this BucketBuffer's groups", "another group")

    def get_theoretical_num_sms(self, op: str, group=None) -> int:
        return 0

    def barrier(self, wait_comm_stream: bool = True, with_cpu_sync: bool = False, sequential: bool = True,
                group=None) -> None:
        self.contexts[self.get_context_idx(group)].start("barrier", ("operation",), lambda: [3])

    @contextlib.contextmanager
    def session(self):
        """Collectives inside accept ordinary tensors: they are staged into the bucket's spare area
        (which does not grow: RuntimeError when full) and results are copied out at ``wait()``."""
        if self._in_session:
            raise RuntimeError("BucketBuffer.session() does not nest")
        self._in_session, self._staged = True, 0
        try:
            yield self
        finally:
            self._in_session = False

    # ---- placement ---------------------------------------------------------------------------
    def _offset(self, t: torch.Tensor) -> int | None:
        """Byte offset of ``t`` inside the storage (or the staging area), None if outside."""
        if not t.is_contiguous() or t.device != self._all.device:
            return None
        off = t.data_ptr() - self._all.data_ptr()
        if 0 <= off and off + t.numel() * t.element_size() <= self._all.numel():
            return off
        return None

    def _stage(self, t: torch.Tensor, name: str) -> int:
        if not self._in_session:
            raise V.fail(name, "a tensor in this BucketBuffer's storage (allocate it with the BufferAllocator plan) "
                         "or a call inside `with buffer.session():`", "a tensor not registered in the storage")
        nbytes = t.numel() * t.element_size()
        off = self.num_bytes + (self._staged + 63) // 64 * 64
        if off + nbytes > 2 * self.num_bytes:
            raise RuntimeError("BucketBuffer.session(): staging area exhausted (it does not grow)")
        self._staged = off + nbytes - self.num_bytes
        self._all[off:off + nbytes].view(t.dtype).copy_(t.reshape(-1))
        return off

    def _view(self, ctx: CommSession, peer: int, off: int, dtype: torch.dtype, numel: int) -> torch.Tensor:
        return ctx.transport.region(peer, dtype, (numel,), off)

    # ---- collectives -------------------------------------------------------------------------
    def all_gather(self, srcs, dsts=None, group=None, num_sms: int | None = None) -> EventOverlap:
        """``.wait()`` returns, per source, the flat rank-ordered gathered tensor."""
        return self._run("all_gather", srcs, dsts, group, 1.0, "fp32")

    def reduce_scatter(self, srcs, comm_precision: str = "fp32", scale: float = 1.0, group=None,
                       num_sms: int | None = None) -> EventOverlap:
        """FP32 sources of R shards; this rank's shard becomes the scaled sum (in place);
        ``.wait()`` returns that shard."""
        if comm_precision not in ("fp32", "bf16"):
            raise V.fail("comm_precision", "'fp32' or 'bf16'", repr(comm_precision))
        return self._run("reduce_scatter", srcs, None, group, scale, comm_precision)

    def all_reduce(self, srcs, scale: float = 1.0, group=None, num_sms: int | None = None) -> EventOverlap:
        """In place: every rank's FP32 source becomes the scaled sum over ranks."""
        return self._run("all_reduce", srcs, None, group, scale, "fp32")

    def _run(self, op, srcs, dsts, group, scale, precision) -> EventOverlap:
        self._check_alive()
        ctx = self.contexts[self.get_context_idx(group)]
        single = isinstance(srcs, torch.Tensor)
        srcs = [srcs] if single else list(srcs)
        dst_list = None if dsts is None else ([dsts] if isinstance(dsts, torch.Tensor) else list(dsts))
        R, rank = ctx.num_ranks, ctx.rank
        state = {}

        def check():
            if not srcs or len(srcs) > 64:
                raise V.fail("srcs", "1 to 64 tensors", len(srcs))
            if dst_list is not None and len(dst_list) != len(srcs):
                raise V.fail("dsts", f"{len(srcs)} tensors like srcs", len(dst_list))
            for i, s in enumerate(srcs):
                if not isinstance(s, torch.Tensor):
                    raise V.fail(f"srcs[{i}]", "a tensor", type(s).__name__, TypeError)
                if op != "all_gather" and s.dtype != torch.float32:
                    raise V.fail(f"srcs[{i}]", f"dtype torch.float32 for {op}", s.dtype, TypeError)
                if op == "reduce_scatter" and s.numel() % R:
                    raise V.fail(f"srcs[{i}]", f"a number of elements that is a multiple of the {R} ranks", s.numel())
                if dst_list is not None:
                    d = dst_list[i]
                    if not isinstance(d, torch.Tensor):
                        raise V.fail(f"dsts[{i}]", "a tensor", type(d).__name__, TypeError)
                    if d.numel() != R * s.numel():
                        raise V.fail(f"dsts[{i}]", f"{R} x {s.numel()} elements", d.numel())
                    if d.dtype != s.dtype:
                        raise V.fail(f"dsts[{i}]", f"dtype {s.dtype} like srcs[{i}]", d.dtype, TypeError)
                    if not d.is_contiguous() or d.device != self._all.device:
                        raise V.fail(f"dsts[{i}]", f"a contiguous tensor on the storage's device {self._all.device}",
                                     f"{'a non-contiguous tensor' if not d.is_contiguous() else 'a tensor'} on "
                                     f"{d.device}")
            placed, where = [], 0
            for i, s in enumerate(srcs):
                off = self._offset(s)
                placed.append((off, False) if off is not None else (self._stage(s, f"srcs[{i}]"), True))
                # Peers read each other at the same offsets: the offsets are part of the collective
                # contract (an in-place gather's shards differ by rank, their gathered tensor does not).
                common = off - _rank_shift(op, dst_list, off, s, R, rank) if off is not None else -1
                where = (where * 1000003 + common) % (1 << 61)
            state["placed"] = placed
            total = sum(s.numel() * s.element_size() for s in srcs)
            return [_OPS[op], len(srcs), total, int(torch.tensor(scale, dtype=torch.float32).view(torch.int32)),
                    int(precision == "bf16"), where]

        ctx.start(op, _SIGNATURE, check)
        results = ctx.guard(lambda: self._execute(ctx, op, srcs, dst_list, state["placed"], scale, precision, R,
                                                  rank))
        if not (self._win is not None and ctx is self.contexts[0]):  # the window's kernels waited for that
            ctx.start(op, ("operation",), lambda: [4])  # every rank has finished reading its peers
        if op != "all_gather":
            for acc, target in results:
                target.copy_(acc)
        out = [r if op == "all_gather" else r[1] for r in results]
        event = EventOverlap(EventHandle())
        event.register_hook_after_wait(lambda: out[0] if single else out)
        event.num_sms = 0
        return event

    def _gather_out(self, i, s, dsts, off, staged, R, rank):
        """Where source ``i``'s gathered tensor goes, and the storage offset of rank 0's shard in it
        (None: every rank's shard sits at ``off``)."""
        n, es = s.numel(), s.element_size()
        if dsts is not None:
            return dsts[i].view(-1), None
        if staged:
            return torch.empty(R * n, dtype=s.dtype, device=self._all.device), None
        start = off - rank * n * es
        if start < 0 or start + R * n * es > self.num_bytes:
            raise V.fail(f"srcs[{i}]", "this rank's shard of a registered gathered tensor (pass dsts, or "
                         "register R x its size)", f"byte {off} of the storage")
        return self.storage[start:start + R * n * es].view(s.dtype), start

    def _execute(self, ctx, op, srcs, dsts, placed, scale, precision, R, rank):
        if self._win is not None and ctx is self.contexts[0]:
            return self._execute_window(op, srcs, dsts, placed, scale, precision, R, rank)
        shm = ctx.transport_kind == "shm" and ctx is self.contexts[0]
        dev = self._all.device
        results = []
        for i, (s, (off, staged)) in enumerate(zip(srcs, placed, strict=True)):
            n = s.numel()
            if op == "all_gather":
                out, start = self._gather_out(i, s, dsts, off, staged, R, rank)
                if shm:
                    for p in range(R):
                        peer_off = off if start is None else start + p * n * s.element_size()
                        if not (p == rank and out.data_ptr() == s.data_ptr()):
                            out[p * n:(p + 1) * n].copy_(self._view(ctx, p, peer_off, s.dtype, n))
                else:
                    parts = [torch.empty(n, dtype=s.dtype, device=dev) for _ in range(R)]
                    dist.all_gather(parts, s.reshape(-1).contiguous().to(dev), group=ctx.group)
                    torch.cat(parts, out=out)
                results.append(out.view(-1))
                continue
            # Reductions: gather every rank's contribution to the part this rank owns, add in rank order.
            shard = n // R if op == "reduce_scatter" else n
            first = rank * shard if op == "reduce_scatter" else 0
            if shm:
                parts = [self._view(ctx, p, off + first * 4, torch.float32, shard) for p in range(R)]
            else:
                src = s.reshape(-1).contiguous().to(dev)
                if op == "reduce_scatter":
                    parts_t = torch.empty(R, shard, dtype=torch.float32, device=dev)
                    dist.all_to_all_single(parts_t, src.view(R, shard), group=ctx.group)
                else:
                    parts_t = torch.empty(R, n, dtype=torch.float32, device=dev)
                    dist.all_gather(list(parts_t), src, group=ctx.group)
                parts = list(parts_t)
            acc = torch.zeros(shard, dtype=torch.float32, device=dev)
            for part in parts:
                acc += part.bfloat16().float() if precision == "bf16" else part
            acc *= scale
            target = s.reshape(-1)[first:first + shard]
            results.append((acc, target))
        return results

    def _execute_window(self, op, srcs, dsts, placed, scale, precision, R, rank):
        """The same results from the window's kernels: every source sits at the same offset of every
        rank's window (the handshake compared them); nothing is read on the host."""
        win, results = self._win, []
        # the gathered tensors' checks before the first kernel (arrive)
        outs = [self._gather_out(i, s, dsts, off, staged, R, rank) if op == "all_gather" else None
                for i, (s, (off, staged)) in enumerate(zip(srcs, placed, strict=True))]
        win.arrive()
        for i, (s, (off, _)) in enumerate(zip(srcs, placed, strict=True)):
            n, es = s.numel(), s.element_size()
            if op == "all_gather":
                out, start = outs[i]
                in_place = start is not None and out.data_ptr() + rank * n * es == s.data_ptr()
                win.gather(out, off if start is None else start, 0 if start is None else n * es, n * es,
                           rank if in_place else -1)
                results.append(out.view(-1))
                continue
            shard = n // R if op == "reduce_scatter" else n
            first = rank * shard if op == "reduce_scatter" else 0
            acc = torch.empty(shard, dtype=torch.float32, device=self._all.device)
            win.reduce(acc, off + first * 4, scale, precision == "bf16")
            results.append((acc, s.reshape(-1)[first:first + shard]))
        win.depart()
        return results


def _rank_shift(op, dsts, off, s, num_ranks, rank) -> int:
    """How far this rank's source sits from the offset every rank shares (its shard position for an
    in-place all-gather, else 0)."""
    return rank * s.numel() * s.element_size() if op == "all_gather" and dsts is None else 0


def _bucket_window(session, num_bytes: int):
    """The symmetric window for the storage, or None: not the Ascend engine, or its choice of the collectives
    (``EP_ASCEND_TRANSPORT=hccl``, or a group the window cannot span: ranks on several hosts)."""
    if session.backend != "ascend":
        return None
    from ..ascend.transport_choice import uses_window
    if not uses_window(session):
        return None
    if session.device.type != "cpu":
        # CANN SHMEM windows have no torch view of their own memory here yet: device storage and HCCL collectives
        return None                                                                       # pragma: npu
    from ..ascend.bucket_window import BucketWindow
    return BucketWindow(session.group, num_bytes, session.device, session.timeout_s)
