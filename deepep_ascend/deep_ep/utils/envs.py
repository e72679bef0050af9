"""Process setup helpers of upstream's ``deep_ep.utils.envs``: seeds, rank-ordered printing,
``init_dist`` (gloo on CPU, HCCL with torch_npu), the domain-size queries and the link queries."""
from __future__ import annotations

import functools
import os
import random
import re
import subprocess

import torch
import torch.distributed as dist

from ..comm import get_logical_domain_size, get_physical_domain_size

__all__ = ["check_fast_rdma_atomic_support", "check_nvlink_connections", "check_torch_deterministic", "dist_print",
           "get_global_seed", "get_local_seed", "get_logical_domain_size", "get_nvlink_gbs", "get_physical_domain_size",
           "get_rdma_gbs", "init_dist", "init_seed"]

_DEFAULT_NIC_NAME = os.getenv("EP_NIC_NAME", "mlx5_0")

_local_rank = None
_local_seed = 0
_global_seed = 0


def init_seed(global_seed: int) -> None:
    """Seeds torch and ``random`` with ``global_seed + rank`` (the local seed)."""
    global _local_seed, _global_seed
    _global_seed = global_seed
    _local_seed = global_seed + dist.get_rank()
    torch.manual_seed(_local_seed)
    random.seed(_local_seed)


def get_local_seed() -> int:
    return _local_seed


def get_global_seed() -> int:
    return _global_seed


def dist_print(s: str = "", once_in_node: bool = False) -> None:
    """Prints on every rank (or local rank 0 only), then a barrier; needs ``init_dist``."""
    if _local_rank is None:
        raise RuntimeError("dist_print needs init_dist(...) first")
    if not once_in_node or _local_rank == 0:
        print(s, flush=True)
    dist.barrier()


def init_dist(local_rank: int, num_local_ranks: int, seed: int = 0):
    """Joins the job from ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE`` (nodes)/``RANK`` (node
    index) as upstream does, with gloo (HCCL when torch_npu is loaded). Returns
    ``(rank, world_size, group)``."""
    global _local_rank
    ip = os.getenv("MASTER_ADDR", "127.0.0.1")
    port = int(os.getenv("MASTER_PORT", "8361"))
    num_nodes = int(os.getenv("WORLD_SIZE", "1"))
    node_rank = int(os.getenv("RANK", "0"))
    _local_rank = local_rank
    npu = getattr(torch, "npu", None)
    backend = "hccl" if npu is not None and npu.is_available() else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://{ip}:{port}", world_size=num_nodes * num_local_ranks,
                            rank=node_rank * num_local_ranks + local_rank)
    if backend == "hccl":
        npu.set_device(local_rank)
    init_seed(seed)
    return dist.get_rank(), dist.get_world_size(), dist.new_group(list(range(num_local_ranks * num_nodes)))


def check_torch_deterministic() -> None:
    """Upstream refuses deterministic algorithms together with filling uninitialised memory
    (``torch.empty`` would launch a fill racing with the comm stream)."""
    if torch.are_deterministic_algorithms_enabled() and torch.utils.deterministic.fill_uninitialized_memory:
        raise RuntimeError("deterministic algorithms with fill_uninitialized_memory are not supported: set "
                           "torch.utils.deterministic.fill_uninitialized_memory = False")


def check_nvlink_connections(group: dist.ProcessGroup) -> None:
    """Upstream checks that PCIe GPUs pair up over NVLink; ranks of one host here share memory
    with every peer, so there is nothing to refuse."""


def _ibstat_field(nic_name: str, field: str) -> str | None:
    try:
        out = subprocess.run(["ibstat"], capture_output=True, text=True, check=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return ibstat_field(out, nic_name, field)


def ibstat_field(ibstat: str, nic_name: str, field: str) -> str | None:
    """``field`` of the CA named ``nic_name`` in ``ibstat``'s output, searched in that CA's own section only
    (up to the next ``CA '...'`` header), so another CA's value is never taken."""
    start = re.search(rf"^CA '{re.escape(nic_name)}'", ibstat, re.M)
    if start is None:
        return None
    end = re.compile(r"^CA '", re.M).search(ibstat, start.end())
    match = re.search(rf"{field}:\s*(\S+)", ibstat[start.end():end.start() if end else len(ibstat)], re.DOTALL)
    return match.group(1) if match else None


@functools.lru_cache
def get_nvlink_gbs(factor: float = 0.9) -> float:
    """Upstream reads the NVLink lanes from ``nvidia-smi`` (0 when that fails); there are none
    here: ``EP_NVLINK_GBS`` if set, else 0, as upstream without NVLink."""
    return float(os.environ.get("EP_NVLINK_GBS", 0)) * factor


@functools.lru_cache
def check_fast_rdma_atomic_support(nic_name: str = _DEFAULT_NIC_NAME) -> bool:
    """True for a ConnectX-8 (``MT4131``) NIC named ``nic_name`` in ``ibstat``, as upstream."""
    return _ibstat_field(nic_name, "CA type") == "MT4131"


@functools.lru_cache
def get_rdma_gbs(nic_name: str = _DEFAULT_NIC_NAME) -> float:
    """The NIC's rate in GB/s from ``ibstat`` as upstream. Without an InfiniBand NIC (ranks on other
    hosts talk through gloo's TCP) it returns ``EP_RDMA_GBS`` or a nominal 12.5 (100 Gb/s) rather
    than upstream's 0, which its tests divide by."""
    rate = _ibstat_field(nic_name, r"Port \d+:\s*.*?Rate")
    if rate is not None and rate.isdigit():
        return int(rate) / 8
    return float(os.environ.get("EP_RDMA_GBS", 12.5))
