"""Bad arguments are rejected with ValueError/TypeError naming the argument, before any work."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tile_kernels
from tile_kernels import torch as ref

Q = tile_kernels.quant


@settings(max_examples=40, deadline=None)
@given(fmt=st.text(max_size=6).filter(lambda s: s not in ("e4m3", "e2m1", "e5m6")))
def test_unknown_format(fmt):
    with pytest.raises(ValueError, match="fmt"):
        Q.per_token_cast(torch.randn(4, 128), fmt, 128)


@settings(max_examples=40, deadline=None)
@given(npc=st.integers(1, 600).filter(lambda n: n not in (16, 32, 64, 128, 512)))
def test_channel_block_not_supported(npc):
    with pytest.raises(ValueError, match=rf"^num_per_channels: expected 16, 32, 64, 128 or the hidden size \(512, .*\), "
                                         rf"got {npc}$"):
        Q.per_token_cast(torch.randn(4, 512), "e4m3", npc)


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from([torch.float16, torch.int32, torch.float64, torch.int8]))
def test_wrong_dtype(dtype):
    x = torch.zeros(4, 128, dtype=dtype)
    with pytest.raises(TypeError, match="x"):
        Q.per_token_cast(x, "e4m3", 128)
    with pytest.raises(TypeError, match="x"):
        Q.per_block_cast(x, "e4m3", (128, 128))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 300))
def test_per_channel_shape_rules(rows, cols):
    x = torch.zeros(rows, cols)
    if rows % 128 == 0 and cols % 64 == 0:
        Q.per_channel_cast(x, "e4m3", 128)
    else:
        with pytest.raises(ValueError, match=rf"^x: expected a token count \(dim 0\) divisible by 128 .*, "
                                             rf"got shape \({rows}, {cols}\)$"):
            Q.per_channel_cast(x, "e4m3", 128)


def test_messages_name_argument_and_values():
    with pytest.raises(ValueError, match=r"^block_size: expected entries 32 or 128, got \(64, 128\)$"):
        Q.per_block_cast(torch.zeros(128, 128), "e4m3", (64, 128))
    with pytest.raises(ValueError, match="^use_packed_ue8m0: expected False unless use_tma_aligned_col_major_sf=True, "
                                         "got True with use_tma_aligned_col_major_sf=False$"):
        Q.per_token_cast(torch.zeros(4, 128), "e4m3", 128, use_packed_ue8m0=True)
    with pytest.raises(ValueError, match=r"^x_block_size: expected a \(rows, cols\) tuple when x is a \(data, sf\) pair, "
                                         r"got None$"):
        Q.per_token_cast(ref.cast(torch.zeros(4, 128), "e4m3", (1, 128)), "e4m3", 128)
    q, sf = ref.cast(torch.zeros(4, 128), "e4m3", (1, 128))
    with pytest.raises(ValueError, match=r"x\[1\]: expected shape \(4, 4\)"):
        Q.cast_back((q, sf), "fp32", (1, 32))
    with pytest.raises(ValueError, match="fmt"):
        Q.cast_back((q, sf), "fp16", (1, 128))
    with pytest.raises(ValueError, match="sf: expected shape"):
        Q.per_token_cast_with_precomputed_sf(torch.zeros(4, 128), "e4m3", 64, torch.ones(4, 1))
    with pytest.raises(ValueError, match=r"^pos_to_token_topk: expected entries in \[-1, 4\) .*, got values in \[0, 99\]$"):
        Q.swiglu_forward_and_per_token_cast(torch.zeros(4, 256, dtype=torch.bfloat16), "e4m3", 128,
                                            torch.tensor([0, 1, 2, 99], dtype=torch.int32), torch.ones(2, 2))


def test_failed_call_leaves_caller_tensors_untouched():
    counts = torch.zeros(3, dtype=torch.int64)
    x = torch.full((4, 256), 100.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError):
        Q.swiglu_forward_and_per_token_cast(x, "e4m3", 64, swiglu_clamp_value=1.0, clamped_count=counts)
    assert int(counts.abs().sum()) == 0


def test_lossless_scales_on_another_device():
    """The FP4 data and its scales must share a device (the host kernel reads both)."""
    q = torch.zeros(4, 64, dtype=torch.int8)
    # meta is the only other device here; it is refused as dataless or as another device, by name either way
    with pytest.raises((ValueError, TypeError), match=r"x\[1\]: expected (device cpu|a tensor with data)"):
        Q.per_block_cast_lossless((q, torch.ones(4, 4, device="meta")), "e4m3", (1, 32), (4, 128))


def test_e5m6_cast_back_refuses_a_hidden_size_off_8():
    """Width 18 (a multiple of 3, hidden 12): no E5M6 cast makes it (8 codes pack into 3 words); refused by name."""
    q = torch.zeros(4, 18, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"x\[0\].*multiple of 8.*width 18"):
        tile_kernels.quant.cast_back((q, torch.ones(4, 1)), "fp32", (1, 12), x_special_fmt="e5m6")
