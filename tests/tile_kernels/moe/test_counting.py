"""group_count, aux_fi, normalize_weight, mask_indices_by_tp, inplace_unique_group_indices against
loop-by-loop oracles written here, on every backend (the Ascend kernels on the twin included)."""
import pytest
import torch

import tile_kernels
from tile_kernels.testing.generator import generate_topk_idx
from tile_kernels.testing.numeric import assert_equal, calc_diff

M = tile_kernels.moe
# Token counts that only re-check, at scale, the kernel a smaller case runs on the Ascend twin.
LARGE = pytest.mark.backends("host", "reference", why="a large token count: the smaller cases cover the Ascend kernel")
PARAMS = [{"num_send_tokens": 300, "num_topk": k, "num_experts": e, "num_ep_ranks": ep}
          for k, e, ep in ((2, 9, 8), (6, 4, 64), (8, 32, 8), (9, 9, 8))]


def _counts(idx, n):
    c = [0] * n
    for v in idx.flatten().tolist():
        if v >= 0:
            c[v] += 1
    return c


@pytest.mark.parametrize("params", PARAMS)
def test_group_count(backend, params):
    idx = generate_topk_idx(params)
    out = M.group_count(idx, params["num_experts"])
    assert out.dtype == torch.int32 and out.tolist() == _counts(idx, params["num_experts"])
    assert backend != "ascend" or backend.served == ["group_count"]


@pytest.mark.parametrize("params", PARAMS)
def test_aux_fi(backend, params):
    idx = generate_topk_idx(params)
    e = params["num_experts"]
    for aux_k in (1, params["num_topk"]):
        expect = torch.tensor([c * e / (idx.shape[0] * aux_k) for c in _counts(idx, e)], dtype=torch.float32)
        assert calc_diff(M.aux_fi(idx, e, aux_k), expect) < 2e-7
    assert backend != "ascend" or backend.served == ["aux_fi"] * 2


@pytest.mark.parametrize("shape", [(100, 6), (601, 9), (3, 1), pytest.param((4096, 8), marks=LARGE),
                                   pytest.param((15000, 9), marks=LARGE)])
def test_normalize_weight(backend, shape):
    w = torch.rand(shape) * torch.logspace(-20, 4, shape[1])  # columns over 24 decades: the order of the sum shows
    w[1] = 0.0  # the 1e-20 start keeps the division finite
    den, norm = M.normalize_weight(w)
    expect = torch.full((shape[0],), 1e-20)
    for k in range(shape[1]):
        expect = expect + w[:, k]
    assert_equal(den, expect)
    assert_equal(norm, w / expect.unsqueeze(1))


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_mask_indices_by_tp(backend, tp):
    experts, ep = 8, 16
    n = experts * ep
    idx = generate_topk_idx({"num_send_tokens": 200, "num_topk": 6, "num_experts": n, "num_ep_ranks": 1})
    idx[:5] += 3 * n  # ids beyond n follow the same formula (the kernel's table covers [0, n) only)
    for tp_rank in range(tp):
        out = M.mask_indices_by_tp(idx, n, ep, tp_rank, tp)
        per_gpu, per_dp = n // ep, tp * n // ep
        expect = []
        for v in idx.flatten().tolist():
            if v < 0 or (v // per_gpu) % tp != tp_rank:
                expect.append(-1)
                continue
            v -= tp_rank * per_gpu
            v -= (v // per_dp) * (per_dp - per_gpu)
            expect.append(v if v >= 0 else -1)
        assert out.flatten().tolist() == expect
    assert backend != "ascend" or backend.served == ["mask_indices_by_tp"] * tp


@pytest.mark.parametrize("num_groups", [8, 16, 72])
@pytest.mark.parametrize("num_topk", [3, 8, 9])
def test_inplace_unique_group_indices(backend, num_groups, num_topk):
    idx = generate_topk_idx({"num_send_tokens": 200, "num_topk": num_topk, "num_experts": 144, "num_ep_ranks": 1})
    groups = torch.where(idx >= 0, idx // (144 // num_groups), idx)
    expect = []
    for row in groups.tolist():
        seen = set()
        out = []
        for v in row:
            out.append(-1 if v in seen else v)
            if v >= 0:
                seen.add(v)
        expect.append(out)
    M.inplace_unique_group_indices(groups, num_groups)
    assert groups.tolist() == expect
    assert backend != "ascend" or backend.served == ["inplace_unique_group_indices"]
