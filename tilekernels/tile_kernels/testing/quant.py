import torch

from ..utils import align, ceil_div


def clear_unused_sf(sf: torch.Tensor, hidden: int, num_per_channels: int) -> torch.Tensor:
    """Packed UE8M0 sf -> a flat byte view per row with the padding bytes (beyond the real
    channel blocks, left unspecified by the kernels) zeroed, for comparisons."""
    blocks = ceil_div(hidden, num_per_channels)
    rows = sf.contiguous().flatten().view(torch.uint8).view(-1, align(blocks, 4))
    rows[:, blocks:] = 0
    return rows
