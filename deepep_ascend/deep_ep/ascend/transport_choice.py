"""Which transport the Ascend engine moves its rows with: the symmetric window (kernel-initiated writes
into the peers' windows: symm_steps.py, ll_window.py, bucket_window.py) or the collectives
(transport.py: HCCL, gloo on the twin). ``EP_ASCEND_TRANSPORT``, the same on every rank:

- ``auto`` (default): the window where every rank of the group can reach every other rank's window,
  told without allocating anything:

  - CPU tensors (the twin): every rank on this host (the window is one host's shared memory);
  - NPU tensors: every rank on one host, its process already initialised by the platform for CANN
    SHMEM (``libshmem.so`` loaded and ``aclshmemx_init_status() == ACLSHMEM_STATUS_IS_INITIALIZED``)
    with the group's ranks as its PEs (``aclshmem_my_pe`` / ``aclshmem_n_pes``). Ranks on several
    hosts keep the collectives under ``auto`` even on a supernode: whether their windows reach each
    other shows only once a window is allocated (``aclshmem_ptr``), so a supernode opts in with ``symm``.

  Otherwise the collectives (HCCL; groups over several hosts).
- ``symm``: the window, or a ``ValueError`` naming EP_ASCEND_TRANSPORT where it cannot exist (twin ranks
  on several hosts; an NPU process without CANN SHMEM initialised with the group's ranks).
- ``hccl``: the collectives always.

The choice is collective (one ``all_gather_object`` at the session's first Ascend engine), so every rank
takes the same one. Rows wider than the exchange's UB row buffer still take the collective step per call
(engine.py, low_latency.py).
"""
from __future__ import annotations

import os

import torch.distributed as dist

from deepjit import validation as V
from deepjit.symm import host_identity

CHOICES = ("auto", "symm", "hccl")
_IS_INITIALIZED = 2   # aclshmemx_init_status_t ACLSHMEM_STATUS_IS_INITIALIZED


def decide(device_type: str, ranks: list) -> bool:
    """Whether the window serves, from every rank's ``(host, EP_ASCEND_TRANSPORT, CANN SHMEM ready)``. A bad or
    differing value raises here, on every rank alike (after the gather, so no rank is left waiting in it)."""
    bad = [(i, r[1]) for i, r in enumerate(ranks) if r[1] not in CHOICES]
    if bad:
        raise V.fail("EP_ASCEND_TRANSPORT", f"one of {', '.join(CHOICES)} on every rank",
                     ", ".join(f"{v!r} on rank {i}" for i, v in bad))
    values = {r[1] for r in ranks}
    if len(values) != 1:
        raise V.fail("EP_ASCEND_TRANSPORT", "one value on every rank", [r[1] for r in ranks])
    value = values.pop()
    if value == "hccl":
        return False
    one_host = len({r[0] for r in ranks}) == 1
    if device_type == "cpu":
        if value == "symm" and not one_host:
            raise V.fail("EP_ASCEND_TRANSPORT", "'auto' or 'hccl' for ranks on several hosts with CPU tensors (the "
                         "twin's window is one host's shared memory)", repr(value))
        return one_host
    ready = all(r[2] for r in ranks)
    if value == "symm" and not ready:
        raise V.fail("EP_ASCEND_TRANSPORT", "'auto' or 'hccl' unless every rank has initialised CANN SHMEM "
                     "(aclshmemx_init_attr) with the group's ranks as its PEs",
                     f"'symm' with it not ready on rank(s) {[i for i, r in enumerate(ranks) if not r[2]]}")
    return ready and (one_host or value == "symm")


def uses_window(session) -> bool:
    """The session's choice, made once (collectively) and kept on it."""
    got = getattr(session, "_ascend_window", None)
    if got is None:
        group, device = session.group, session.device
        value = os.environ.get("EP_ASCEND_TRANSPORT", "") or "auto"   # checked by decide, on every rank
        try:
            ready = device.type != "cpu" and value in ("auto", "symm") and _shmem_ready(group)
        except Exception:  # noqa: BLE001 - a probe that fails counts as not ready; no rank may skip the gather
            ready = False
        me = (host_identity(), value, ready)
        ranks = [None] * group.size()
        dist.all_gather_object(ranks, me, group=group)
        got = session._ascend_window = decide(device.type, ranks)
    return got


def _shmem_ready(group) -> bool:                                                        # pragma: npu
    """CANN SHMEM initialised in this process with the group's ranks as PEs; loads nothing new (a process
    the platform has not initialised has no ``libshmem.so`` loaded) and allocates nothing."""
    import ctypes

    home = os.environ.get("ACLSHMEM_HOME")
    lib = None
    for path in ([os.path.join(home, "lib", "libshmem.so")] if home else []) + ["libshmem.so"]:
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            break
        except OSError:
            continue
    if lib is None or not all(hasattr(lib, f) for f in ("aclshmemx_init_status", "aclshmem_my_pe", "aclshmem_n_pes")):
        return False
    if lib.aclshmemx_init_status() != _IS_INITIALIZED:
        return False
    # DeviceWindow addresses peers by group rank as PEs: the group must be CANN SHMEM's world, in order
    return (lib.aclshmem_n_pes() == group.size() == dist.get_world_size()
            and lib.aclshmem_my_pe() == group.rank() == dist.get_rank())
