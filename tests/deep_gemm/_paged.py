"""Test inputs for the paged MQA logits."""
import torch

from deep_gemm.utils import per_custom_dims_cast_to_fp8


def fused_fp8_cache(num_pages: int, block_kv: int, head_dim: int) -> torch.Tensor:
    """Upstream's fused paged cache of random pages ``[num_pages, block_kv, 1, head_dim + 4]``: per page
    ``block_kv`` E4M3 rows, then their FP32 scales."""
    values, sf = per_custom_dims_cast_to_fp8(torch.randn(num_pages * block_kv, head_dim), (0,), False)
    cache = torch.empty(num_pages, block_kv * (head_dim + 4), dtype=torch.uint8)
    cache[:, :block_kv * head_dim] = values.view(torch.uint8).view(num_pages, -1)
    cache[:, block_kv * head_dim:] = sf.view(torch.uint8).view(num_pages, -1)
    return cache.view(num_pages, block_kv, 1, head_dim + 4)
