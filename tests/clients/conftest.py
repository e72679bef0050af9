"""Client call-form tests: each file calls the suite as one framework's code does (its argument
conventions, keywords and layouts), so a regression shows up under that framework's name."""
import pytest
import torch

from deep_gemm import runtime


@pytest.fixture(autouse=True)
def _seed_and_alignment():
    torch.manual_seed(0)
    saved = runtime._state.mk_alignment
    yield
    runtime._state.mk_alignment = saved


def dequant_rows(q: torch.Tensor, sf: torch.Tensor, block: int) -> torch.Tensor:
    """FP8 data times its per-(row, K-block) scales, in FP32."""
    return q.float() * sf.float().repeat_interleave(block, dim=-1)[..., :q.shape[-1]]


def dequant_blocks(q: torch.Tensor, sf: torch.Tensor, block: int) -> torch.Tensor:
    """FP8 data times its per-(block x block) scales (the last two dims), in FP32."""
    scale = sf.float().repeat_interleave(block, dim=-2).repeat_interleave(block, dim=-1)
    return q.float() * scale[..., :q.shape[-2], :q.shape[-1]]
