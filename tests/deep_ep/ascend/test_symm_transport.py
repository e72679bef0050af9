"""Across 2 real processes: the window exchange alone (test_symm_exchange.py's rounds), then EPBuffer
dispatch and combine with ``EP_BACKEND=ascend`` and the default transport choice, which is the window on
the twin's one host: the steps move counts and rows through the symmetric window by the kernels
(ascend/symm_steps.py) and match the oracle of tests/deep_ep/refs.py bit for bit (every case of cases.py:
token-major and expanded, BF16 and FP8, with and without CPU sync, cached, and an expanded combine without
multiple reduction); token-major and expanded dispatches without CPU sync and their combines run with every
input and every buffer the kernels write marked device-only (any host read of them, or of what is computed
from them, raises). Across 3 processes with ``EP_ASCEND_TRANSPORT=symm``, one rank without tokens: token-major
and expanded, BF16 and FP8, without CPU sync, under the same guard, against the same oracle. The choice rule
alone: test_transport_choice.py."""
import torch
from torch.utils._pytree import tree_leaves

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
    assert isinstance(buf._engine, AscendEngine) and buf._engine.symm is not None   # auto's choice here
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
    outs = run_ranks(_cases, 2, timeout=600, env={"EP_BACKEND": "ascend"})
    exchanged = {"x": (True, True, True), "ids": (True, True, True), "back": (True, True)}
    for rounds, checks in outs:
        assert rounds == [exchanged, exchanged], rounds
        assert all(checks.values()), checks


def _reachable(obj, seen=None) -> dict:
    """Every tensor reachable from ``obj`` through tuples, lists, dicts and deep_ep objects, by id."""
    seen = {} if seen is None else seen
    if isinstance(obj, torch.Tensor):
        seen[id(obj)] = obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            _reachable(o, seen)
    elif isinstance(obj, dict):
        for o in obj.values():
            _reachable(o, seen)
    elif type(obj).__module__.startswith("deep_ep") and hasattr(obj, "__dict__") and id(obj) not in seen:
        seen[id(obj)] = None
        for o in vars(obj).values():
            _reachable(o, seen)
    return seen


class _Guarded:
    """``check_case``'s buffer with each dispatch and combine run under the device-only guard: their inputs,
    what the kernels write (the engine's staging buffers) and, for a combine, what its dispatch left marked in
    the handle are device memory. ``check_case`` reads the results on the host in between (unmarked)."""

    def __init__(self, buf):
        self.buf, self._held = buf, {}

    def _run(self, fn, args, kwargs, held=()):
        from deep_ep.ascend.transport import CollectiveExchange
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)] + list(held)
        _mark(*inputs)
        staging = CollectiveExchange.staging
        CollectiveExchange.staging = lambda ex, *a: _mark(staging(ex, *a))[0]
        try:
            with DeviceOnly():
                out = fn(*args, **kwargs)
        finally:
            CollectiveExchange.staging = staging
        reached = [t for t in _reachable(out).values() if t is not None]
        marked = [t for t in reached if getattr(t, "_device_only", False)]
        for t in (*inputs, *reached):
            t.__dict__.pop("_device_only", None)
        return out, marked

    def dispatch(self, *args, **kwargs):
        out, marked = self._run(self.buf.dispatch, args, kwargs)
        self._held[id(out[3])] = marked
        return out

    def combine(self, x, handle, *args, **kwargs):
        held = self._held.pop(id(handle))
        return self._run(lambda y, *a, **k: self.buf.combine(y, handle, *a, **k), (x, *args), kwargs, held)[0]


THREE_RANK_CASES = (Case(None, True, False, cpu_sync=False), Case(None, True, True, 4, zero_padding=True, cpu_sync=False),
                    Case("float", True, False, cpu_sync=False, num_bias=1), Case("float", False, True, cpu_sync=False))


def _three_ranks(rank, world):
    import torch.distributed as dist

    import deep_ep
    buf = deep_ep.EPBuffer(dist.group.WORLD, num_max_tokens_per_rank=M, hidden=HIDDEN, num_topk=K,
                           explicitly_destroy=True, num_cpu_timeout_secs=60)
    assert buf._engine.symm is not None
    guarded = _Guarded(buf)
    for i, case in enumerate(THREE_RANK_CASES):  # rank 1 has no token
        check_case(guarded, case, rank, world, HIDDEN, 3 * 4, M, K, seed=20 + i, num_tokens=0 if rank == 1 else M - rank)
    assert not guarded._held
    seq = buf._engine.symm.exchange.seq
    buf.destroy()
    return seq


def test_window_dispatch_combine_on_three_ranks_without_host_reads():
    seqs = run_ranks(_three_ranks, 3, timeout=600, env={"EP_BACKEND": "ascend", "EP_ASCEND_TRANSPORT": "symm"})
    # every step through the window (one exchange, never regrown): per dispatch the counts, x, sf (FP8), ints
    # and weights; per combine the rows and the weights (when given): 6 + 6 + 7 + 5
    assert seqs == [24] * 3, seqs
