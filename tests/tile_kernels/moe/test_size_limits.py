"""tile_kernels' MoE layout ops check the sizes a caller's integers give before allocating: positions and
expert ids are int32, and an allocation must fit the free memory (a ValueError naming the argument)."""
import pytest
import torch

from tile_kernels.moe import aux_fi, get_fused_mapping, group_count

IDX = torch.zeros(4, 2, dtype=torch.int64)


@pytest.mark.parametrize(("num_experts", "num_expanded_tokens", "alignment", "name"), [
    (8, 0, 2**30, "alignment"),                 # padded positions past int32
    (8, 2**63 - 1, 32, "num_expanded_tokens"),
    (2**40, 0, 32, "num_experts"),
    (2**30, 0, 1, "num_experts"),               # int32, but 32 GiB of per-expert tables
])
def test_get_fused_mapping(num_experts, num_expanded_tokens, alignment, name):
    with pytest.raises(ValueError, match=f"{name}: expected"):
        get_fused_mapping(IDX, num_experts, num_expanded_tokens, alignment)


def test_histograms():
    with pytest.raises(ValueError, match="num_groups: expected"):
        group_count(IDX, 2**40)
    with pytest.raises(ValueError, match="num_experts: expected"):
        aux_fi(IDX, 2**36, 1)
