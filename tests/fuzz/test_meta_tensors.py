"""Meta tensors (no data) given to the public ops: a TypeError naming the argument, before any work, in every
library (they reached ``.item()`` or a copy and failed there with a raw RuntimeError / NotImplementedError).
Tracing uses the ``torch.ops`` Meta kernels, not these entry points."""
import pytest
import torch

import deep_gemm
import flash_mla
import tile_kernels


def _m(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _i32(*values):
    return torch.tensor(values, dtype=torch.int32, device="meta")


CALLS = {
    "varlen": ("q", lambda: flash_mla.flash_attn_varlen_func(_m(4, 4, 64), _m(4, 4, 64), _m(4, 4, 64), _i32(0, 4),
                                                            _i32(0, 4), 4, 4)),
    "sparse_prefill": ("q", lambda: flash_mla.flash_mla_sparse_fwd(_m(4, 64, 512), _m(10, 1, 512),
                                                                   _m(4, 1, 16, dtype=torch.int32), 0.1)),
    "paged_mqa_metadata": ("context_lens", lambda: deep_gemm.get_paged_mqa_logits_metadata(
        _m(4, 1, dtype=torch.int32), 64, 4)),
    "bf16_gemm_nt": ("a", lambda: deep_gemm.bf16_gemm_nt(_m(64, 128), _m(64, 128), _m(64, 64))),
    "fused_mapping": ("topk_idx", lambda: tile_kernels.moe.get_fused_mapping(_m(4, 2, dtype=torch.int64), 8, 16, 4)),
    "per_token_cast": ("x", lambda: tile_kernels.quant.per_token_cast(_m(8, 128), "e4m3", 128)),
}


@pytest.mark.parametrize("op", sorted(CALLS))
def test_meta_tensor_is_a_type_error_naming_the_argument(op):
    name, call = CALLS[op]
    with pytest.raises(TypeError, match=rf"^{name}: expected a tensor with data, got a meta tensor"):
        call()
