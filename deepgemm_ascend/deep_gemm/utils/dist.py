"""Process-group helpers of the upstream tests (gloo on CPU, HCCL on NPU, NCCL on CUDA)."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def init_dist(local_rank: int, num_local_ranks: int):
    """Join the default group from MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK; returns (rank, world size, group)."""
    ip = os.getenv("MASTER_ADDR", "127.0.0.1")
    port = int(os.getenv("MASTER_PORT", "8361"))
    num_nodes = int(os.getenv("WORLD_SIZE", "1"))
    node_rank = int(os.getenv("RANK", "0"))
    backend = "nccl" if torch.cuda.is_available() else ("hccl" if hasattr(torch, "npu") else "gloo")
    if not dist.is_initialized():
        dist.init_process_group(backend, init_method=f"tcp://{ip}:{port}", world_size=num_nodes * num_local_ranks,
                                rank=node_rank * num_local_ranks + local_rank)
    group = dist.new_group(list(range(num_local_ranks * num_nodes)))
    return dist.get_rank(), dist.get_world_size(), group


def uneven_all_gather(tensor: torch.Tensor, dim: int = 0, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """All-gather tensors whose size along ``dim`` differs per rank, concatenated in rank order."""
    world = dist.get_world_size(group)
    size = torch.tensor([tensor.size(dim)], dtype=torch.int64, device=tensor.device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    max_size = int(max(s.item() for s in sizes))
    pad_shape = list(tensor.shape)
    pad_shape[dim] = max_size - tensor.size(dim)
    padded = torch.cat([tensor, tensor.new_zeros(pad_shape)], dim=dim)
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    return torch.cat([g.narrow(dim, 0, int(s.item())) for g, s in zip(gathered, sizes, strict=True)], dim=dim)


def dist_print(*args, once_in_node: bool = False, **kwargs) -> None:
    """print on every rank, or only on local rank 0 with ``once_in_node``."""
    if once_in_node and dist.is_initialized() and dist.get_rank() % int(os.getenv("LOCAL_WORLD_SIZE", "1")) != 0:
        return
    print(*args, **kwargs, flush=True)
