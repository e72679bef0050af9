"""deep_ep's twin checks: its Ascend kernels as ``make ascend-check`` cases (``ascend_check.SourceCase``,
``cases()``, found through the package's ``deepjit.ascend_checks`` entry point): each runs one kernel's
entry point on CPU tensors (so on the twin) and compares it, bit for bit, with a plain-torch statement of
what it does (row scatters in list order, the reference FP8 cast of deep_ep/utils/math.py, the combine sum
in FP32 in list order, the Engram row gather with zero rows for out-of-range ids).

Each kernel runs at a test shape and at the DeepSeek-V3/V4 EP8 shapes of kernel_specs.py (hidden 7168,
top-8 of 256 experts over 8 ranks): 4096 tokens prefill and 128 decode per rank.
"""
from __future__ import annotations

import torch

RANKS, HIDDEN, TOPK, TOKENS, DECODE = 8, 7168, 8, 4096, 128
ENGRAM_ROWS, ENGRAM_PER_TOKEN = 4096, 2   # the all-gathered table's rows, entries fetched per token


def _same(name: str, got: torch.Tensor, want: torch.Tensor) -> list[str]:
    g, w = got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
    if got.shape == want.shape and got.dtype == want.dtype and torch.equal(g, w):
        return []
    return [f"{name}: differs bitwise from the reference ({got.dtype}{tuple(got.shape)} vs "
            f"{want.dtype}{tuple(want.shape)})"]


def _scatter_expected(src, pos, out, zero):
    want = out.clone()
    valid = pos >= 0
    rows = torch.arange(pos.shape[0]).unsqueeze(1).expand_as(pos)[valid]
    want[pos[valid].long()] = src[rows]  # distinct positions: the order does not matter
    for begin, count in zero.tolist():
        want[begin:begin + count] = 0
    return want


def _scatter(n, p, out_rows, h, dtype, zero_ranges):
    def run() -> list[str]:
        from .scatter import scatter_rows
        torch.manual_seed(0)
        src = torch.randn(n, h).to(dtype)
        out = torch.randn(out_rows, h).to(dtype)
        zero = (torch.tensor([[1, 3], [out_rows - 2, 2]], dtype=torch.int32) if zero_ranges
                else torch.zeros(0, 2, dtype=torch.int32))
        # positions avoid the zero ranges, as the dispatch's padding rows are never a received row's slot
        free = torch.ones(out_rows, dtype=torch.bool)
        for begin, count in zero.tolist():
            free[begin:begin + count] = False
        rows = free.nonzero().flatten()
        pos = rows[torch.randperm(rows.numel())[:n * p]].view(n, p).int()
        pos[0, -1] = -1
        want = _scatter_expected(src, pos, out, zero)
        scatter_rows(src, pos, out, zero if zero_ranges else None)
        return _same("out", out, want)
    return run


