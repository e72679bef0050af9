"""tile_kernels.ascend.routing_helpers' kernel entry points on the Ascend twin, bit-exact against the
reference, at the kernels' tile boundaries: group_count, aux_fi, mask_indices_by_tp,
inplace_unique_group_indices and topk_sum_and_topk_group_idx with token rows past a core's tile, more
indices than a UB chunk, bins past a counting window, more values than one core's 2048 (with the empty and
NaN/Inf inputs inside those tiles); out-of-range ids the public ops refuse, which the kernel still never
counts past its histogram; and the forms the table leaves to the reference. The public ops' contract runs
on every backend, the Ascend kernels asserted to serve it, in tests/tile_kernels/moe/test_counting.py and
test_topk.py."""
import pytest
import torch

from tile_kernels import _dispatch
from tile_kernels.ascend import routing_helpers as rh
from tile_kernels.reference import moe as ref
from tile_kernels.reference import topk as ref_topk


def _ids(shape, bins, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-1, bins, shape, generator=g)


@pytest.mark.parametrize("tokens,k,bins", [(41, 6, 37), (300, 8, 256), (5, 3, 2100)])
def test_group_count_and_aux_fi(tokens, k, bins):
    # 300 x 8 indices span two UB chunks; 2100 bins two counting windows
    idx = _ids((tokens, k), bins, tokens)
    idx[0, :] = bins - 1  # the last bin, repeatedly
    assert torch.equal(rh.group_count(idx, bins), ref.group_count(idx, bins))
    got, want = rh.aux_fi(idx, bins, k), ref.aux_fi(idx, bins, k)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_counts_of_no_tokens():
    idx = torch.empty(0, 8, dtype=torch.int64)
    assert torch.equal(rh.group_count(idx, 37), torch.zeros(37, dtype=torch.int32))
    assert torch.equal(rh.aux_fi(idx, 37, 8), ref.aux_fi(idx, 37, 8))


def test_out_of_range_ids_are_not_counted():
    """The public ops refuse them; the kernel still never counts (or writes) past its histogram."""
    idx = _ids((20, 4), 16, 3)
    idx[0, 0], idx[1, 1], idx[2, 2] = 16, -7, 1 << 40
    valid = idx.clone()
    valid[(valid < -1) | (valid >= 16)] = -1
    assert torch.equal(rh.group_count(idx, 16), ref.group_count(valid, 16))


MASK_CASES = [  # n, num_ep_ranks, tp_rank, num_tp_ranks
    (64, 4, 1, 2), (256, 8, 0, 1), (72, 2, 3, 4), (256, 1, 1, 4),
]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("n,ep,tp_rank,tp", MASK_CASES)
def test_mask_indices_by_tp(dtype, n, ep, tp_rank, tp):
    g = torch.Generator().manual_seed(n + tp)
    x = torch.randint(-3, n + 9, (3000,), generator=g).to(dtype)  # past one core's 2048; below -1 and past n
    got = rh.mask_indices_by_tp(x, n, ep, tp_rank, tp)
    assert got.dtype == dtype and torch.equal(got, ref.mask_indices_by_tp(x, n, ep, tp_rank, tp))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_mask_indices_by_tp_shapes(dtype):
    x = torch.randint(-1, 64, (5, 7, 6)).to(dtype)[:, ::2, 1:]  # strided 3-D
    assert torch.equal(rh.mask_indices_by_tp(x, 64, 4, 1, 2), ref.mask_indices_by_tp(x, 64, 4, 1, 2))
    scalar = torch.tensor(37, dtype=dtype)
    assert torch.equal(rh.mask_indices_by_tp(scalar, 64, 4, 1, 2), ref.mask_indices_by_tp(scalar, 64, 4, 1, 2))
    assert rh.mask_indices_by_tp(torch.empty(0, 8, dtype=dtype), 64, 4, 1, 2).shape == (0, 8)


@pytest.mark.parametrize("tokens,k,groups", [(41, 6, 8), (130, 6, 4)])  # one lowering: k is static
def test_inplace_unique_group_indices(tokens, k, groups):
    gi = _ids((tokens, k), groups, k)
    gi[0] = 2                      # all one group
    gi[1] = -1                     # nothing routed
    gi[2, :4] = torch.tensor([3, -1, 3, -1])
    want = gi.clone()
    ref.inplace_unique_group_indices(want, groups)
    same = gi
    assert rh.inplace_unique_group_indices(gi, groups) is None
    assert gi is same and torch.equal(gi, want)


def test_inplace_unique_group_indices_empty():
    gi = torch.empty(0, 8, dtype=torch.int64)
    rh.inplace_unique_group_indices(gi, 8)
    assert gi.shape == (0, 8)


def _group_scores(tokens, groups, per_group, seed):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(tokens, groups, per_group, generator=g)
    s[0] = 1.0                                         # every group tied: the smaller group first
    s[1, 1, 0] = float("nan")                          # a NaN ranks first (torch's topk and sort)
    s[2, :, 0] = float("inf")
    s[2, 0, 1] = -float("inf")                          # inf + -inf: NaN
    s[3] = -float("inf")
    s[4, 2] = float("nan")
    return s


@pytest.mark.parametrize("tokens,groups,per_group,num_sum,num_groups", [(41, 8, 5, 2, 3), (70, 4, 3, 1, 2)])
def test_topk_sum_and_topk_group_idx(tokens, groups, per_group, num_sum, num_groups):
    s = _group_scores(tokens, groups, per_group, tokens)
    got = rh.topk_sum_and_topk_group_idx(s, num_sum, num_groups)
    assert torch.equal(got, ref_topk.topk_sum_and_topk_group_idx(s, num_sum, num_groups))
    assert rh.topk_sum_and_topk_group_idx(s[:0], num_sum, num_groups).shape == (0, num_groups)


def test_forms_the_kernels_leave_to_the_reference(monkeypatch):
    """A token's scores past one core's UB tile, and TP settings past int32: the reference serves them."""
    monkeypatch.setenv("TK_BACKEND", "ascend")
    wide = torch.empty(1, 2, 8200)
    assert _dispatch.TABLE.serves("topk_sum_and_topk_group_idx", wide.device, wide, 2, 1) == "reference"
    assert _dispatch.TABLE.serves("topk_sum_and_topk_group_idx", wide.device, wide[:, :, :8192], 2, 1) == "ascend"
    idx = torch.zeros(4, dtype=torch.int64)
    assert _dispatch.TABLE.serves("mask_indices_by_tp", idx.device, idx, 1 << 31, 1, 0, 1) == "reference"
    assert _dispatch.TABLE.serves("mask_indices_by_tp", idx.device, idx, (1 << 31) - 1, 1, 0, 1) == "ascend"
