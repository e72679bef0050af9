"""Host kernels whose outputs come from the shared output pool must write every element: a second
call gets the first call's released buffer back, here filled with poison (0xFF bytes: NaN for the
float formats), and must return exactly what the first call returned."""
import pytest
import torch

import tile_kernels
from deepjit.host_memory import MIN_POOLED_BYTES
from tile_kernels._lib import OUTPUTS
from tile_kernels.testing.generator import generate_topk_idx
from tile_kernels.testing.numeric import assert_equal

pytestmark = pytest.mark.usefixtures("host")


def _pooled(outputs):
    outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.numel() * o.element_size() >= MIN_POOLED_BYTES]


def _check_rewrites_poisoned_buffers(fn):
    OUTPUTS.clear()
    first = fn()
    big = _pooled(first)
    assert big, "the case must produce at least one pooled (>= 1 MiB) output"
    expected = [o.clone() for o in big]
    ptrs = sorted(o.data_ptr() for o in big)
    for o in big:
        o.view(torch.uint8).fill_(0xFF)
    del first, big, o
    second = _pooled(fn())
    assert sorted(o.data_ptr() for o in second) == ptrs, "the released buffers were not handed out again"
    for got, want in zip(second, expected, strict=True):
        assert_equal(got, want)


Q = tile_kernels.quant
ROWS, HIDDEN = 512, 1024 + 64  # 1 MiB+ of BF16 input, ragged column blocks for npc 128


@pytest.mark.parametrize("fmt,npc", [("e4m3", 128), ("e4m3", 32), ("e2m1", 32), ("e2m1", 16)])
def test_per_token_cast(fmt, npc):
    x = torch.randn(4 * ROWS, HIDDEN, dtype=torch.bfloat16)
    _check_rewrites_poisoned_buffers(lambda: Q.per_token_cast(x, fmt, npc)[0])


def test_per_block_and_per_channel_cast():
    x = torch.randn(8 * 128 + 100, HIDDEN, dtype=torch.bfloat16)
    _check_rewrites_poisoned_buffers(lambda: Q.per_block_cast(x, "e4m3", (128, 128))[0])
    x = torch.randn(8 * 128, HIDDEN, dtype=torch.bfloat16)
    _check_rewrites_poisoned_buffers(lambda: Q.per_channel_cast(x, "e4m3", 128)[0])


@pytest.mark.parametrize("fmt,npc", [("e4m3", 128), ("e2m1", 32)])
def test_cast_back(fmt, npc):
    q = Q.per_token_cast(torch.randn(2 * ROWS, HIDDEN, dtype=torch.bfloat16), fmt, npc)
    _check_rewrites_poisoned_buffers(lambda: Q.per_token_cast_back(q, "bf16", npc))
    _check_rewrites_poisoned_buffers(lambda: Q.per_token_cast_back(q, "fp32", npc))


def test_e5m6_round_trip():
    x = torch.randn(2 * ROWS, HIDDEN, dtype=torch.bfloat16)
    _check_rewrites_poisoned_buffers(lambda: Q.per_token_cast(x, "e5m6", HIDDEN)[0])
    q = Q.per_token_cast(x, "e5m6", HIDDEN)
    _check_rewrites_poisoned_buffers(lambda: Q.cast_back(q, "bf16", (1, HIDDEN), "e5m6"))


def test_swiglu_forward_cast():
    x = torch.randn(2 * ROWS, 2 * 1024, dtype=torch.bfloat16)
    _check_rewrites_poisoned_buffers(lambda: Q.swiglu_forward_and_per_token_cast(x, "e4m3", 128)[0])


def test_transpose():
    x = torch.randn(1000, 1100).to(torch.float8_e4m3fn)
    _check_rewrites_poisoned_buffers(lambda: tile_kernels.transpose.transpose(x))


def test_expand_and_reduce_fused():
    """expand zeroes the rows no slot maps to itself (padding rows of each expert)."""
    idx = generate_topk_idx({"num_send_tokens": 96, "num_topk": 4, "num_experts": 16, "num_ep_ranks": 1})
    p2e, _, _, t2p, *_ = tile_kernels.moe.get_fused_mapping(idx, 16, 0, 64)
    x = torch.randn(96, 2048, dtype=torch.bfloat16)
    assert (p2e < 0).any(), "the mapping must have padding rows"
    _check_rewrites_poisoned_buffers(lambda: tile_kernels.moe.expand_to_fused(x, t2p, p2e))
    y = torch.randn(p2e.shape[0], 8192, dtype=torch.bfloat16)
    w = torch.rand(t2p.shape)
    _check_rewrites_poisoned_buffers(lambda: tile_kernels.moe.reduce_fused(y, w, t2p))


def test_engram_gate():
    h, k = torch.randn(64, 4, 2048).bfloat16(), torch.randn(64, 4, 2048).bfloat16()
    v, wf = torch.randn(64, 2048).bfloat16(), torch.rand(4, 2048)
    E = tile_kernels.engram
    _check_rewrites_poisoned_buffers(lambda: E.engram_gate_fwd(h, k, v, wf, 1e-20, 1e-6)[0])
    _, dot, gate, rx, rk = E.engram_gate_fwd(h, k, v, wf, 1e-20, 1e-6)
    g = torch.randn(64, 4, 2048).bfloat16()
    _check_rewrites_poisoned_buffers(lambda: E.engram_gate_bwd(g, h, k, v, wf, dot, gate, rx, rk, 1e-6)[:2])
