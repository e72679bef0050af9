"""mHC ops reject mismatched shapes and dtypes before any work."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tile_kernels.modeling.mhc.ops import (
    expand_to_mhc,
    mhc_head_compute_mix,
    mhc_post,
    mhc_pre_apply_mix,
    mhc_pre_big_fuse,
    mhc_pre_norm_fn,
    mhc_pre_split_mixes,
    sinkhorn_normalize,
)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 6), h=st.sampled_from([16, 64]), extra=st.integers(1, 8))
def test_norm_fn_width_must_match(m, h, extra):
    r = torch.zeros(1, 3, m, h, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=rf"^mhc_fn: expected {m * h} columns .*, got shape \({m * (m + 2)}, {m * h + extra}\)$"):
        mhc_pre_norm_fn(r, torch.zeros(m * (m + 2), m * h + extra), None, 1e-6)


@settings(max_examples=30, deadline=None)
@given(width=st.integers(1, 40).filter(lambda w: w != 24))
def test_split_mixes_width(width):
    with pytest.raises(ValueError, match=rf"^input_mixes: expected .* = 24, got shape \(1, 2, {width}\)$"):
        mhc_pre_split_mixes(torch.zeros(1, 2, width), torch.ones(3), torch.zeros(24), 4, 1.0, 1e-6)


def test_dtype_and_shape_errors():
    with pytest.raises(TypeError, match="residual"):
        mhc_pre_norm_fn(torch.zeros(1, 2, 4, 8), torch.zeros(24, 32), None, 1e-6)
    with pytest.raises(ValueError, match="mix: expected shape"):
        mhc_pre_apply_mix(torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16), torch.zeros(1, 2, 3, 1))
    with pytest.raises(ValueError, match=r"^x: expected a square \(m, m\) matrix .*, got shape \(2, 4, 3\)$"):
        sinkhorn_normalize(torch.zeros(2, 4, 3))
    with pytest.raises(ValueError, match="comb_res_mix"):
        mhc_post(torch.zeros(1, 2, 8, dtype=torch.bfloat16), torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16),
                 torch.zeros(1, 2, 4, 1), torch.zeros(1, 2, 4, 3))
    with pytest.raises(ValueError, match="fn: expected shape"):
        mhc_pre_big_fuse(torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16), torch.zeros(24, 31), torch.ones(3),
                         torch.zeros(24), 1e-6, 1e-6, 1e-6, 1.0, 3)


def test_tensors_on_another_device_are_refused():
    """Caught before a host kernel would take another device's pointer."""
    x, r = torch.zeros(1, 2, 8, dtype=torch.bfloat16), torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="out: expected device cpu"):
        mhc_post(x, r, torch.zeros(1, 2, 4, 1), torch.zeros(1, 2, 4, 4), out=torch.empty_like(r, device="meta"))
    with pytest.raises(ValueError, match="out: expected device cpu"):
        expand_to_mhc(x, 4, out=torch.empty_like(r, device="meta"))
    with pytest.raises((ValueError, TypeError), match="mhc_base: expected (device cpu|a tensor with data)"):
        mhc_head_compute_mix(torch.zeros(1, 2, 4), torch.ones(1), torch.zeros(4, device="meta"), 1e-6)
