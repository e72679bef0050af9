"""Process setup helpers of upstream's ``deep_ep.utils.envs``: seeds, rank-ordered printing,
``init_dist`` (gloo on CPU, HCCL with torch_npu) and the domain-size queries."""
from __future__ import annotations

import os
import random

import torch
import torch.distributed as dist

from ..comm import get_logical_domain_size, get_physical_domain_size

__all__ = ["check_torch_deterministic", "dist_print", "get_global_seed", "get_local_seed", "get_logical_domain_size",
           "get_physical_domain_size", "init_dist", "init_seed"]

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
