"""Dispatch/combine checks run inside spawned ranks, shared by the transport tests: every case is
compared bit for bit with the oracle in ``refs.py``."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import refs


@dataclass(frozen=True)
class Case:
    fp8: str | None          # None (BF16), "float" (FP32 scales) or "ue8m0" (int32-packed)
    weights: bool
    expand: bool
    alignment: int = 1
    zero_padding: bool = False
    cpu_sync: bool = True
    num_bias: int = 0
    cached: bool = False


CASES = (
    Case(None, True, False, num_bias=1),
    Case("float", True, True, 128, zero_padding=True, num_bias=2, cached=True),
    Case("ue8m0", False, True, 1, cpu_sync=False),
    Case(None, False, False, cpu_sync=False, cached=True),
    Case(None, True, True, 128, zero_padding=True, cpu_sync=False, num_bias=1),
)


def _align(x, a):
    return (x + a - 1) // a * a


def _bytes(t):
    t = t.contiguous()
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def on(device, t):
    """``t`` with its tensors (also inside tuples and lists) on ``device``; anything else as is."""
    if isinstance(t, (tuple, list)):
        return tuple(on(device, u) for u in t)
    return t.to(device) if isinstance(t, torch.Tensor) else t


def check_case(buf, case: Case, rank: int, R: int, hidden: int, num_experts: int, M: int, topk: int, seed: int,
               multiple_reduction: bool = True, device: str = "cpu", num_tokens: int | None = None):
    """The buffer's tensors on ``device`` (its group's device); the oracle on CPU copies. ``num_tokens``: this
    rank's token count (default ragged on purpose, at least one)."""
    T = max(1, M - 3 * rank) if num_tokens is None else num_tokens
    e_local = num_experts // R
    topk_idx, topk_weights = refs.make_routing(T, topk, num_experts, seed * 100 + rank)
    x = refs.make_x(T, hidden, seed * 100 + rank, case.fp8)
    x_data, sf = x if isinstance(x, tuple) else (x, None)
    w = topk_weights if case.weights else None
    stats = torch.zeros(e_local, dtype=torch.int32, device=device)
    kwargs = dict(num_experts=num_experts, expert_alignment=case.alignment, do_expand=case.expand,
                  do_zero_padding=case.zero_padding, do_cpu_sync=case.cpu_sync)
    recv_x, recv_idx, recv_w, handle, _ = buf.dispatch(*on(device, (x, topk_idx, w)), stats, **kwargs)
    recv_x, recv_idx, recv_w = on("cpu", (recv_x, recv_idx, recv_w))
    ref = refs.dispatch(x_data, sf, topk_idx, w, num_experts, M)
    n = sum(ref["counts"])
    rx, rsf = recv_x if isinstance(recv_x, tuple) else (recv_x, None)
    assert handle.psum_num_recv_tokens_per_scaleup_rank.tolist() == torch.cumsum(torch.tensor(ref["counts"]), 0).tolist()
    true = torch.stack([(ref["topk_idx"] == e).sum() for e in range(e_local)])
    assert stats.tolist() == true.tolist()
    aligned = [_align(int(c), case.alignment) for c in true]
    if case.cpu_sync:
        assert handle.num_recv_tokens_per_expert_list == aligned
        assert handle.num_recv_tokens == n
    meta = handle.recv_src_metadata[:n].cpu()
    assert torch.equal(meta[:, 0].long(), ref["src"]), "rows must arrive sorted by src_token_global_idx"
    if not case.expand:
        assert torch.equal(handle.psum_num_recv_tokens_per_expert.cpu(), torch.cumsum(torch.tensor(aligned), 0).int())
        assert torch.equal(_bytes(rx[:n]), _bytes(ref["x"]))
        assert torch.equal(recv_idx[:n], ref["topk_idx"])
        if sf is not None:
            assert torch.equal(rsf[:n], ref["sf"])
        if w is not None:
            assert torch.equal(recv_w[:n], ref["weights"])
        else:
            assert recv_w is None
        if not case.cpu_sync:
            assert rx.shape[0] == R * M and bool((recv_idx[n:] == -1).all())
    else:
        assert recv_idx is None
        psum = handle.psum_num_recv_tokens_per_expert.cpu().long()
        starts = [0] + [_align(int(p), case.alignment) for p in psum[:-1]]
        assert [int(psum[e]) - starts[e] for e in range(e_local)] == true.tolist()
        assert handle.num_unaligned_recv_tokens_per_expert.tolist() == true.tolist()
        rows = meta[:, 2:].long()
        for e in range(e_local):
            sel = ref["topk_idx"] == e                       # [n, K]: (received token, slot) pairs of expert e
            token, slot = sel.nonzero(as_tuple=True)
            got = rows[token, slot]
            assert torch.equal(got, starts[e] + torch.arange(len(token))), f"expert {e}: rows not in src order"
            assert torch.equal(_bytes(rx[got]), _bytes(ref["x"][token]))
            if sf is not None:
                assert torch.equal(rsf[got], ref["sf"][token])
            if w is not None:
                assert torch.equal(recv_w[got], ref["weights"][token, slot])
            if case.zero_padding:
                gap = slice(starts[e] + len(token), _align(starts[e] + len(token), case.alignment))
                assert bool((_bytes(rx[gap]) == 0).all())
        assert bool((rows[ref["topk_idx"] < 0] == -1).all())

    if case.cached:
        again = buf.dispatch(on(device, x), handle=handle, topk_weights=on(device, w), do_expand=case.expand)
        ax = (again[0][0] if isinstance(again[0], tuple) else again[0]).cpu()
        valid = n if not case.expand else handle.num_expanded_tokens
        assert again[3] is handle
        if case.expand:
            used = rows[rows >= 0]
            assert torch.equal(_bytes(ax[used]), _bytes(rx[used]))
        else:
            assert torch.equal(_bytes(ax[:valid]), _bytes(rx[:valid]))

    # Combine: expert outputs that depend only on (src_token_global_idx, slot).
    g = meta[:, 0].long()
    if case.expand:
        y = torch.zeros(rx.shape[0], hidden, dtype=torch.bfloat16)
        for k in range(topk):
            has = rows[:, k] >= 0
            y[rows[has, k]] = refs.expert_output(g[has], torch.full((int(has.sum()),), k), hidden)
    else:
        y = torch.zeros(rx.shape[0], hidden, dtype=torch.bfloat16)
        for i in range(n):
            slots = (recv_idx[i] >= 0).nonzero().squeeze(1)
            outs = refs.expert_output(g[i].repeat(len(slots)), slots, hidden)
            y[i] = refs.ordered_sum(list(outs))
    gen = torch.Generator().manual_seed(seed * 7 + rank)
    bias = tuple(torch.randn(T, hidden, generator=gen, dtype=torch.float32).bfloat16() for _ in range(case.num_bias))
    cw = recv_w if (w is not None and (not case.expand or multiple_reduction)) else None
    combined, combined_w, _ = on("cpu", buf.combine(on(device, y), handle, on(device, cw),
                                                     on(device, bias if len(bias) != 1 else bias[0])))
    expected = refs.combine(topk_idx, num_experts, R, rank, M, hidden, bias, multiple_reduction or not case.expand)
    assert torch.equal(combined.view(torch.int16), expected.view(torch.int16)), \
        f"combine differs in {(combined != expected).sum()} elements"
    if cw is not None:
        assert torch.equal(combined_w, topk_weights), "topk_weights must survive the round trip exactly"
    return True


