"""deep_ep's kernel-initiated window exchange (deep_ep/ascend/symm_exchange.py) across 2 real processes
on the Ascend twin (run by test_symm_transport.py, which spawns the ranks once for both): a dispatch of token rows (routing computed on the device) and the combine that
sends them back, with every input marked device-only (a host read of them, or of anything computed
from them, raises: tests/testkit/host_reads.py). The dispatched rows and
row starts are bit-exact against the collective transport's ``all_to_all_single`` on the same rows,
the combine brings back exactly the rows each token sent; a second round reuses the inboxes."""
import pytest
import torch

from tests.testkit.host_reads import DeviceOnly, HostRead
from tests.testkit.host_reads import mark as _mark


def test_the_guard_catches_host_reads():
    x, = (torch.arange(4),)
    _mark(x)
    with DeviceOnly():
        (x > 1)[1:]  # device work
        for read in ((x + 1).tolist, lambda: x[x > 1], lambda: int(x[0])):
            with pytest.raises(HostRead):
                read()

T, H, E, K, M = 10, 64, 8, 3, 10   # tokens, bf16 hidden (128-byte rows), experts, top-k, capacity per source


def _inputs(rank, round_):
    g = torch.Generator().manual_seed(100 * round_ + rank)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])
    idx[torch.rand(T, K, generator=g) < 0.2] = -1
    x = torch.randn(T, H, generator=g).bfloat16()
    ids = torch.randint(0, 1 << 30, (T, 3), generator=g, dtype=torch.int32)   # 12-byte rows: a ragged burst
    return idx, x, ids


def _oracle(rows, dst_slot, counts):
    """The collective transport's exchange: rows packed by destination, all_to_all_single with splits."""
    import torch.distributed as dist

    R = dst_slot.shape[1]
    send = torch.cat([rows[dst_slot[:, d] >= 0][dst_slot[dst_slot[:, d] >= 0, d].argsort()] for d in range(R)])
    recv_counts = torch.empty(R, dtype=torch.int64)
    dist.all_to_all_single(recv_counts, counts.long())
    out = torch.empty(int(recv_counts.sum()), *rows.shape[1:], dtype=rows.dtype)
    a, b = out.view(out.shape[0], -1).view(torch.uint8), send.view(send.shape[0], -1).view(torch.uint8)
    dist.all_to_all_single(a, b.contiguous(), recv_counts.tolist(), counts.tolist())
    return out, torch.cat([torch.zeros(1, dtype=torch.int64), recv_counts.cumsum(0)]).int()


def exchange_round_trips(rank, world):
    """Run inside each rank (test_symm_transport.py spawns them): two rounds of dispatch + combine
    through the window; per round ``{"x", "ids": (starts, rows, rest zero), "back": (rows, starts)}``."""
    import torch.distributed as dist

    from deep_ep.ascend import routing
    from deep_ep.ascend.symm_exchange import SymmExchange

    ex = SymmExchange(dist.group.WORLD, max_rows=M, max_row_bytes=H * 2, timeout_s=60)
    results = []
    for round_ in range(2):
        idx, x, ids = _inputs(rank, round_)
        _mark(idx, x, ids)
        with DeviceOnly():
            plan, _ = routing.plan(idx, H, E, world)
            pos, counts = plan.dst_slot.contiguous(), plan.send_counts[:, 0].contiguous()
            got = {}
            for name, rows in (("x", x), ("ids", ids)):
                out = torch.zeros(world * M, *rows.shape[1:], dtype=rows.dtype)
                start = torch.zeros(world + 1, dtype=torch.int32)
                _mark(out, start)   # what the kernels write is device memory too
                ex.exchange(rows, pos, counts, out, start)
                got[name] = (out, start)
            # Combine: every received row back to its source, at the slot it was sent from.
            out, start = got["x"]
            i = torch.arange(world * M)
            src = torch.bucketize(i, start[1:].long(), right=True)              # the source of row i
            held = i < start[-1]
            back_pos = torch.where(held[:, None] & (src[:, None] == torch.arange(world)[None, :]),
                                   (i - start[src.clamp(max=world - 1)])[:, None], -1).int().contiguous()
            recv_counts = (start[1:] - start[:-1]).contiguous()
            back = torch.zeros(T * world, H, dtype=torch.bfloat16)
            back_start = torch.zeros(world + 1, dtype=torch.int32)
            _mark(back, back_start)
            ex.exchange(out, back_pos, recv_counts, back, back_start)
        for t in (idx, x, ids, pos, counts, back, back_start, *got["x"], *got["ids"]):
            t.__dict__.pop("_device_only", None)
        ok = {}
        for name, rows in (("x", x), ("ids", ids)):
            want, want_start = _oracle(rows, plan.dst_slot, plan.send_counts[:, 0])
            out, start = got[name]
            n = want.shape[0]
            ok[name] = (torch.equal(start, want_start), torch.equal(out[:n],
                                                                    want), bool((out[n:] == 0).all()))
        # Back at the source: rows from rank d start at the exclusive prefix of what was sent to d.
        sent = plan.send_counts[:, 0].long()
        first = sent.cumsum(0) - sent
        expect = torch.zeros_like(back)
        for d in range(world):
            mask = plan.dst_slot[:, d] >= 0
            expect[first[d] + plan.dst_slot[mask, d].long()] = x[mask]
        ok["back"] = (torch.equal(back, expect), back_start.tolist() == [0, *sent.cumsum(0).tolist()])
        results.append(ok)
    ex.destroy()
    return results
