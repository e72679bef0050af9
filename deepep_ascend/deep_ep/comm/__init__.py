"""Communication helpers (``deep_ep.comm``): the buffers bind them as methods, as upstream does,
and the domain-size queries also take a process group."""
from __future__ import annotations

import torch.distributed as dist

from deepjit.symm import host_identity


class CpuStream:
    """The CPU stand-in for a comm stream: work runs on the buffer's background worker."""

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass


_STREAM = CpuStream()


def barrier(buffer, wait_comm_stream: bool = True, with_cpu_sync: bool = False, sequential: bool = True,
            context_idx: int | None = None) -> None:
    """Collective barrier over the buffer's group (V2.5). On CPU the buffer's outstanding work is
    always finished first, whatever ``wait_comm_stream`` says: the barrier is one more operation
    of the buffer's sequence."""
    buffer._check_alive()
    session = getattr(buffer, "_session", None) if context_idx is None else buffer.contexts[context_idx]
    if session is None:  # a buffer without an operation sequence (EngramBuffer)
        dist.barrier(group=buffer.group)
        return
    session.start("barrier", ("operation",), lambda: [3])


def get_comm_stream(self):
    return _STREAM


def get_physical_domain_size(group_or_buffer) -> tuple[int, int]:
    """(hosts, ranks per host), upstream's (RDMA ranks, NVLink-domain ranks), for a buffer or a
    process group (a group asks every rank for its host: collective); a group whose hosts hold
    different numbers of ranks reports one domain of all of them."""
    if isinstance(group_or_buffer, dist.ProcessGroup):
        group = group_or_buffer
        hosts = [None] * group.size()
        dist.all_gather_object(hosts, host_identity(), group=group)
        local = hosts.count(hosts[group.rank()])
        if any(hosts.count(h) != local for h in hosts):
            return 1, group.size()
        return group.size() // local, local
    buffer = group_or_buffer
    window = getattr(getattr(buffer, "_session", None), "transport", None)
    window = getattr(window, "window", None)
    size = buffer.group.size()
    local = window.num_local_ranks if window is not None else size
    if size % local:
        return 1, size
    return size // local, local


def get_logical_domain_size(group_or_buffer, allow_hybrid_mode: bool | None = None) -> tuple[int, int]:
    """(scale-out ranks, scale-up ranks): no hybrid forwarding here, so one scale-up domain."""
    group = group_or_buffer if isinstance(group_or_buffer, dist.ProcessGroup) else group_or_buffer.group
    return 1, group.size()


def get_nccl_comm_handle(group: dist.ProcessGroup, force_new_comm: bool = False):
    """No NCCL on CPU or Ascend: the process group itself is the communicator."""
    return group


def destroy_all_managed_nccl_comm() -> None:
    """Upstream releases the communicators it created; this backend creates none (it uses the
    process groups themselves), so there is nothing to release."""


destroy_all_managed_hccl_comm = destroy_all_managed_nccl_comm  # DeepEP-Ascend's name
