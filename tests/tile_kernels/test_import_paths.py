"""Upstream's module paths: ``tile_kernels.torch.<name>`` modules, the ``*_kernel`` modules of quant,
moe, engram, transpose and mhc, and ``tile_kernels.modeling.engram.engram_gate``; each is called."""
import importlib

import pytest
import torch

import tile_kernels

TORCH_MODULES = {"cast": ["cast", "cast_back"], "cast_e5m6": ["cast_to_e5m6", "cast_back_from_e5m6"],
                 "expand_to_fused": ["expand_to_fused", "expand_to_fused_with_sf"],
                 "mhc": ["mhc_pre_norm_fn_ref", "sinkhorn_normalize_ref"], "moe": ["aux_fi", "normalize_weight"],
                 "per_channel_cast_fused": ["per_channel_cast_fused"], "reduce_fused": ["reduce_fused"],
                 "swiglu": ["swiglu_forward", "swiglu_backward"], "topk": ["stable_topk", "top2_sum_gate"],
                 "engram": ["engram_gate_ref"]}
KERNEL_MODULES = {
    "quant": ["cast_back_kernel", "per_block_cast_kernel", "per_block_cast_lossless_kernel",
              "per_channel_cast_and_transpose_kernel", "per_channel_cast_fused_kernel", "per_channel_cast_kernel",
              "per_token_cast_kernel", "swiglu_backward_and_per_token_cast_kernel",
              "swiglu_forward_and_per_channel_cast_and_transpose_kernel", "swiglu_forward_and_per_token_cast_kernel"],
    "moe": ["aux_fi_kernel", "expand_to_fused_kernel", "get_fused_mapping_kernel", "group_count_kernel",
            "inplace_unique_group_indices_kernel", "mask_indices_by_tp_kernel", "normalize_weight_kernel",
            "reduce_fused_kernel", "top2_sum_gate_kernel", "topk_gate_kernel", "topk_sum_and_topk_group_idx_kernel"],
    "engram": ["engram_fused_weight_kernel", "engram_gate_kernel", "engram_grad_w_reduce_kernel", "engram_hash_kernel"],
    "transpose": ["batched_transpose_kernel"],
    "mhc": ["multilayer_recompute_kernel", "norm_fn_kernel"],
}


@pytest.mark.parametrize("module,names", TORCH_MODULES.items())
def test_torch_reference_modules(module, names):
    mod = importlib.import_module(f"tile_kernels.torch.{module}")
    for name in names:
        assert getattr(mod, name) is getattr(tile_kernels.torch, name) if module != "engram" else callable(mod.engram_gate_ref)


@pytest.mark.parametrize("package,module", [(p, m) for p, ms in KERNEL_MODULES.items() for m in ms])
def test_kernel_modules_export_the_package_ops(package, module):
    mod = importlib.import_module(f"tile_kernels.{package}.{module}")
    assert mod.__all__
    for name in mod.__all__:
        fn = getattr(mod, name)
        assert callable(fn)
        if hasattr(importlib.import_module(f"tile_kernels.{package}"), name):
            assert fn is getattr(importlib.import_module(f"tile_kernels.{package}"), name)


def test_calls_through_the_module_paths():
    from tile_kernels.modeling.engram.engram_gate import EngramGateFn, engram_gate
    from tile_kernels.moe.normalize_weight_kernel import normalize_weight
    from tile_kernels.quant.per_token_cast_kernel import per_token_cast
    from tile_kernels.torch.cast import cast_back
    from tile_kernels.torch.moe import normalize_weight as normalize_weight_ref
    from tile_kernels.transpose.batched_transpose_kernel import transpose

    x = torch.randn(8, 256).bfloat16()
    q = per_token_cast(x, "e4m3", 128)
    back = cast_back(q, "fp32", (1, 128))
    assert (back - x.float()).abs().max() <= x.float().abs().max() * 0.07
    w = torch.rand(5, 4)
    for got, want in zip(normalize_weight(w), normalize_weight_ref(w), strict=True):
        torch.testing.assert_close(got, want)
    assert torch.equal(transpose(x), x.t())
    assert engram_gate is tile_kernels.modeling.engram.engram_gate and issubclass(EngramGateFn, torch.autograd.Function)