def check_by_hand(rank, group=None):
    """2 ranks (``group``, WORLD by default), 4 experts (2 per rank), top-2, hidden 16; token t of rank r is
    the constant 10r + t + 1. Expected values worked out by hand from the routing below."""
    import deep_ep
    routing = {0: [[0, 3], [2, -1]], 1: [[1, 2], [3, 0]]}
    buf = deep_ep.EPBuffer(group or dist.group.WORLD, num_max_tokens_per_rank=2, hidden=16, num_topk=2, explicitly_destroy=True)
    idx = torch.tensor(routing[rank], dtype=torch.int64)
    x = torch.tensor([[10.0 * rank + 1], [10.0 * rank + 2]], dtype=torch.float32).expand(2, 16).bfloat16()
    recv_x, recv_idx, _, handle, _ = buf.dispatch(x, idx, num_experts=4)
    expect_x = {0: [1, 11, 12], 1: [1, 2, 11, 12]}[rank]
    expect_idx = {0: [[0, -1], [1, -1], [-1, 0]], 1: [[-1, 1], [0, -1], [-1, 0], [1, -1]]}[rank]
    assert recv_x[:, 0].float().tolist() == expect_x and recv_idx.tolist() == expect_idx
    assert handle.num_recv_tokens_per_expert_list == {0: [2, 1], 1: [2, 2]}[rank]
    assert handle.recv_src_metadata[:, 0].tolist() == {0: [0, 2, 3], 1: [0, 1, 2, 3]}[rank]
    combined, _, _ = buf.combine(recv_x, handle, bias=torch.ones(2, 16, dtype=torch.float32).bfloat16())
    assert combined[:, 0].float().tolist() == {0: [3, 3], 1: [23, 25]}[rank]
    ex, _, _, ehandle, _ = buf.dispatch(x, idx, num_experts=4, do_expand=True)
    assert ex[:, 0].float().tolist() == {0: [1, 12, 11], 1: [2, 11, 1, 12]}[rank]
    assert buf.combine(ex, ehandle)[0][:, 0].float().tolist() == {0: [2, 2], 1: [22, 24]}[rank]
    buf.destroy()


def run_matrix(rank, world, hidden, num_experts, M, topk, transport=None, ranks_per_host=None):
    import deep_ep
    if transport:
        os.environ["EP_TRANSPORT"] = transport
    if ranks_per_host is not None:
        os.environ["DJ_SYMM_HOST_ID"] = f"sim-host-{rank // ranks_per_host}"
    if world == 2:
        check_by_hand(rank)
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=hidden, num_topk=topk,
                           explicitly_destroy=True, num_cpu_timeout_secs=60)
    done = []
    for i, case in enumerate(CASES):
        try:
            check_case(buf, case, rank, world, hidden, num_experts, M, topk, seed=i + 1)
        except AssertionError as exc:
            raise AssertionError(f"{case}: {exc}") from exc
        done.append(i)
    kind = buf.transport
    physical = buf.get_physical_domain_size()
    assert buf.get_logical_domain_size() == (1, world)
    buf.destroy()
    # No multiple reduction: every expanded row travels and is reduced once at the source.
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=hidden, num_topk=topk,
                           allow_multiple_reduction=False, explicitly_destroy=True, num_cpu_timeout_secs=60)
    check_case(buf, Case(None, False, True, 128, num_bias=2), rank, world, hidden, num_experts, M, topk, seed=99,
               multiple_reduction=False)
    buf.destroy()
    return kind, done, physical