def _fp8_pack(t, p, h, round_scale):
    def run() -> list[str]:
        from ..utils.math import per_token_cast_to_fp8
        from .fp8_pack import pack_fp8
        torch.manual_seed(0)
        x = torch.randn(t, h).bfloat16()
        x[0] = 0  # the 1e-4 amax floor
        rows = t * p
        pos = torch.randperm(rows)[:t * p].view(t, p).int()
        out = torch.zeros(rows, h, dtype=torch.float8_e4m3fn)
        scales = torch.zeros(rows, h // 128)
        pack_fp8(x, pos, out, scales, round_scale)
        q, s = per_token_cast_to_fp8(x, use_ue8m0=round_scale)
        order = pos.view(-1).long()
        want_q, want_s = torch.empty_like(out), torch.empty_like(scales)
        want_q[order] = q.repeat_interleave(p, 0)
        want_s[order] = s.repeat_interleave(p, 0)
        return _same("out", out, want_q) + _same("scales", scales, want_s)
    return run


def _combine(t, p, num_rows, h, weighted, num_bias, from_first):
    def run() -> list[str]:
        from .reduce import combine_reduce
        torch.manual_seed(0)
        rows = torch.randn(num_rows, h).bfloat16()
        pos = torch.randint(0, num_rows, (t, p)).int()
        pos[0, 1:] = -1
        pos[1] = -1
        w = torch.rand(t, p) if weighted else None
        bias = tuple(torch.randn(t, h).bfloat16() for _ in range(num_bias))
        got = combine_reduce(rows, pos, w, bias, from_first)
        acc = torch.zeros(t, h) if bias == () else bias[0].float()
        if num_bias > 1:
            acc = acc + bias[1].float()
        started = torch.full((t, 1), not (from_first and num_bias == 0))
        for j in range(p):
            valid = (pos[:, j] >= 0).unsqueeze(1)
            term = rows[pos[:, j].clamp(min=0).long()].float()
            if weighted:
                term = w[:, j:j + 1] * term
            acc = torch.where(valid, torch.where(started, acc + term, term), acc)
            started = started | valid
        return _same("out", got, acc.bfloat16())
    return run


def _gather(table_rows, n, h):
    def run() -> list[str]:
        from .gather import gather_rows
        torch.manual_seed(0)
        table = torch.randn(table_rows, h).bfloat16()
        ids = torch.randint(-2, table_rows + 2, (n,), dtype=torch.int32)
        inside = (ids >= 0) & (ids < table_rows)
        want = torch.zeros(n, h, dtype=torch.bfloat16)
        want[inside] = table[ids[inside].long()]
        return _same("out", gather_rows(table, ids), want)
    return run


def cases() -> list:
    from deepjit.tilelang_route.ascend_check import SourceCase

    runs = [("ep_pack_bf16_9x3_h48", _scatter(9, 3, 32, 48, torch.bfloat16, False)),
            ("ep_unpack_fp8_zero_ranges_9x3_h128", _scatter(9, 3, 32, 128, torch.float8_e4m3fn, True)),
            ("ep_pack_fp8_6x2_h256", _fp8_pack(6, 2, 256, False)),
            ("ep_per_token_cast_fp8_ue8m0_6_h256", _fp8_pack(6, 1, 256, True)),
            ("ep_combine_reduce_bias2_5x3_h40", _combine(5, 3, 12, 40, False, 2, False)),
            ("ep_combine_partial_5x3_h40", _combine(5, 3, 12, 40, False, 0, True)),
            ("ep_ll_combine_weighted_5x3_h40", _combine(5, 3, 12, 40, True, 0, False)),
            ("ep_engram_gather_70_of_30_h48", _gather(30, 70, 48))]
    for phase, t in (("prefill", TOKENS), ("decode", DECODE)):
        rows = t * TOPK
        runs += [(f"ep_pack_bf16_r{RANKS}_{phase}_{t}t_h{HIDDEN}", _scatter(t, RANKS, rows, HIDDEN, torch.bfloat16, False)),
                 (f"ep_unpack_expanded_fp8_k{TOPK}_{phase}_{t}t_h{HIDDEN}",   # 5 padding rows zeroed
                  _scatter(t, TOPK, rows + 5, HIDDEN, torch.float8_e4m3fn, True)),
                 (f"ep_pack_fp8_r{RANKS}_{phase}_{t}t_h{HIDDEN}", _fp8_pack(t, RANKS, HIDDEN, False)),
                 (f"ep_per_token_cast_fp8_ue8m0_{phase}_{t}t_h{HIDDEN}", _fp8_pack(t, 1, HIDDEN, True)),
                 (f"ep_combine_reduce_k{TOPK}_bias_{phase}_{t}t_h{HIDDEN}",
                  _combine(t, TOPK, rows, HIDDEN, False, 1, False)),
                 (f"ep_combine_partial_k{TOPK}_{phase}_{t}t_h{HIDDEN}", _combine(t, TOPK, rows, HIDDEN, False, 0, True)),
                 (f"ep_ll_combine_weighted_k{TOPK}_{phase}_{t}t_h{HIDDEN}",
                  _combine(t, TOPK, rows, HIDDEN, True, 0, False)),
                 (f"ep_engram_gather_{phase}_{t}t_x{ENGRAM_PER_TOKEN}_of_{ENGRAM_ROWS}_h{HIDDEN}",
                  _gather(ENGRAM_ROWS, t * ENGRAM_PER_TOKEN, HIDDEN))]
    return [SourceCase(name, "vector", fn) for name, fn in runs]


# The EP8 window dispatch/combine estimates (ep_estimates.py), each rank a process. 8 processes at 4096
# tokens x 7168 need more memory than a 24 GiB, 2-core host has (and ~10 min): the normal shapes run at
# EP_ESTIMATE_TOKENS tokens per rank (default 512, every other dimension DeepSeek's); set it to 4096 on a
# larger host. Low latency runs at its full 128 tokens but, by default, over 64 experts (8 a rank: its
# [experts/rank, ranks x 128, 7168] outputs at 32 experts a rank took ~4.8 GB a process, 8 of them more
# than the host has; EP_ESTIMATE_LL_EXPERTS=256 on a larger host). Top-8 either way.
def published_shapes() -> list:
    import functools
    import os

    from deepjit.tilelang_route.ascend_check import PublishedShape

    from .ep_estimates import LL_TOKENS, published_shape_outcome

    tokens = int(os.environ.get("EP_ESTIMATE_TOKENS", "512"))
    ll_experts = int(os.environ.get("EP_ESTIMATE_LL_EXPERTS", "64"))
    runs = [("normal", tokens, False, 256), ("normal", tokens, True, 256), ("low_latency", LL_TOKENS, True, ll_experts)]
    return [PublishedShape(f"ep_window_{mode}_{phase}_ep{RANKS}_{t}t_h{HIDDEN}_top{TOPK}of{e}_{'fp8' if fp8 else 'bf16'}",
                           "vector", functools.partial(published_shape_outcome, mode, phase, RANKS, t, fp8, e),
                           multi_rank=True)
            for mode, t, fp8, e in runs for phase in ("dispatch", "combine")]
