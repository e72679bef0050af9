"""Across 2 real processes: the window exchange alone (test_symm_exchange.py's rounds), then EPBuffer
dispatch and combine with ``EP_BACKEND=ascend EP_ASCEND_TRANSPORT=symm``: the steps move counts and
rows through the symmetric window by the kernels (ascend/symm_steps.py) and match the oracle of
tests/deep_ep/refs.py bit for bit (every case of cases.py: token-major and expanded, BF16 and FP8,
with and without CPU sync, cached, and an expanded combine without multiple reduction); token-major
and expanded dispatches without CPU sync and their combines run with every input and every buffer the
kernels write marked device-only (any host read of them, or of what is computed from them, raises)."""
import torch

from tests.testkit.distributed import run_ranks

from ..cases import CASES, Case, check_case
from .test_symm_exchange import DeviceOnly, _mark, exchange_round_trips

HIDDEN, E, M, K = 128, 8, 10, 3


def _cases(rank, world):
    import torch.distributed as dist

    rounds = exchange_round_trips(rank, world)

    import deep_ep
    from deep_ep.ascend.engine import AscendEngine
    from tests.deep_ep import refs

    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=HIDDEN, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=60)
    assert isinstance(buf._engine, AscendEngine) and buf._engine.symm is not None
    # Token-major and expanded, with and without CPU sync; and a token-major dispatch cached from a CPU-sync
    # handle (its combine takes the handle's row count).
    for i, case in enumerate((*CASES, Case(None, True, False, cached=True))):
        check_case(buf, case, rank, world, HIDDEN, E, M, K, seed=i + 1)
    # A rank with no token (rank 1), without CPU sync: empty outputs for it, token-major and expanded.
    no_tokens = []
    for expand in (False, True):
        T0 = 0 if rank == 1 else 4
        idx0, _ = refs.make_routing(T0, K, E, 5 + rank)
        x0 = refs.make_x(T0, HIDDEN, 5 + rank, None)
        rx0, _, _, h0, _ = buf.dispatch(x0, idx0, num_experts=E, do_cpu_sync=False, do_expand=expand)
        back0, _, _ = buf.combine(rx0, h0)
        no_tokens.append(tuple(back0.shape) == (T0, HIDDEN))
    # No host read on the dispatch without CPU sync nor on its combine.
    T = M - 3 * rank
    idx, w = refs.make_routing(T, K, E, 77 + rank)
    x = refs.make_x(T, HIDDEN, 77 + rank, None)
    _mark(idx, w, x)
    # What the kernels write (the engine's staging buffers) is device memory too: marked as handed out.
    from deep_ep.ascend.transport import CollectiveExchange
    staging = CollectiveExchange.staging

    def marked_staging(self, *args):
        t = staging(self, *args)
        t._device_only = True
        return t

    CollectiveExchange.staging = marked_staging
    try:
        with DeviceOnly():
            recv_x, recv_idx, recv_w, handle, _ = buf.dispatch(x, idx, w, num_experts=E, do_cpu_sync=False)
            combined, combined_w, _ = buf.combine(recv_x, handle, recv_w)
            # Expanded (alignment 4, zero padding): the per-expert unpack and its combine, on the device too.
            ex_x, _, ex_w, ex_handle, _ = buf.dispatch(x, idx, w, num_experts=E, do_cpu_sync=False, do_expand=True,
                                                       expert_alignment=4, do_zero_padding=True)
            ex_combined, ex_combined_w, _ = buf.combine(ex_x, ex_handle, ex_w)
    finally:
        CollectiveExchange.staging = staging
    for t in (idx, w, x, recv_x, recv_idx, recv_w, combined, combined_w, ex_x, ex_w, ex_combined, ex_combined_w,
              *handle.__dict__.values(), *ex_handle.__dict__.values()):
        if isinstance(t, torch.Tensor):
            t.__dict__.pop("_device_only", None)
    # Without CPU sync every expanded output row may hold a token: combine takes no fewer rows.
    try:
        buf.combine(ex_x[:1], ex_handle)
        short_refused = False
    except ValueError as exc:
        short_refused = "x: expected the" in str(exc)
    # Each token comes back as the sum over its ranks of its own row (bf16 partials, as upstream).
    ranks = torch.where(idx >= 0, idx // (E // world), -1)
    copies = torch.stack([(ranks == r).any(1) for r in range(world)], 1).sum(1)
    want = (x.float() * copies[:, None]).bfloat16()
    checks = {"token-major": torch.equal(combined, want)
              and bool(torch.equal(combined_w, torch.where(idx >= 0, w, 0.0)))}
    # Expanded: each receiving rank sums the token's slots it holds into one BF16 partial; the source adds
    # the partials in FP32 and rounds once.
    partials = [(x.float() * (ranks == r).sum(1, keepdim=True)).bfloat16().float() for r in range(world)]
    checks["expanded"] = torch.equal(ex_combined, sum(partials).bfloat16()) \
        and bool(torch.equal(ex_combined_w, torch.where(idx >= 0, w, 0.0)))
    checks["short x refused"] = short_refused
    checks["no tokens"] = no_tokens == [True, True]
    window = buf._engine.symm.exchange.window
    buf.destroy()
    checks["window destroyed"] = window._window._destroyed
    # Expanded rows sent back one per (token, slot) and reduced once at the source, without CPU sync.
    single = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=HIDDEN, num_topk=K,
                              allow_multiple_reduction=False, explicitly_destroy=True, num_cpu_timeout_secs=60)
    check_case(single, Case(None, False, True, 8, zero_padding=True, cpu_sync=False, num_bias=2), rank, world,
               HIDDEN, E, M, K, seed=9, multiple_reduction=False)
    single.destroy()
    return rounds, checks


def test_window_exchange_and_dispatch_combine():
    outs = run_ranks(_cases, 2, timeout=600, env={"EP_BACKEND": "ascend", "EP_ASCEND_TRANSPORT": "symm"})
    exchanged = {"x": (True, True, True), "ids": (True, True, True), "back": (True, True)}
    for rounds, checks in outs:
        assert rounds == [exchanged, exchanged], rounds
        assert all(checks.values()), checks
