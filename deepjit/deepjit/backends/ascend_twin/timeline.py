"""A per-pipe timeline estimate of a twin launch, computed from the event stream the twin records
(dj_twin/timeline.h) and a cost table (``costs.py``). It is an estimate, never a measurement.

Model. Each core (AIC / AIV) has a scalar unit that issues its recorded instructions in program order (one
issue cycle each) into per-pipe queues; the pipes (MTE2, MTE1, cube, FixPipe, vector, MTE3) run concurrently,
each in program order. An instruction starts when it has been issued and its pipe is free; a mover keeps
its pipe busy ``bytes / rate`` cycles (at least its II floor) and its data is ready ``latency`` cycles later.
``asc_sync_notify(src, dst, id)`` fires once every earlier instruction of ``src`` is complete; the matching
wait holds ``dst`` (the scalar unit itself when ``dst`` is PIPE_S) until then. ``asc_sync()`` (PIPE_ALL)
holds the scalar unit until every pipe is done; ``asc_sync_pipe(p)`` holds ``p`` until its own work is
complete. Cross-core arrives fire when their pipe's earlier work is complete; a wait holds its pipe until
its arrive (all-core flags: until every core of the kind arrived for the round). GM traffic shares, in
time bins, the chip's L2 bandwidth, its HBM bandwidth (the bytes the L2 model says miss, per core) and
each AI core's port (its two AIVs and its AIC; a strided move takes more than its bytes of it, path_share)
and its UB -> L1 path. Blocks beyond the chip's cores start on the first core
that becomes free. The kernel's estimated time is the last core's finish.
"""
from __future__ import annotations

import heapq
from collections import defaultdict, deque
from dataclasses import dataclass, field, replace

from .costs import COSTS_950, CostTable, Mover
from .pipes import GM_READS, GM_WRITES, ROUTES

# dj_twin/timeline.h Ev, in order.
EVENT_TYPES = ("move", "cube", "vector", "simt", "set", "wait", "barrier", "intra_arrive", "intra_wait",
               "inter_arrive", "inter_wait")
WIDTH_CLASSES = ("fp32", "b16", "b8", "b4")
# dj_twin/timeline.h CubeMode and MoveVariant, in order.
CUBE_MODES = ("plain", "hf32", "mx")
MOVE_VARIANTS = ("plain", "mx_scales", "strided", "dual")
# dj_twin/runtime.h pipe_t values
PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_FIX = 0, 1, 2, 3, 4, 5, 6, 10
PIPE_NAMES = {PIPE_S: "scalar", PIPE_V: "vector", PIPE_M: "cube", PIPE_MTE1: "mte1", PIPE_MTE2: "mte2",
              PIPE_MTE3: "mte3", PIPE_FIX: "fixpipe", 7: "mte4", 8: "mte5", 9: "vector2", 11: "mte2", 12: "mte2"}
# The busy pipes a report shows, in a profiler's order; SIMT work runs on the vector core (its own row).
REPORT_PIPES = ("scalar", "mte2", "mte1", "cube", "fixpipe", "vector", "simt", "mte3")
EVENT_BYTES = 32
# Below this busy share of its busiest unit a kernel is reported latency-bound.
LATENCY_BOUND_BELOW = 0.5


@dataclass
class Event:
    type: str
    pipe: int
    a: int = 0
    b: int = 0
    id: int = 0
    n: int = 0
    m: int = 0
    depth: int = 0   # vector: the longest chain of dependent register instructions in the run; simt: its
    #                  lane memory instructions (simt_memory)


def vector_instructions(e: Event) -> dict:
    """A merged vector event's instructions by class (dj_twin/timeline.h Ev::Vector's packing)."""
    low = (1 << 32) - 1
    return {"simple": e.n & low, "special": e.n >> 32, "load": e.m & low, "store": e.m >> 32, "divide": e.id}


def vector_event(simple: int = 0, special: int = 0, divide: int = 0, load: int = 0, store: int = 0,
                 depth: int = 0) -> Event:
    return Event("vector", PIPE_V, n=simple | special << 32, m=load | store << 32, id=divide, depth=depth)


def vector_cycles(e: Event, costs: CostTable) -> float:
    """A run of vector instructions: the ALU and the register loads and stores overlap (costs.py), and
    no faster than its longest chain of dependent instructions, each waiting for its source's latency."""
    k, c = vector_instructions(e), costs.vector_cycles
    alu = k["simple"] * c["simple"] + k["special"] * c["special"] + k["divide"] * c["divide"]
    return max(alu, k["load"] * c["load"], k["store"] * c["store"], e.depth * costs.vector_latency)


