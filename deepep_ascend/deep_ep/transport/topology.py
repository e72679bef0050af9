"""Transport choice from the group's topology: one host -> shared memory; several hosts ->
shared memory inside each host and collectives between hosts ("hybrid"); no host kernels (or
non-CPU tensors) -> collectives only.

``EP_TRANSPORT=auto|shm|hybrid|dist`` forces a choice (``shm`` needs every rank on one host,
``shm`` and ``hybrid`` need CPU tensors and a C++ compiler). Host identity comes from ``deepjit.symm.host_identity`` (``DJ_SYMM_HOST_ID`` overrides it,
which is how tests simulate several hosts on one machine).
"""
from __future__ import annotations

import os

import torch.distributed as dist

from deepjit import validation as V
from deepjit.symm import host_identity

CHOICES = ("auto", "shm", "hybrid", "dist")


def forced_transport() -> str:
    value = os.environ.get("EP_TRANSPORT", "auto") or "auto"
    if value not in CHOICES:
        raise V.fail("EP_TRANSPORT", f"one of {', '.join(CHOICES)}", repr(value))
    return value


def choose_transport(group, device_type: str, host_kernels: bool) -> str:
    """Collective: every rank learns every rank's host and takes the same decision."""
    hosts = [None] * group.size()
    dist.all_gather_object(hosts, (host_identity(), forced_transport(), host_kernels), group=group)
    forced = {h[1] for h in hosts}
    if len(forced) != 1:
        raise V.fail("EP_TRANSPORT", "one value on every rank", [h[1] for h in hosts])
    wanted = forced.pop()
    one_host = len({h[0] for h in hosts}) == 1
    can_window = device_type == "cpu" and all(h[2] for h in hosts)
    if wanted in ("shm", "hybrid") and not can_window:
        kernels = "" if all(h[2] for h in hosts) else ", a rank without host kernels"
        raise V.fail("EP_TRANSPORT", "'auto' or 'dist' unless every rank has CPU tensors and host kernels",
                     f"{wanted!r} with {device_type} tensors{kernels}")
    if wanted == "shm" and not one_host:
        raise V.fail("EP_TRANSPORT", "'auto', 'hybrid' or 'dist' where ranks span several hosts", repr(wanted))
    if wanted == "auto":
        return ("shm" if one_host else "hybrid") if can_window else "dist"
    return wanted
