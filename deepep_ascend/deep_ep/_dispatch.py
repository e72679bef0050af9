"""deep_ep's backend table. A buffer picks its engines once, at construction, for its session's
device: the normal dispatch / combine engine, the low-latency engine, and the FP8 cast the V1
facade applies before a low-latency dispatch. Each entry names its reference, host and Ascend
implementation (deep_ep/ascend/: collectives over the HCCL group and TileLang kernels; on CPU tensors
under ``EP_BACKEND=ascend``, gloo and the Ascend twin); ``EP_BACKEND`` forces one, and forcing one an
entry lacks raises ``deepjit.BackendUnavailableError`` naming it."""
from __future__ import annotations

import math

import torch

from deepjit import BackendTable, Impl

from ._lib import LIB, kernel
from .ascend import gather as ascend_gather
from .ascend import kernel_specs as ascend_kernels
from .utils.math import per_token_cast_to_fp8


def _reference_engine(session, rank: int, num_ranks: int, region_bytes: int):
    from .reference.engine import ReferenceEngine
    return ReferenceEngine(session.group, rank, num_ranks, region_bytes)


def _host_engine(session, rank: int, num_ranks: int, region_bytes: int):
    from .host.engine import HostEngine
    return HostEngine(session.transport, rank, num_ranks, region_bytes, session.threads)


def _ascend_engine(session, rank: int, num_ranks: int, region_bytes: int):
    from .ascend.engine import AscendEngine
    from .ascend.transport_choice import uses_window
    return AscendEngine(session.group, session.device, rank, num_ranks, region_bytes, session.timeout_s,
                        window=uses_window(session))


def _no_low_latency_engine(session, region_bytes: int):
    return None  # the V1 facade runs its low-latency calls on the normal engine


def _low_latency_engine(session, region_bytes: int):
    from .engine.low_latency import LowLatencyEngine
    return LowLatencyEngine(session, region_bytes, session.threads)


def _ascend_low_latency_engine(session, region_bytes: int):
    from .ascend.low_latency import AscendLowLatencyEngine
    return AscendLowLatencyEngine(session)


def _cast_ref(x: torch.Tensor, round_scale: bool, threads: int):
    return per_token_cast_to_fp8(x, use_ue8m0=round_scale)


def _cast_host(x: torch.Tensor, round_scale: bool, threads: int):
    """The reference cast (utils/math.py) as a host kernel, bit for bit."""
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
    scales = torch.empty(x.shape[0], x.shape[1] // 128, dtype=torch.float32)
    kernel("ep_fp8_cast")(x, out, scales, x.shape[0], x.shape[1], int(round_scale), threads)
    return out, scales


def _cast_ascend(x: torch.Tensor, round_scale: bool, threads: int):
    from .ascend.fp8_pack import per_token_cast_to_fp8
    return per_token_cast_to_fp8(x, round_scale)


def _gather_ref(peers: list[torch.Tensor], rows_per_peer: int, ids: torch.Tensor, threads: int):
    """Rows ``ids`` (int32 global ids) of the table split over ``peers`` (``rows_per_peer`` rows each); an id
    outside the table gives a zero row. Tensor ops on the peers' device only (no host read): rows move as
    bytes, selected with ``where``."""
    flat = ids.reshape(-1).long()
    width = math.prod(peers[0].shape[1:]) * peers[0].element_size()
    out = torch.zeros(flat.numel(), width, dtype=torch.uint8, device=peers[0].device)
    owner = torch.div(flat, max(rows_per_peer, 1), rounding_mode="floor")   # empty peers: no hit below
    for peer, table in enumerate(peers):
        local = flat - peer * rows_per_peer
        hit = (owner == peer) & (local < table.shape[0])
        if table.shape[0] and width:
            rows = table.contiguous().view(torch.uint8).reshape(table.shape[0], width)
            out = torch.where(hit[:, None], rows[torch.where(hit, local, 0)], out)
    return out.view(peers[0].dtype).reshape(flat.numel(), *peers[0].shape[1:])


def _gather_host(peers: list[torch.Tensor], rows_per_peer: int, ids: torch.Tensor, threads: int):
    """The reference gather as a host kernel: whole rows copied from each peer's table in place."""
    ids = ids.contiguous()
    out = torch.empty((ids.numel(), *peers[0].shape[1:]), dtype=peers[0].dtype)
    if out.numel():
        addresses = torch.tensor([t.data_ptr() for t in peers], dtype=torch.int64)
        kernel("ep_engram_gather")(out, addresses, ids, ids.numel(), rows_per_peer,
                                   out[0].numel() * out.element_size(), threads)
    return out


TABLE = BackendTable(LIB)
TABLE.register("dispatch_combine", reference=_reference_engine,
               host=Impl(_host_engine, "every transport (shared memory, gloo, hybrid)"),
               ascend=Impl(_ascend_engine, "kernel-initiated writes into the peers' symmetric windows where the ranks "
                           "share one, else collectives (HCCL; gloo on the twin): EP_ASCEND_TRANSPORT=auto|symm|hccl",
                           kernels=ascend_kernels.ENGINE))
TABLE.register("low_latency", reference=_no_low_latency_engine,
               host=Impl(_low_latency_engine, "ranks of one host over shared memory",
                         lambda session, *_: session.transport_kind == "shm"),
               ascend=Impl(_ascend_low_latency_engine, "fixed-size buffers: the symmetric window where the ranks share "
                           "one (shrink masks there), else equal all-to-all splits (EP_ASCEND_TRANSPORT)",
                           kernels=ascend_kernels.LOW_LATENCY))
TABLE.register("engram_gather", reference=_gather_ref,
               host=Impl(_gather_host, "contiguous peer tables",
                         lambda peers, *_: all(t.is_contiguous() for t in peers)),
               ascend=Impl(ascend_gather.gather, "one table (all-gathered on the device) of rows of whole 32-bit words, "
                           "up to 64 KiB; out-of-range ids give zero rows", ascend_gather.accepts,
                           kernels=ascend_kernels.GATHER))
TABLE.register("per_token_cast_to_fp8", reference=_cast_ref,
               host=Impl(_cast_host, "hidden % 128 == 0", lambda x, *_: x.shape[1] % 128 == 0),
               ascend=Impl(_cast_ascend, "hidden % 128 == 0", lambda x, *_: x.shape[1] % 128 == 0,
                           kernels=ascend_kernels.CAST))