def move_cost(e: Event, costs: CostTable) -> Mover:
    """The mover a recorded move runs on (costs.py): its route's; the MX scale path for MX scale copies; a
    dual-destination FixPipe at its row width's rate; strided rows at their width's rate."""
    route, variant = ROUTES[e.a], MOVE_VARIANTS[e.b]
    if route == "l1_to_l0" and variant == "mx_scales":
        return costs.movers["l1_to_l0_sf"]
    mover = costs.movers.get(route, costs.movers["fill"])
    if variant == "dual":   # both AIVs' halves through the endpoint at min(256, 2 x the row width)
        rate = min(costs.fixpipe_dual_cap, e.m * costs.fixpipe_dual_width_scale) if e.m else costs.fixpipe_dual_unknown
        return replace(mover, bytes_per_cycle=rate, latency=costs.fixpipe_dual_latency)
    if variant != "strided":
        return mover
    if route == "ub_to_l1":
        if e.m >= costs.ub_to_l1_full_width:
            rate = e.m
        else:
            rate = e.m * costs.ub_to_l1_narrow_share if e.m else costs.ub_to_l1_unknown
        return replace(mover, bytes_per_cycle=min(mover.bytes_per_cycle, rate))
    rows = costs.strided.get(route)
    if rows is None:
        return mover
    return replace(mover, bytes_per_cycle=rows.rate(e.m, mover.bytes_per_cycle), latency=rows.latency_at(e.m))


def path_share(e: Event, mover: Mover, link_rate: float) -> float:
    """The share of a move's bytes its AI core's shared path (`link_rate`: the GM port, or UB -> L1) counts:
    TileLang's AIV rates are the two AIVs' aggregate, so a strided move takes the path's capacity in the
    proportion its rate bears to it (two AIVs streaming 64-byte rows share 50 B/cycle, not 50 each)."""
    return max(1.0, link_rate / mover.bytes_per_cycle) if MOVE_VARIANTS[e.b] == "strided" else 1.0


def cube_rate_class(e: Event) -> str:
    """The cost table's rate class of an mmad: its operand width, FP32 operands by the HF32 mode."""
    width = WIDTH_CLASSES[e.a]
    return "hf32" if width == "fp32" and CUBE_MODES[e.b] == "hf32" else width


def cube_cycles(e: Event, costs: CostTable) -> float:
    """An mmad's cube time: its charged MACs (the padded geometry; the MACs where a recording gives none)
    at its rate class."""
    return 2 * (e.m or e.n) / costs.cube_flops_per_cycle[cube_rate_class(e)]


def cube_latency(e: Event, costs: CostTable) -> float:
    """Cycles from an mmad's end until its result is usable (costs.py)."""
    if CUBE_MODES[e.b] == "mx":
        return costs.cube_latency_mx
    return costs.cube_latency_fp32 if WIDTH_CLASSES[e.a] == "fp32" else costs.cube_latency


def simt_memory(e: Event) -> dict:
    """A merged SIMT event's lane memory instructions by kind (dj_twin/timeline.h timeline_simt's packing)."""
    return {"ub_load": e.depth & (1 << 20) - 1, "ub_store": e.depth >> 20 & (1 << 20) - 1, "gm": e.depth >> 40}


def simt_memory_instructions(e: Event) -> int:
    """Every lane memory instruction costs one lane slot of the SIMT issue (costs.py), whatever its kind."""
    return sum(simt_memory(e).values())


def simt_event(alu: int = 0, gm_bytes: int = 0, ub_load: int = 0, ub_store: int = 0, gm: int = 0) -> Event:
    return Event("simt", PIPE_V, n=alu, m=gm_bytes, depth=ub_load | ub_store << 20 | gm << 40)


def parse_events(raw: bytes) -> list[Event]:
    """The 32-byte little-endian records of dj_twin/timeline.h TimelineEvent."""
    import struct

    out = []
    for t, pipe, a, b, ident, n, m, depth in struct.iter_unpack("<BBBBIQQQ", raw):
        out.append(Event(EVENT_TYPES[t], pipe, a, b, ident, n, m, depth))
    return out


