import torch


def batched_transpose(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).contiguous()


def transpose(x: torch.Tensor) -> torch.Tensor:
    return x.T.contiguous()
