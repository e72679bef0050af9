"""Inputs of the Ascend kernel tests, shared by the twin tests and the NPU tests (test_npu.py): each
builder returns CPU tensors holding the edge cases its kernel must get right."""
import torch

from tile_kernels.reference import cast as ref_cast

PER_TOKEN_CASES = [  # dtype, fmt, num_per_channels, col, round_sf, packed
    (torch.float32, "e4m3", 128, False, False, False),
    (torch.float32, "e4m3", 128, True, False, False),
    (torch.float32, "e4m3", 32, True, True, True),
    (torch.float32, "e2m1", 32, False, True, False),
    (torch.float32, "e4m3", 576, False, False, False),
    (torch.bfloat16, "e4m3", 32, True, True, True),
    (torch.bfloat16, "e2m1", 16, False, False, False),
]


def cast_input(dtype=torch.float32, rows=37, hidden=576) -> torch.Tensor:
    x = torch.randn(rows, hidden) * 3
    x[0, :6] = torch.tensor([-0.0, 0.0, 1e-30, -7.0, 0.25, 2.5])  # signed zero, tiny, E2M1 ties
    x[1] = 0.0  # an all-zero row: amax clamps to the format's minimum
    return x.to(dtype)


def tied_scores(tokens: int, experts: int) -> torch.Tensor:
    """Gate scores with ties (the smaller index first), a row of zeros, -inf and -0.0 == 0.0."""
    s = torch.randn(tokens, experts)
    s[0, :10] = 1.0
    s[1] = 0.0
    s[2, ::2] = -float("inf")
    s[3, 5] = -0.0
    s[3, 7] = 0.0
    return s


def router_options(use_mask: bool, use_fix: bool, use_unmapped: bool, map_cols: int, tokens=37, experts=32, k=4,
                   shared=1):
    """``(logits, bias, mask, fix_routing_mask, to_physical_map, logical_count, unmapped_topk_idx)`` for
    top2_sum_gate; expert e's ``map_cols`` replicas are e itself and ids past the logical ones."""
    g = torch.Generator().manual_seed(map_cols * 8 + use_mask * 4 + use_fix * 2 + use_unmapped)
    logits, bias = torch.randn(tokens, experts, generator=g), torch.randn(experts, generator=g) * 0.1
    mask = torch.rand(tokens, generator=g) > 0.3 if use_mask else None
    fix = torch.rand(tokens, generator=g) > 0.5 if use_fix else None
    unmapped = torch.randint(0, experts, (tokens, k), generator=g) if use_unmapped else None
    phys = count = None
    if map_cols:
        rows = experts + shared
        phys = torch.stack([torch.arange(rows)] + [experts + shared + (torch.arange(rows) + c) % (map_cols - 1)
                                                   for c in range(map_cols - 1)], 1).int()
        count = torch.randint(1, map_cols + 1, (rows,), generator=g).int()
    return logits, bias, mask, fix, phys, count, unmapped


def gate_weights(tokens=601, k=9) -> torch.Tensor:
    """Top-k weights over 24 decades, a zero row first (normalize_weight's 1e-20 start)."""
    w = torch.rand(tokens, k) * torch.logspace(-20, 4, k)
    w[0] = 0.0
    return w


def routed_idx(tokens: int, k: int, experts: int) -> torch.Tensor:
    """topk_idx with -1 slots, expert 3 idle and token 0 routed nowhere."""
    idx = torch.randint(-1, experts, (tokens, k), generator=torch.Generator().manual_seed(tokens))
    idx[idx == 3] = 4
    idx[0] = -1
    return idx


def fused_positions(tokens: int, k: int, num_rows: int, generator=None) -> torch.Tensor:
    """token_topk_to_pos: distinct rows, one -1 slot and token 5 with no slot at all."""
    pos = torch.randperm(num_rows, generator=generator)[:tokens * k].view(tokens, k).int()
    pos[0, 1] = -1
    pos[5] = -1
    return pos


def swiglu_forward_inputs(dtype, h: int, weighted: bool, seed: int, rows=37, tokens=13, k=4):
    """``(x, pos_to_token_topk, topk_weights)``: x = [a | b] with a saturating row, padding rows -1."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, 2 * h, generator=g) * 4).to(dtype)
    x[2, :h] = -100.0  # exp_f32 saturates: silu -> -0
    if not weighted:
        return x, None, None
    p2tt = torch.randperm(tokens * k, generator=g)[:rows].int()
    p2tt[[0, 5]] = -1  # padding rows: weight 0
    return x, p2tt, torch.rand(tokens, k, generator=g)


def swiglu_backward_inputs(g_dtype, h: int, npc: int, seed: int, rows=21, tokens=9, k=3):
    """``((q, sf), grad_out, weight, pos_to_token_topk, token_topk_to_pos)``, two rows -1; the maps agree."""
    g = torch.Generator().manual_seed(seed)
    q, sf = ref_cast.cast(torch.randn(rows, 2 * h, generator=g) * 2, "e4m3", (1, npc))
    grad = torch.randn(rows, h, generator=g).to(g_dtype)
    w = torch.rand(tokens, k, generator=g)
    p2tt = torch.randperm(tokens * k, generator=g)[:rows].int()
    p2tt[[3, 4]] = -1
    t2p = torch.full((tokens, k), -1, dtype=torch.int32)
    t2p.view(-1)[p2tt[p2tt >= 0].long()] = (p2tt >= 0).nonzero().flatten().int()
    return (q, sf), grad, w, p2tt, t2p


def scaled_reduce_inputs(dtype, weighted: bool, x_scaled: bool, out_scaled: bool, fmt: str):
    """``(x, x_sf, topk_weights, token_topk_to_pos, sf)`` for reduce_fused's scaled forms; with an E4M3
    output a NaN row (token 1 stays NaN) and values that saturate at +-448 (token 2)."""
    g = torch.Generator().manual_seed(7)
    tokens, k, hidden, num_rows = 21, 4, 256, 96
    pos = torch.randperm(num_rows, generator=g)[:tokens * k].view(tokens, k).int()
    pos[3, 0] = -1
    x = (torch.randn(num_rows, hidden, generator=g) * 40).to(dtype)
    w = torch.rand(tokens, k, generator=g) if weighted else None
    x_sf = torch.rand(num_rows, generator=g) * 4 if x_scaled else None
    sf = torch.tensor([0.37]) if out_scaled else None
    if fmt:
        x[pos[1, 1]] = float("nan")
        x[pos[2, 0], :8] = 1e4 if dtype != torch.float8_e4m3fn else 448.0
    return x, x_sf, w, pos, sf