@dataclass
class CoreTrace:
    """One core's recorded events. ``slot``: 0 AIC, 1 AIV0, 2 AIV1 in a mix block (0 for a single-kind
    block); ``kind``: "AIC" or "AIV"."""
    block: int
    kind: str
    slot: int
    events: list
    hbm_read_share: float = 1.0   # of the core's GM read bytes, the share that missed L2 (L2 model)
    hbm_write_share: float = 1.0


class Ledger:
    """Shared bandwidth in time bins: each link has ``rate`` bytes a cycle; a transfer takes what is left
    in each bin from its start, at most its own rate. Transfers are placed in the order they are asked
    for (the scheduler asks roughly in time order), so the chip's aggregate throughput is right even where
    who waits for whom is approximate."""

    def __init__(self, bin_cycles: int):
        self.bin = bin_cycles
        self.used: dict = defaultdict(lambda: defaultdict(float))  # link -> bin -> bytes used
        self.rates: dict = {}

    def add_link(self, name, rate: float) -> None:
        self.rates[name] = rate

    def transfer(self, start: float, nbytes: float, own_rate: float, links: list) -> float:
        """End time of ``nbytes`` from ``start`` at up to ``own_rate`` B/cycle, ``links``: ``[(link,
        share)]``: the transfer puts ``share`` of its bytes through each."""
        links = [(name, share) for name, share in links if share > 0]
        t, left = start, float(nbytes)
        while left > 1e-9:
            i = int(t // self.bin)
            span = (i + 1) * self.bin - t
            take = min(left, own_rate * span)
            # what others already took of this bin is spread over it: the rate left to this transfer
            rate = own_rate
            for name, share in links:
                used = self.used[name][i]
                take = min(take, max(self.rates[name] * self.bin - used, 0.0) / share)
                rate = min(rate, max(self.rates[name] - used / self.bin, 0.0) / share)
            for name, share in links:
                self.used[name][i] += take * share
            if take >= left - 1e-9 and rate > 0 and t + left / rate <= (i + 1) * self.bin + 1e-9:
                return t + left / rate
            left -= take
            t = (i + 1) * self.bin
        return t


@dataclass
class CoreState:
    trace: CoreTrace
    index: int
    issue: float = 0.0
    pos: int = 0
    free: dict = field(default_factory=lambda: defaultdict(float))
    done: dict = field(default_factory=lambda: defaultdict(float))
    flags: dict = field(default_factory=lambda: defaultdict(deque))
    busy: dict = field(default_factory=lambda: defaultdict(float))
    waiting: dict = field(default_factory=lambda: defaultdict(float))
    segments: list | None = None
    finish: float = 0.0
    port: object = None
    consumed: dict = field(default_factory=dict)   # (src, dst, id) -> when its last wait took the flag


@dataclass
class Estimate:
    """What the timeline says about one launch (cycles at ``costs.clock_hz``; ``seconds`` the estimate)."""
    kernel: str
    cycles: float
    seconds: float
    cores: int
    busy: dict        # report pipe -> busy share of (cores that have the pipe x kernel time)
    waiting: dict     # report pipe -> share of that time stalled on a flag
    bound: str        # the busiest pipe (or "hbm" / "l2" when a shared path is fuller)
    gm_bytes: int
    hbm_bytes: float
    flops: float
    segments: dict = field(default_factory=dict)  # core label -> [(pipe, start_cycle, end_cycle)] (block 0)
    busiest: str = "none"  # the busiest unit (the bound, unless the kernel is latency-bound)
    # pipe flags (set_flag / wait_flag within a core) set while still set (see schedule): their count and the
    # first one the scheduler met, described
    flag_hazards: int = 0
    first_flag_hazard: str = ""

    @property
    def microseconds(self) -> float:
        return self.seconds * 1e6

    def summary(self) -> str:
        share = ", ".join(f"{p} {self.busy[p] * 100:.0f}%" for p in REPORT_PIPES if self.busy.get(p))
        return (f"timeline estimate, not a measurement: {self.microseconds:.2f} us, {self.bound}-bound "
                f"(busy: {share})")


def _block_slots(kind: str, costs: CostTable) -> int:
    return costs.aiv_cores if kind == "vector" else costs.aic_cores


def schedule(traces: list[CoreTrace], kind: str, costs: CostTable = COSTS_950, kernel: str = "") -> Estimate:
    """The timeline of one launch: ``traces`` by core in launch order (block by block), ``kind`` the
    kernel's core type ("vector", "cube" or "mix"). The chart segments are kept for block 0."""
    ledger = Ledger(costs.bin_cycles)
    ledger.add_link("l2", costs.l2_bytes_per_cycle)
    ledger.add_link("hbm", costs.hbm_bytes_per_cycle)
    blocks: dict = defaultdict(list)
    for i, tr in enumerate(traces):
        blocks[tr.block].append(CoreState(tr, i, segments=[] if tr.block == 0 else None))
    order = sorted(blocks)
    slots = _block_slots(kind, costs)
    # an AI core's port: the two AIVs (vector kernels: blocks 2k, 2k+1) and the AIC of a mix block
    port_rate = costs.port_bytes_per_cycle
    ub_to_l1_rate = costs.movers["ub_to_l1"].bytes_per_cycle   # and its UB -> L1 path

    ready: list = []
    pending = deque(order[slots:])
    slot_of_block = {}

    def start_block(b: int, t: float, slot: int) -> None:
        slot_of_block[b] = slot
        for s in blocks[b]:
            s.issue = t
            s.port = ("port", slot // 2 if kind == "vector" else slot)
            if s.port not in ledger.rates:
                ledger.add_link(s.port, port_rate)
                ledger.add_link(("ub_to_l1", s.port[1]), ub_to_l1_rate)
            heapq.heappush(ready, (s.issue, s.index, s))

    for slot, b in enumerate(order[:slots]):
        start_block(b, 0.0, slot)

    intra: dict = defaultdict(deque)          # (block, slot, counter) -> arrive times
    inter_arrivals: dict = defaultdict(lambda: defaultdict(list))  # (kind, flag) -> core index -> times
    inter_waits: dict = defaultdict(int)      # (core index, kind, flag) -> rounds waited
    kind_cores = {0: [s.index for b in order for s in blocks[b] if s.trace.kind == "AIC"],
                  1: [s.index for b in order for s in blocks[b] if s.trace.kind == "AIV"]}
    blocked: list = []
    block_left = {b: len(blocks[b]) for b in order}
    total_gm = 0
    total_hbm = 0.0
    flops = 0.0
    lat = costs.cross_core_flag_latency
    # A pipe flag is one bit: set_flag sets it, wait_flag waits for it and clears it, and a second set
    # before the wait that takes the first is illegal (CANN cceapi "set_flag & wait_flag"; the second set
    # is lost and the second wait never returns). The twin's functional run refuses a second set in
    # program order, and one that nothing within the core orders after the previous set's wait (PipeOrder in
    # dj_twin/runtime.h); the timeline also sees run-ahead whose order it took from another core: a set that
    # fires before the flag's previous set was taken is a hazard.
    hazards: list = []

    def occupy(s: CoreState, name: str, start: float, end: float) -> None:
        s.busy[name] += end - start
        if s.segments is not None:
            s.segments.append((name, start, end))

    def pipe_start(s: CoreState, pipe: int) -> float:
        return max(s.issue, s.free[pipe])

    def completion(s: CoreState, pipe: int) -> float:
        if pipe == PIPE_S:
            return s.issue
        return max(s.issue, s.free[pipe], s.done[pipe])

    def hold(s: CoreState, pipe: int, until: float) -> None:
        """A wait: ``pipe`` (the scalar unit for PIPE_S) starts nothing before ``until``."""
        name = PIPE_NAMES.get(pipe, "scalar")
        if pipe == PIPE_S:
            if until > s.issue:
                s.waiting["scalar"] += until - s.issue
                s.issue = until
            return
        was = max(s.issue, s.free[pipe])
        if until > was:
            s.waiting[name] += until - was
        s.free[pipe] = max(s.free[pipe], until)

    def step(s: CoreState) -> bool:
        """Processes the core's next event; False when it must wait for another core."""
        nonlocal total_gm, total_hbm, flops
        e = s.trace.events[s.pos]
        t = e.type
        if t == "move":
            route = ROUTES[e.a]
            pipe = e.pipe
            mover = move_cost(e, costs)
            start = pipe_start(s, pipe)
            if route in GM_READS or route in GM_WRITES:
                share = s.trace.hbm_read_share if route in GM_READS else s.trace.hbm_write_share
                end = ledger.transfer(start + mover.issue, e.n, mover.bytes_per_cycle,
                                      [("l2", 1.0), ("hbm", share), (s.port, path_share(e, mover, port_rate))])
                total_gm += e.n
                total_hbm += e.n * share
            elif route == "ub_to_l1":   # the AI core's two AIVs share its UB -> L1 path
                end = ledger.transfer(start + mover.issue, e.n, mover.bytes_per_cycle,
                                      [(("ub_to_l1", s.port[1]), path_share(e, mover, ub_to_l1_rate))])
            else:
                end = start + mover.issue + e.n / mover.bytes_per_cycle
            end = max(end, start + mover.min_ii)
            occupy(s, PIPE_NAMES.get(pipe, "mte2"), start, end)
            s.free[pipe] = end
            s.done[pipe] = max(s.done[pipe], end + mover.latency)
        elif t == "cube":
            start = pipe_start(s, PIPE_M)
            flops += 2 * e.n
            end = start + cube_cycles(e, costs)
            occupy(s, "cube", start, end)
            s.free[PIPE_M] = end
            s.done[PIPE_M] = max(s.done[PIPE_M], end + cube_latency(e, costs))
        elif t == "vector":
            start = pipe_start(s, PIPE_V)
            end = start + vector_cycles(e, costs)
            occupy(s, "vector", start, end)
            s.free[PIPE_V] = s.done[PIPE_V] = end
        elif t == "simt":
            start = pipe_start(s, PIPE_V)
            end = start + (e.n + simt_memory_instructions(e)) / costs.simt_lane_ops_per_cycle
            if e.m:
                end = max(end, ledger.transfer(start, e.m, costs.simt_gm_bytes_per_cycle,
                                               [("l2", 1.0), ("hbm", s.trace.hbm_read_share), (s.port, 1.0)]))
                total_gm += e.m
                total_hbm += e.m * s.trace.hbm_read_share
            occupy(s, "simt", start, end)
            s.free[PIPE_V] = s.done[PIPE_V] = end
        elif t == "set":
            key, fires = (e.a, e.b, e.id), completion(s, e.a)
            if s.flags[key] or fires < s.consumed.get(key, float("-inf")):
                hazards.append((s, key, fires))
            s.flags[key].append(fires)
        elif t == "wait":
            key = (e.a, e.b, e.id)
            queue = s.flags[key]
            until = queue.popleft() if queue else s.issue
            s.consumed[key] = max(until, s.issue if e.b == PIPE_S else max(s.issue, s.free[e.b]))
            hold(s, e.b, until)
        elif t == "barrier":
            if e.pipe == PIPE_ALL:
                until = max([s.issue] + [completion(s, p) for p in list(s.free) + list(s.done)])
                for p in list(s.free):
                    s.free[p] = until
                hold(s, PIPE_S, until)
            elif e.pipe != PIPE_S:
                s.free[e.pipe] = max(s.free[e.pipe], s.done[e.pipe])
        elif t == "intra_arrive":
            intra[(s.trace.block, e.a, e.id)].append(completion(s, e.pipe) + lat)
            _wake(blocked, ready)
        elif t == "intra_wait":
            queue = intra[(s.trace.block, s.trace.slot, e.id)]
            if not queue:
                return False
            hold(s, e.pipe, queue.popleft())
        elif t == "inter_arrive":
            inter_arrivals[(e.a, e.id)][s.index].append(completion(s, e.pipe) + lat)
            _wake(blocked, ready)
        elif t == "inter_wait":
            key = (s.index, e.a, e.id)
            rnd = inter_waits[key]
            arrivals = inter_arrivals[(e.a, e.id)]
            members = kind_cores[e.a]
            if any(len(arrivals[c]) <= rnd for c in members):
                return False
            inter_waits[key] = rnd + 1
            hold(s, e.pipe, max(arrivals[c][rnd] for c in members))
        if t not in ("set", "wait", "barrier", "intra_wait", "inter_wait"):
            s.issue += costs.scalar_issue
            s.busy["scalar"] += costs.scalar_issue
        s.pos += 1
        return True

    while ready:
        _, _, s = heapq.heappop(ready)
        if s.pos >= len(s.trace.events):
            s.finish = max([s.issue] + [completion(s, p) for p in list(s.free) + list(s.done)])
            b = s.trace.block
            block_left[b] -= 1
            if block_left[b] == 0 and pending:
                start_block(pending.popleft(), max(x.finish for x in blocks[b]), slot_of_block[b])
            continue
        # run this core on while it is still the earliest (saves a heap round trip per event)
        while s.pos < len(s.trace.events) and (not ready or s.issue <= ready[0][0]):
            if not step(s):
                break
        else:
            heapq.heappush(ready, (s.issue, s.index, s))
            continue
        blocked.append(s)
    if blocked:
        names = ", ".join(f"block {s.trace.block} {s.trace.kind}{s.trace.slot}" for s in blocked[:8])
        raise ValueError(f"timeline: cross-core waits that no recorded arrive satisfies ({names})")
    states = [s for b in order for s in blocks[b]]
    cycles = max((s.finish for s in states), default=0.0)
    est = _estimate(kernel, states, cycles, costs, total_gm, total_hbm, flops, kind)
    if hazards:
        hs, (src, dst, eid), fires = hazards[0]
        est.flag_hazards = len(hazards)
        est.first_flag_hazard = (f"block {hs.trace.block} {hs.trace.kind} slot {hs.trace.slot}: "
                                 f"flag ({PIPE_NAMES.get(src, src)} -> {PIPE_NAMES.get(dst, dst)}, {eid}) set at cycle "
                                 f"{fires:.0f} before its previous set was waited on")
    return est


def _wake(blocked: list, ready: list) -> None:
    while blocked:
        s = blocked.pop()
        heapq.heappush(ready, (s.issue, s.index, s))


def _estimate(kernel: str, states: list, cycles: float, costs: CostTable, gm: int, hbm: float, flops: float,
              kind: str) -> Estimate:
    busy, waiting = {}, {}
    if cycles > 0:
        for pipe in REPORT_PIPES:
            having = [s for s in states if s.busy.get(pipe) or s.waiting.get(pipe)]
            if not having:
                continue
            # a pipe's share: its busy time over the time of the physical cores that have it
            span = cycles * min(len(having), _pipe_cores(pipe, kind, costs))
            busy[pipe] = sum(s.busy.get(pipe, 0.0) for s in having) / span
            waiting[pipe] = sum(s.waiting.get(pipe, 0.0) for s in having) / span
    shared = {"hbm": hbm / (costs.hbm_bytes_per_cycle * cycles) if cycles else 0.0,
              "l2": gm / (costs.l2_bytes_per_cycle * cycles) if cycles else 0.0}
    candidates = {**{p: v for p, v in busy.items() if p != "scalar"}, **shared}
    busiest = max(candidates, key=candidates.get) if candidates and max(candidates.values()) > 0 else "none"
    # no unit even half busy: the kernel waits on latencies (flags, mover start-up), not on a unit's rate
    bound = busiest if busiest == "none" or candidates[busiest] >= LATENCY_BOUND_BELOW else "latency"
    segments = {f"block {s.trace.block} {s.trace.kind}{'' if s.trace.kind == 'AIC' else max(s.trace.slot - 1, 0)}":
                s.segments for s in states if s.segments}
    return Estimate(kernel=kernel, cycles=cycles, seconds=cycles / costs.clock_hz, cores=len(states), busy=busy,
                    waiting=waiting, bound=bound, gm_bytes=gm, hbm_bytes=hbm, flops=flops,
                    segments=segments, busiest=busiest)


def _pipe_cores(pipe: str, kind: str, costs: CostTable) -> int:
    """How many physical cores have the pipe (a launch's share of them is what a pipe can be busy on)."""
    if pipe in ("mte1", "cube", "fixpipe"):
        return costs.aic_cores
    if pipe in ("vector", "simt", "mte3"):
        return costs.aiv_cores
    return costs.aic_cores + costs.aiv_cores if kind == "mix" else (
        costs.aiv_cores if kind == "vector" else costs.aic_cores)


# ---- recording switch and the last launch's estimate ------------------------------------------------------
TIMELINE_ENV = "DJ_TWIN_TIMELINE"
_recording = 0
_last = None


def recording_on() -> bool:
    import os

    raw = os.environ.get(TIMELINE_ENV, "")
    return _recording > 0 or (bool(raw) and raw != "0")


class recording:  # noqa: N801 - used as a context manager, like a function
    """Twin launches inside ``with recording():`` record their timeline (their counters' ``estimate()``
    and ``last_estimate()`` give it)."""

    def __enter__(self):
        global _recording
        _recording += 1
        return self

    def __exit__(self, *exc):
        global _recording
        _recording -= 1
        return False


def note_launch(counters) -> None:
    global _last
    _last = counters


def last_estimate(costs: CostTable | None = None) -> Estimate | None:
    """The timeline estimate of the last twin launch that recorded one (``recording()`` or
    ``DJ_TWIN_TIMELINE=1``), or None."""
    return _last.estimate(costs) if _last is not None else None
