"""Communication helpers shared by the buffers (bound as methods, as upstream does)."""
from __future__ import annotations

import torch.distributed as dist


class CpuStream:
    """The CPU stand-in for a comm stream: work runs on the buffer's background worker."""

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass


_STREAM = CpuStream()


def barrier(self, use_comm_stream: bool = True, with_cpu_sync: bool = False, sequential: bool = True) -> None:
    """Collective barrier over the buffer's group (finishes this rank's outstanding work first)."""
    self._check_alive()
    self._session.start("barrier", ("operation",), lambda: [3])


def get_comm_stream(self):
    return _STREAM


def get_physical_domain_size(self) -> tuple[int, int]:
    """(hosts, ranks per host) — upstream's (RDMA ranks, NVLink-domain ranks); one host unless the
    group spans several (then every host must hold the same number of ranks to report a grid)."""
    window = getattr(getattr(self, "_session", None), "transport", None)
    window = getattr(window, "window", None)
    local = window.num_local_ranks if window is not None else self.group.size()
    if self.group.size() % local:
        return 1, self.group.size()
    return self.group.size() // local, local


def get_logical_domain_size(self) -> tuple[int, int]:
    """(scale-out ranks, scale-up ranks); no hybrid mode on this transport."""
    return 1, self.group.size()


def get_nccl_comm_handle(group: dist.ProcessGroup, force_new_comm: bool = False):
    """No NCCL on CPU or Ascend: the process group itself is the communicator."""
    return group
