"""The per-pipe timeline estimate (backends/ascend_twin/timeline.py) on hand-timed cases: a pure copy, a pure
cube loop, a flag ping-pong between two pipes, two cores contending for HBM and a cross-core hand-off. Each
expected time is worked out here by hand from the test's own cost table (round numbers, so the arithmetic
is checkable), never read from the model."""
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from deepjit.backends.ascend_twin import timeline
from deepjit.backends.ascend_twin.costs import COSTS_950, CostTable, Mover
from deepjit.backends.ascend_twin.timeline import PIPE_M, PIPE_MTE2, PIPE_S, PIPE_V, CoreTrace, Event, vector_event

from .conftest import launch_source

# The test's cost table: GM -> UB 100 B/cycle + 90 cycles, UB -> GM 50 B/cycle + 200 cycles, BF16 cube
# 8192 FLOP/cycle + 8 cycles, a vector instruction 2 cycles, one issue cycle an instruction, and shared
# paths wide enough not to matter (unless a test narrows them); one-cycle ledger bins (exact sharing).
COSTS = replace(COSTS_950, movers={**COSTS_950.movers, "gm_to_ub": Mover(100, 90), "ub_to_gm": Mover(50, 200)},
                cube_flops_per_cycle={"fp32": 512, "hf32": 4096, "b16": 8192, "b8": 16384, "b4": 32768}, cube_latency=8,
                cube_latency_mx=25, cube_latency_fp32=67,
                vector_cycles={"simple": 2.0, "divide": 8.0, "special": 8.0, "load": 1.0, "store": 1.0},
                scalar_issue=1.0,
                l2_bytes_per_cycle_per_core=1e6, port_bytes_per_cycle=1e6, hbm_bytes_per_s=1e6 * COSTS_950.clock_hz, bin_cycles=1,
                cross_core_flag_latency=0.0)

COPY = re.search(r"COPY = r'''(.*?)'''", (Path(__file__).parent / "test_counters.py").read_text(), re.S).group(1)


def _copy(twin_runtime, blocks: int):
    x = torch.arange(128 * blocks, dtype=torch.float32)
    y = torch.zeros(128 * blocks)
    with timeline.recording():
        result = launch_source(twin_runtime, "count_copy", COPY, x, y, num_blocks=blocks)
    assert torch.equal(y, x)
    return result


def test_pure_copy_is_load_then_flag_then_store(twin_runtime):
    result = _copy(twin_runtime, 1)
    assert [e.type for e in result.traces[0].events] == ["move", "set", "wait", "move"]
    est = result.estimate(COSTS)
    # MTE2 streams 512 B (5.12 cycles), its data lands 90 cycles later; the flag releases MTE3 then, which
    # streams 512 B at 50 B/cycle (10.24) and completes 200 cycles later.
    assert est.cycles == pytest.approx(512 / 100 + 90 + 512 / 50 + 200)
    assert est.seconds == pytest.approx(est.cycles / COSTS.clock_hz)
    assert timeline.last_estimate(COSTS).cycles == pytest.approx(est.cycles)


def test_recording_is_off_unless_asked(twin_runtime, monkeypatch):
    monkeypatch.delenv(timeline.TIMELINE_ENV, raising=False)
    x, y = torch.arange(128, dtype=torch.float32), torch.zeros(128)
    result = launch_source(twin_runtime, "count_copy", COPY, x, y, num_blocks=1)
    assert result.traces is None and result.estimate() is None


def test_two_cores_contend_for_hbm(twin_runtime):
    result = _copy(twin_runtime, 2)
    # HBM 50 B/cycle for the chip: alone, each core's load would take 512 / 50 = 10.24 cycles; together the
    # second gets HBM once the first is done (20.48). Its store starts 90 cycles after its load ended and the
    # first core's store (100.24 .. 110.48) is over by then: 512 / 50 + 200 more.
    narrow = replace(COSTS, hbm_bytes_per_s=50 * COSTS.clock_hz)
    assert result.traces[0].hbm_read_share == 1.0 and result.traces[0].hbm_write_share == 1.0
    est = result.estimate(narrow)
    assert est.cycles == pytest.approx(2 * 512 / 50 + 90 + 512 / 50 + 200)
    # with HBM wide enough the two cores overlap completely: one core's time
    assert result.estimate(COSTS).cycles == pytest.approx(512 / 100 + 90 + 512 / 50 + 200)
    assert est.bound == "latency" and est.busiest == "hbm"  # 2 cores cannot keep even a 50 B/cycle HBM half busy


def _trace(events, kind="AIC", block=0, slot=0):
    return CoreTrace(block=block, kind=kind, slot=slot, events=events)


def test_pure_cube_loop_is_back_to_back():
    # 6 mmads of 128 x 128 x 256 BF16: 2 * 128 * 128 * 256 / 8192 = 1024 cycles each, issued one a cycle,
    # the cube runs them back to back; the last result is ready 8 cycles after it ends.
    macs = 128 * 128 * 256
    est = timeline.schedule([_trace([Event("cube", PIPE_M, a=1, n=macs) for _ in range(6)])], "cube", COSTS)
    assert est.cycles == pytest.approx(6 * 1024 + 8)
    assert est.bound == "cube" and est.flops == 6 * 2 * macs
    # FP8 operands run at twice the rate
    est8 = timeline.schedule([_trace([Event("cube", PIPE_M, a=2, n=macs) for _ in range(6)])], "cube", COSTS)
    assert est8.cycles == pytest.approx(6 * 512 + 8)


def _pingpong(rounds: int, double_buffer: bool):
    """MTE2 loads 1000 B, flags the vector pipe, which runs 50 instructions and flags MTE2 back (the next
    load may only then overwrite the buffer) -- or, double-buffered, the load of round i + 1 only waits for
    the vector pass of round i - 1."""
    ev = []
    for i in range(rounds):
        if i >= (2 if double_buffer else 1):
            ev.append(Event("wait", PIPE_MTE2, a=PIPE_V, b=PIPE_MTE2, id=i % 2 if double_buffer else 0))
        ev += [Event("move", PIPE_MTE2, a=0, n=1000),
               Event("set", PIPE_MTE2, a=PIPE_MTE2, b=PIPE_V, id=0),
               Event("wait", PIPE_V, a=PIPE_MTE2, b=PIPE_V, id=0),
               vector_event(simple=50),
               Event("set", PIPE_V, a=PIPE_V, b=PIPE_MTE2, id=i % 2 if double_buffer else 0)]
    for i in range(max(rounds - (2 if double_buffer else 1), 0), rounds):  # drain the flags still set
        ev.append(Event("wait", PIPE_MTE2, a=PIPE_V, b=PIPE_MTE2, id=i % 2 if double_buffer else 0))
    return _trace(ev, kind="AIV")


def test_flag_ping_pong_serialises_two_pipes():
    # one round: load 10 cycles + 90 latency, then 50 vector instructions x 2 cycles = 100; the next load
    # starts when the vector pass ends: 4 rounds of 200 cycles.
    est = timeline.schedule([_pingpong(4, False)], "vector", COSTS)
    assert est.cycles == pytest.approx(4 * (10 + 90 + 100))
    assert est.waiting["vector"] > 0 and est.waiting["mte2"] > 0


def test_double_buffered_ping_pong_overlaps():
    # with two buffers the load of round i + 1 streams while the vector pipe works on round i: the vector
    # pass of round i starts at max(its data: 100 * (i + 1) - issue skew, the previous pass's end). Loads
    # start at 10 * i (MTE2 streams back to back until a buffer is still in use: round 2 waits for pass 0).
    # Pass 0: 100..200, pass 1: 200..300 (its data was there at 110), load 2 starts at 200 (pass 0 end),
    # data at 300, pass 2: 300..400; load 3 starts at 300 (pass 1 end), data 400, pass 3: 400..500.
    est = timeline.schedule([_pingpong(4, True)], "vector", COSTS)
    assert est.cycles == pytest.approx(500)


def test_cross_core_handoff_waits_for_the_arrive():
    # The AIC runs a 1024-cycle mmad and arrives on AIV0's counter 3 from the cube pipe; AIV0 waits on its
    # vector pipe, then runs 10 instructions (20 cycles). The arrive fires when the mmad is complete
    # (1024 + 8, one issue cycle before it: the mmad started at 0).
    aic = _trace([Event("cube", PIPE_M, a=1, n=128 * 128 * 256), Event("intra_arrive", PIPE_M, a=1, id=3)], slot=0)
    aiv = _trace([Event("intra_wait", PIPE_V, id=3), vector_event(simple=10)], kind="AIV", slot=1)
    est = timeline.schedule([aic, aiv], "mix", COSTS)
    assert est.cycles == pytest.approx(1024 + 8 + 20)
    assert est.waiting["vector"] * est.cycles == pytest.approx(1032)  # one AIV, stalled until the arrive


def test_scalar_wait_stalls_issue():
    # a vector result read by the scalar unit (flag V -> S) holds every later issue: the second vector run
    # cannot start before the first one ended (100 cycles) plus one issue cycle.
    ev = [vector_event(simple=50), Event("set", PIPE_V, a=PIPE_V, b=PIPE_S, id=0),
          Event("wait", PIPE_S, a=PIPE_V, b=PIPE_S, id=0), vector_event(simple=50)]
    est = timeline.schedule([_trace(ev, kind="AIV")], "vector", COSTS)
    assert est.cycles == pytest.approx(100 + 100)


def test_blocks_beyond_the_chip_run_in_a_second_wave():
    # 33 cube blocks of one 1024-cycle mmad on 32 AIC: the 33rd starts when a core frees (1032).
    traces = [_trace([Event("cube", PIPE_M, a=1, n=128 * 128 * 256)], block=b) for b in range(33)]
    est = timeline.schedule(traces, "cube", COSTS)
    assert est.cycles == pytest.approx(2 * 1032)


# A source tag of costs.py's docstring, or the words that say there is none and how the number was chosen.
_CITATION = re.compile(r"\[(TL|TL15|TLFA|CANN|DEVKIT|DS|950PR|SIMT)\b|no public source|estimate")


def test_table_cites_a_source_for_every_rate():
    lines = Path(timeline.__file__).with_name("costs.py").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("def _movers"))
    checked = 0
    for i in range(start, len(lines)):
        line = lines[i]
        # skipped: the ledger's bin width (model resolution) and the movers dict (each Mover is checked)
        if not re.search(r"Mover\(|^    \w+: (float|int|dict) = ", line) or re.match(r" +(bin_cycles|movers):", line):
            continue
        # the field's own line, or the comment block directly above it (no other code in between)
        cited = [line]
        j = i - 1
        while j > start and lines[j].lstrip().startswith("#"):
            cited.append(lines[j])
            j -= 1
        assert _CITATION.search("\n".join(cited)), f"costs.py line {i + 1} cites no source: {line.strip()}"
        checked += 1
    assert checked >= 20 and isinstance(COSTS_950, CostTable)


def test_report_record_and_chart(tmp_path):
    from deepjit.backends.ascend_twin import timeline_report

    macs = 128 * 128 * 256
    est = timeline.schedule([_trace([Event("cube", PIPE_M, a=1, n=macs) for _ in range(6)])], "cube", COSTS)
    rec = timeline_report.record("lib", "k", "test", est, {"cube": 1e-6, "hbm": 2e-6, "bound": "hbm"})
    assert rec["estimated_us"] == pytest.approx((6 * 1024 + 8) / COSTS.clock_hz * 1e6)
    assert rec["roofline_us"] == pytest.approx(2.0) and rec["bound"] == "cube"
    # one AIC of 32 busy 6144 of 6152 cycles: its FLOP/s over the chip's BF16 peak
    assert rec["peak_share"] == pytest.approx(6 * 2 * macs / est.seconds / (8192 * 32 * COSTS_950.clock_hz))
    assert "not a measurement" in rec["label"]
    assert "cube-bound" in timeline_report.format_estimate(est)
    path = timeline_report.write_chart(est, str(tmp_path / "k.png"))
    assert Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    both = timeline_report.combine([est, est])
    assert both.cycles == pytest.approx(2 * est.cycles) and both.flops == 2 * est.flops


def _latency_bound(vector_instructions: int):
    """A 1000-byte load (10 cycles + 90 latency), flagged to the vector pipe, which then runs
    ``vector_instructions`` at 2 cycles: no unit is even half busy."""
    return timeline.schedule([_trace([Event("move", PIPE_MTE2, a=0, n=1000),
                                      Event("set", PIPE_MTE2, a=PIPE_MTE2, b=PIPE_V, id=0),
                                      Event("wait", PIPE_V, a=PIPE_MTE2, b=PIPE_V, id=0),
                                      vector_event(simple=vector_instructions)], kind="AIV")], "vector", COSTS)


def test_combined_latency_bound_launches_keep_their_busiest_unit():
    from deepjit.backends.ascend_twin import timeline_report

    short, long = _latency_bound(10), _latency_bound(20)
    assert short.cycles == pytest.approx(10 + 90 + 20) and long.cycles == pytest.approx(10 + 90 + 40)
    assert short.bound == long.bound == "latency" and short.busiest == long.busiest == "vector"
    both = timeline_report.combine([short, long])
    assert both.bound == "latency" and both.busiest == "vector"
    # the vector pipe was busy 20 + 40 of the 120 + 140 cycles
    assert timeline_report.rates(both)["peak_share"] == pytest.approx(60 / 260)
    assert "23% of vector peak" in timeline_report.format_estimate(both)


def test_a_mover_bound_reports_its_busy_share():
    from deepjit.backends.ascend_twin import timeline_report

    # ten 10 000-byte loads back to back: MTE2 busy 1000 of 1090 cycles (the last one's 90-cycle latency)
    est = timeline.schedule([_trace([Event("move", PIPE_MTE2, a=0, n=10_000) for _ in range(10)], kind="AIV")],
                            "vector", COSTS)
    assert est.cycles == pytest.approx(1090) and est.bound == "mte2"
    assert timeline_report.rates(est)["peak_share"] == pytest.approx(1000 / 1090)


def test_vector_loads_stores_and_alu_overlap():
    # 64 loads, 40 ALU ops (2 cycles each here: 80), 10 divides (8 each: 80 more) and 30 stores: the ALU's
    # 160 cycles bound the run; with 200 loads the load path (1 a cycle) does.
    one = timeline.schedule([_trace([vector_event(simple=40, divide=10, load=64, store=30)], kind="AIV")],
                            "vector", COSTS)
    assert one.cycles == pytest.approx(40 * 2 + 10 * 8)
    two = timeline.schedule([_trace([vector_event(simple=40, divide=10, load=200, store=30)], kind="AIV")],
                            "vector", COSTS)
    assert two.cycles == pytest.approx(200)


def test_run_on_twin_exposes_the_estimate(run_on_twin):
    from deepjit.tilelang_route import last_estimate, timeline_recording
    from deepjit.tilelang_route.conformance import BY_NAME

    case = BY_NAME["copy_strided_2d"]
    args = [t.clone() for t in case.inputs(torch.Generator().manual_seed(0))]
    with timeline_recording():
        result = run_on_twin(case.build(), *args)
    est = last_estimate()
    assert est is not None and est.cycles == pytest.approx(result.estimate().cycles) and est.cycles > 0
    assert {e.type for tr in result.traces for e in tr.events} >= {"move"}


# Eight adds, either a chain (each reads the previous sum) or independent (each reads the two inputs),
# then one store of the last; the twin's register dataflow (dj_twin/timeline.h VecDataflow) gives the run
# its depth.
CHAIN = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void vec_chain(__gm__ float* y, int dependent) {
  __ubuf__ float *ub = (__ubuf__ float *)0;
  vector_bool all = asc_create_mask_b32(PAT_ALL);
  vector_float a, b, s;
  asc_duplicate_scalar(a, 1.0f, all);
  asc_duplicate_scalar(b, 2.0f, all);
  s = a;
  for (int i = 0; i < 8; ++i) asc_add(s, dependent ? s : a, b, all);
  asc_storealign(ub, s, 0, all);
}
'''


@pytest.mark.parametrize("dependent", [True, False])
def test_dependent_vector_chain_pays_latency_per_step(twin_runtime, dependent):
    with timeline.recording():
        result = launch_source(twin_runtime, "vec_chain", CHAIN, torch.zeros(64), int(dependent))
    (run,) = [e for e in result.traces[0].events if e.type == "vector"]
    assert timeline.vector_instructions(run)["simple"] == 10 and timeline.vector_instructions(run)["store"] == 1
    # dependent: dup -> 8 chained adds -> store, 10 steps; independent: dup -> any add -> store, 3 steps
    assert run.depth == (10 if dependent else 3)
    costs = replace(COSTS, vector_latency=5.0)
    est = timeline.schedule([_trace([run], kind="AIV")], "vector", costs)
    # the chain pays 5 cycles a step (50); the independent adds overlap, leaving the ALU's 10 x 2 cycles
    # (above their 3 steps x 5)
    assert est.cycles == pytest.approx(10 * 5 if dependent else 10 * 2)


# 64 lanes: each loads its own float of x (asc_ldcg, streamed), the same 32 floats of w (asc_ldca: one
# 128-byte line, which the first lane's first load brings into the data cache and every later load hits)
# and stores its float of y (asc_stcg).
SIMT_LANES = re.search(r"SIMT = r'''(.*?)'''", (Path(__file__).parent / "test_l2_model.py").read_text(),
                       re.S).group(1)


def test_simt_cached_loads_that_hit_take_no_l2_bandwidth(twin_runtime):
    # a launch that records a timeline runs the L2 model whether DJ_TWIN_L2 is set or not (launch.h)
    w, x, y = torch.arange(32.0), torch.arange(64.0), torch.zeros(64)
    with timeline.recording():
        result = launch_source(twin_runtime, "l2_simt", SIMT_LANES, w, x, y, num_blocks=1)
    assert torch.equal(y, x + w.sum())
    # the counters keep every byte a lane asked for: 64 x (4 + 32 x 4 + 4)
    routes = result.counters["routes"]
    assert routes["simt_gm_load"] + routes["simt_gm_store"] == 64 * (4 + 32 * 4 + 4)
    # the timeline puts through L2 only what leaves the core: x and y by their bytes (64 x 4 each) and w's one
    # line once (asc_ldca reads the Data Cache first, L2 only on a miss: asc-devkit asc_ldca.md); before,
    # all 64 x 32 x 4 bytes of w
    simt = [e for e in result.traces[0].events if e.type == "simt"]
    assert sum(e.m for e in simt) == 64 * 4 + 128 + 64 * 4
    # hand-timed: SIMT GM bytes at 10 B/cycle, lane ops free, shared paths wide: 640 / 10 cycles
    costs = replace(COSTS, simt_gm_bytes_per_cycle=10, simt_lane_ops_per_cycle=1e9)
    assert result.estimate(costs).cycles == pytest.approx((64 * 4 + 128 + 64 * 4) / 10)


# 32 lanes each stream one float of w (asc_ldcg: one 128-byte line in all), then read it again through the
# data cache (asc_ldca).
SIMT_STREAM_THEN_CACHED = r'''
#include <c_api/asc_simd.h>
#include <simt_api/asc_simt.h>
__simt_vf__ __launch_bounds__(32) inline void lanes(__gm__ float* w, __gm__ float* y) {
  const uint32_t i = threadIdx.x;
  const float a = asc_ldcg(w + i);
  asc_stcg(y + i, a + asc_ldca(w + i));
}
extern "C" __global__ __vector__ void stream_then_cached(__gm__ float* w, __gm__ float* y) {
  asc_vf_call<lanes>(cce::dim3(32), w, y);
}
'''


def test_streamed_loads_leave_the_data_cache_alone(twin_runtime):
    """asc_ldcg bypasses the SIMT data cache (asc-devkit: __ldg with L1CacheType::NON_CACHEABLE), so the
    asc_ldca of the same line that follows misses once (one line from L2) and then hits: 128 (streamed
    loads) + 128 (the miss) + 128 (streamed stores) bytes through L2."""
    w, y = torch.arange(32.0), torch.zeros(32)
    with timeline.recording():
        result = launch_source(twin_runtime, "stream_then_cached", SIMT_STREAM_THEN_CACHED, w, y, num_blocks=1)
    assert torch.equal(y, 2 * w)
    simt = [e for e in result.traces[0].events if e.type == "simt"]
    assert sum(e.m for e in simt) == 3 * 128


# SIMT lanes' plain work: 64 lanes, each N times reading a float of UB through a plain pointer and
# multiply-adding it (declared: DJ_SIMT_WORK, one ALU instruction and one UB load an iteration) and adding a
# float2 (counted by the twin itself: two lane operations), then storing its sum to UB (declared: one store).
SIMT_WORK = r'''
#include <c_api/asc_simd.h>
#include <simt_api/asc_simt.h>
__simt_vf__ __launch_bounds__(64) inline void work(__ubuf__ float* ub, uint32_t n) {
  const uint32_t i = threadIdx.x;
  float sum = 0.0f;
  float2 acc = make_float2(0.0f, 0.0f);
  for (uint32_t k = 0; k < n; ++k) {
    DJ_SIMT_WORK(1, 1, 0);
    sum += 2.0f * ub[(i + k) % 64];
    acc = acc + make_float2(1.0f, 1.0f);
  }
  DJ_SIMT_WORK(0, 0, 1);
  ub[64 + i] = sum + acc.x + acc.y;
}
extern "C" __global__ __vector__ void simt_work(__gm__ float* out, uint32_t n) {
  __ubuf__ float* ub = (__ubuf__ float*)0;
  for (int i = 0; i < 64; ++i) ub[i] = 1.0f;
  asc_vf_call<work>(cce::dim3(64), ub, n);
  asc_sync();
  asc_copy_ub2gm(out, ub + 64, 64 * sizeof(float));
}
'''


# n = 16384: 2^20 UB loads in one VF, past half the packed field (dj_twin/timeline.h): the run goes on in a
# second event, the counts add up
@pytest.mark.parametrize("n", [16, 64, 16384])
def test_simt_lane_arithmetic_and_ub_accesses_cost_per_warp_instruction(twin_runtime, n):
    out = torch.zeros(64)
    with timeline.recording():
        result = launch_source(twin_runtime, "simt_work", SIMT_WORK, out, n)
    assert torch.equal(out, torch.full((64,), 4.0 * n))
    runs = [e for e in result.traces[0].events if e.type == "simt"]
    assert len(runs) == (1 if n < 16384 else 3)
    # per lane: n declared ALU + 2n float2 element ops; n UB loads and one UB store
    assert sum(e.n for e in runs) == 64 * 3 * n and sum(e.m for e in runs) == 0
    memory = [timeline.simt_memory(e) for e in runs]
    assert {k: sum(m[k] for m in memory) for k in memory[0]} == {"ub_load": 64 * n, "ub_store": 64, "gm": 0}
    # hand-timed: 32 lane instructions a cycle (one warp instruction), every kind alike: the two warps
    # issue 2 x (3n ALU + n loads + 1 store) warp instructions
    costs = replace(COSTS, simt_lane_ops_per_cycle=32)
    assert timeline.schedule([_trace(runs, kind="AIV")], "simt", costs).cycles == pytest.approx(2 * (4 * n + 1))


# One declaration past the packed 20-bit fields (dj_twin/timeline.h): split across events, the counts add up.
SIMT_BIG = r'''
#include <c_api/asc_simd.h>
#include <simt_api/asc_simt.h>
__simt_vf__ __launch_bounds__(32) inline void big(__ubuf__ float* ub) {
  DJ_SIMT_WORK(5, 3u << 20, (1u << 19) + 7);
  ub[threadIdx.x] = 1.0f;
}
extern "C" __global__ __vector__ void simt_big(__gm__ float* out) {
  __ubuf__ float* ub = (__ubuf__ float*)0;
  asc_vf_call<big>(cce::dim3(32), ub);
  asc_sync();
  asc_copy_ub2gm(out, ub, 32 * sizeof(float));
}
'''


def test_one_large_simt_declaration_is_counted_whole(twin_runtime):
    out = torch.zeros(32)
    with timeline.recording():
        result = launch_source(twin_runtime, "simt_big", SIMT_BIG, out)
    assert torch.equal(out, torch.ones(32))
    runs = [e for e in result.traces[0].events if e.type == "simt"]
    memory = [timeline.simt_memory(e) for e in runs]
    assert sum(e.n for e in runs) == 32 * 5
    assert {k: sum(m[k] for m in memory) for k in memory[0]} == {
        "ub_load": 32 * (3 << 20), "ub_store": 32 * ((1 << 19) + 7), "gm": 0}


def test_simt_event_cost_scales_with_each_instruction_kind():
    costs = replace(COSTS, simt_lane_ops_per_cycle=32, simt_gm_bytes_per_cycle=1e9)
    for n in (32, 320, 3200):
        for kind in ("alu", "ub_load", "ub_store", "gm"):
            e = timeline.simt_event(**{kind: n})
            # n lane instructions of any kind: n / 32 warp instructions, one a cycle
            assert timeline.schedule([_trace([e], kind="AIV")], "simt", costs).cycles == pytest.approx(n / 32)


def test_simt_memory_fields_unpack_at_their_widths():
    e = timeline.simt_event(ub_load=(1 << 19) + 3, ub_store=(1 << 19) + 5, gm=(1 << 23) + 7)
    assert timeline.simt_memory(e) == {"ub_load": (1 << 19) + 3, "ub_store": (1 << 19) + 5, "gm": (1 << 23) + 7}


def _runahead(rounds: int, own_ids: bool):
    """MTE2 loads 100 B a round and flags the vector pipe, which then runs a 50-instruction pass per round;
    every set precedes every wait in program order. With one flag id the second set finds the flag still
    set: a hazard. With an id a round, none."""
    ev = []
    for i in range(rounds):
        ev += [Event("move", PIPE_MTE2, a=0, n=100),
               Event("set", PIPE_MTE2, a=PIPE_MTE2, b=PIPE_V, id=i if own_ids else 0)]
    for i in range(rounds):
        ev += [Event("wait", PIPE_V, a=PIPE_MTE2, b=PIPE_V, id=i if own_ids else 0), vector_event(simple=50)]
    return _trace(ev, kind="AIV")


def test_a_flag_set_again_before_its_wait_is_a_hazard():
    # CANN's set_flag rule: a second set of a flag still set is illegal (the bit is set once; the second
    # wait never returns). Both sets precede both waits in program order here.
    est = timeline.schedule([_runahead(2, own_ids=False)], "vector", COSTS)
    assert est.flag_hazards == 1 and "(mte2 -> vector, 0)" in est.first_flag_hazard
    assert timeline.schedule([_runahead(2, own_ids=True)], "vector", COSTS).flag_hazards == 0


def test_a_set_that_fires_before_the_last_wait_took_the_flag_is_a_hazard():
    # In program order set, wait, set, wait -- legal as the functional run sees it -- but MTE2 runs ahead:
    # the second set fires at 2 * 10 + 90 = 110 while the vector pipe, busy with a 200-cycle pass issued
    # first, takes the first set only at 200.
    ev = [vector_event(simple=100),
          Event("move", PIPE_MTE2, a=0, n=1000), Event("set", PIPE_MTE2, a=PIPE_MTE2, b=PIPE_V, id=0),
          Event("wait", PIPE_V, a=PIPE_MTE2, b=PIPE_V, id=0),
          Event("move", PIPE_MTE2, a=0, n=1000), Event("set", PIPE_MTE2, a=PIPE_MTE2, b=PIPE_V, id=0),
          Event("wait", PIPE_V, a=PIPE_MTE2, b=PIPE_V, id=0)]
    est = timeline.schedule([_trace(ev, kind="AIV")], "vector", COSTS)
    assert est.flag_hazards == 1
    # the ping-pongs above hand each flag back before it is set again: no hazard
    assert timeline.schedule([_pingpong(4, False)], "vector", COSTS).flag_hazards == 0


def test_combined_launches_keep_their_flag_hazards():
    # a case of several launches (ascend_check combines them) fails on a hazard in any one of them
    from deepjit.backends.ascend_twin import timeline_report
    bad = timeline.schedule([_runahead(2, own_ids=False)], "vector", COSTS)
    good = timeline.schedule([_runahead(2, own_ids=True)], "vector", COSTS)
    both = timeline_report.combine([good, bad, bad])
    assert both.flag_hazards == 2 and both.first_flag_hazard == bad.first_flag_hazard
    assert timeline_report.combine([good, good]).flag_hazards == 0


# One mmad of each cost class on zero-filled L0A / L0B: BF16 with M 4 (charged as 16 rows), FP32 with K 60
# (FP32's K group is 1: charged as 60), the same with the HF32 bit set (K group 8: charged as 64), an MX
# FP8 mmad of 16 x 64 x 16 after its A scales (two 32-byte fractals) are copied L1 -> L0A, BF16 with K and N
# 20 (K to the 16-element group and N to 16: 32 each), and an MX FP4 mmad of 16 x 128 x 32 (its larger of M
# and N, 32, charged as 48).
CUBE_MODES = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __cube__ void cube_modes(__gm__ float* y) {
  __ca__ bfloat16_t* a = (__ca__ bfloat16_t*)0;
  __cb__ bfloat16_t* b = (__cb__ bfloat16_t*)0;
  __cc__ float* acc = (__cc__ float*)0;
  asc_fill_value_config fill;
  fill.repeat = 1;
  fill.blk_num = 64;  // 64 fractals of 512 B: 32 KiB each
  fill.dst_gap = 0;
  asc_fill_l0a(a, uint32_t(0), fill);
  asc_fill_l0b(b, uint32_t(0), fill);
  asc_sync_notify(PIPE_MTE1, PIPE_M, 0);
  asc_sync_wait(PIPE_MTE1, PIPE_M, 0);
  asc_mmad(acc, a, b, 4, 256, 64, 0, true, false, true);
  asc_mmad(acc, (__ca__ float*)a, (__cb__ float*)b, 16, 60, 16, 0, true, false, true);
  asc_enable_hf32();
  asc_mmad(acc, (__ca__ float*)a, (__cb__ float*)b, 16, 60, 16, 0, true, false, true);
  asc_disable_hf32();
  asc_copy_l12l0a_mx(uint64_t(uintptr_t(a)) / 16, (__cbuf__ fp8_e8m0_t*)0, 0, 0, 1, 2, 2, 2);
  asc_mmad_mx(acc, (__ca__ fp8_e4m3fn_t*)a, (__cb__ fp8_e4m3fn_t*)b, 16, 64, 16, 0, true, false, true);
  asc_mmad(acc, a, b, 16, 20, 20, 0, true, false, true);
  asc_mmad_mx(acc, (__ca__ fp4x2_e2m1_t*)a, (__cb__ fp4x2_e2m1_t*)b, 16, 128, 32, 0, true, false, true);
}
'''


def test_each_mmad_is_charged_its_padded_geometry_at_its_modes_rate(twin_runtime):
    with timeline.recording():
        result = launch_source(twin_runtime, "cube_modes", CUBE_MODES, torch.zeros(8))
    events = result.traces[0].events
    cubes = [e for e in events if e.type == "cube"]
    # (width, mode, MACs, charged MACs): M 4 -> 16; FP32 K 60 as is; HF32 K 60 -> 64; MX max(M, N) -> 48
    assert [(timeline.WIDTH_CLASSES[e.a], timeline.CUBE_MODES[e.b], e.n, e.m) for e in cubes] == [
        ("b16", "plain", 4 * 256 * 64, 16 * 256 * 64), ("fp32", "plain", 16 * 60 * 16, 16 * 60 * 16),
        ("fp32", "hf32", 16 * 60 * 16, 16 * 64 * 16), ("b8", "mx", 16 * 64 * 16, 16 * 48 * 64),
        ("b16", "plain", 16 * 20 * 20, 16 * 32 * 32), ("b4", "mx", 16 * 128 * 32, 16 * 48 * 128)]
    # the 950's table (TileLang 0.1.15's estimate_latency.h, copied here by hand): BF16 8192 FLOP/cycle,
    # FP32 512, HF32 4096, FP8 16384, MX FP4 32768; completion 8, FP32 / HF32 67, MX 25
    assert COSTS_950.cube_flops_per_cycle == {"fp32": 512, "hf32": 4096, "b16": 8192, "b8": 16384, "b4": 32768}
    assert (COSTS_950.cube_latency, COSTS_950.cube_latency_fp32, COSTS_950.cube_latency_mx) == (8, 67, 25)
    assert [timeline.cube_cycles(e, COSTS_950) for e in cubes] == [64, 60, 8, 6, 4, 6]
    assert [timeline.cube_latency(e, COSTS_950) for e in cubes] == [8, 67, 67, 25, 8, 25]
    cubes = cubes[:4]
    (scales,) = [e for e in events if e.type == "move" and timeline.MOVE_VARIANTS[e.b] == "mx_scales"]
    assert timeline.ROUTES[scales.a] == "l1_to_l0" and scales.n == 64
    # the MX scale path: 1 issue cycle + 64 B at 32 B/cycle, usable 28 cycles later
    assert COSTS_950.movers["l1_to_l0_sf"] == Mover(32, 28, issue=1)
    assert timeline.schedule([_trace([scales])], "cube", COSTS).cycles == pytest.approx(1 + 2 + 28)
    # alone, back to back from cycle 0, the four end at 64, 124, 132 and 138; the kernel is done when the
    # last result is usable: the HF32 mmad's (132 + 67), later than the MX one's (138 + 25)
    est = timeline.schedule([_trace(cubes)], "cube", COSTS)
    assert est.cycles == pytest.approx(132 + 67)
    assert est.flops == 2 * sum(e.n for e in cubes)  # TFLOP/s counts the work done, not the padding


# 32 rows of 64 bytes: GM -> UB from rows 128 bytes apart in GM (strided), UB -> GM into rows 128 bytes apart
# (strided) and into rows 64 bytes apart (one contiguous run).
STRIDED = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __vector__ void strided_rows(__gm__ uint8_t* x, __gm__ uint8_t* y) {
  __ubuf__ uint8_t* ub = (__ubuf__ uint8_t*)0;
  asc_copy_gm2ub_align(ub, x, 32, 64, 0, 0, 0, asc_load_l2_cache_mode::NORMAL_FIRST_VICTIM, 128, 64);
  asc_sync_notify(PIPE_MTE2, PIPE_MTE3, 0);
  asc_sync_wait(PIPE_MTE2, PIPE_MTE3, 0);
  asc_copy_ub2gm_align(y, ub, 32, 64, asc_store_l2_cache_mode::NORMAL_FIRST_VICTIM, 128, 64);
  asc_copy_ub2gm_align(y + 4096, ub, 32, 64, asc_store_l2_cache_mode::NORMAL_FIRST_VICTIM, 64, 64);
}
'''


def _move(route: str, variant: str, n: int, width: int) -> Event:
    return Event("move", timeline.PIPE_MTE2, a=timeline.ROUTES.index(route),
                 b=timeline.MOVE_VARIANTS.index(variant), n=n, m=width)


def test_strided_rows_are_costed_by_their_width(twin_runtime):
    x = torch.arange(4096, dtype=torch.int32).to(torch.uint8)
    y = torch.zeros(4096 + 2048, dtype=torch.uint8)
    with timeline.recording():
        result = launch_source(twin_runtime, "strided_rows", STRIDED, x, y)
    assert torch.equal(y[:4096].view(32, 128)[:, :64], x.view(32, 128)[:, :64])
    assert torch.equal(y[4096:].view(32, 64), x.view(32, 128)[:, :64])
    moves = [(timeline.ROUTES[e.a], timeline.MOVE_VARIANTS[e.b], e.n, e.m) for e in result.traces[0].events
             if e.type == "move"]
    assert moves == [("gm_to_ub", "strided", 2048, 64), ("ub_to_gm", "strided", 2048, 64),
                     ("ub_to_gm", "plain", 2048, 0)]
    rate = {name: timeline.move_cost(_move(*m), COSTS_950) for name, m in {
        "gm narrow": ("gm_to_ub", "strided", 2048, 64), "gm 192": ("gm_to_ub", "strided", 2048, 192),
        "gm wide": ("gm_to_ub", "strided", 2048, 256), "out narrow": ("ub_to_gm", "strided", 2048, 64),
        "out 128": ("ub_to_gm", "strided", 2048, 128), "out 256": ("ub_to_gm", "strided", 2048, 256),
        "out 512": ("ub_to_gm", "strided", 2048, 512), "l1 64": ("ub_to_l1", "strided", 2048, 64),
        "l1 200": ("ub_to_l1", "strided", 2048, 200), "l1 plain": ("ub_to_l1", "plain", 2048, 0)}.items()}
    # GM -> UB: 50 B/cycle below one 128-byte transaction; 192 bytes fill 1.5 of 2 transactions: 102 x 0.75;
    # from two, 100; all with the strided base latency 75
    assert [rate[k].bytes_per_cycle for k in ("gm narrow", "gm 192", "gm wide")] == [50, 76.5, 100]
    assert {rate[k].latency for k in ("gm narrow", "gm 192", "gm wide")} == {75}
    # UB -> GM: 40 below a transaction (latency 440), 86 at one, 110 from two, the port's 115 from four
    assert [rate[k].bytes_per_cycle for k in ("out narrow", "out 128", "out 256", "out 512")] == [40, 86, 110, 115]
    assert [rate[k].latency for k in ("out narrow", "out 128")] == [440, 180]
    # UB -> L1 rows apart: 3/4 of the width below 160 bytes, the width above, 256 when contiguous
    assert [rate[k].bytes_per_cycle for k in ("l1 64", "l1 200", "l1 plain")] == [48, 200, 256]
    # the launch: the load (issue at 0: 2048 / 50 cycles, usable 75 later) hands over to MTE3 through the
    # flag, then the strided store (2048 / 40) and the contiguous one (2048 / 115) run back to back; the
    # kernel ends when the strided store's data is in GM, 440 cycles after it (the contiguous one's 180 after
    # its end come earlier)
    est = timeline.schedule([_trace(result.traces[0].events, kind="AIV")], "vector",
                            replace(COSTS, movers=COSTS_950.movers))
    load_done = 2048 / 50 + 75
    assert est.cycles == pytest.approx(load_done + 2048 / 40 + 440)


# A 16 x 32 FP32 L0C tile into both AIVs' UB: split by rows (each AIV 8 rows of 32 floats: 128-byte ND rows),
# by columns (16 floats: 64-byte rows), then by rows as NZ (no ND rows); and each AIV's UB -> L1 copies of
# four 64-byte rows, 64 bytes apart in UB (strided) and back to back (one run).
DUAL_FIXPIPE = r'''
#include <c_api/asc_simd.h>
extern "C" __global__ __mix__(1, 2) void dual_fixpipe(__gm__ float* x) {
  if ASC_IS_AIC {
    __ubuf__ float *ub = (__ubuf__ float *)0;
    __cc__ float *c = (__cc__ float *)0;
    asc_copy_l0c2ub(ub, c, 32, 16, 32, 16, 0, asc_dual_dst_mode::SPLIT_M, asc_unit_flag_mode::DISABLE,
                    asc_quant_mode::NoQuant, asc_relu_pre_mode::NoRelu, false, true, false, 0);
    asc_copy_l0c2ub(ub, c, 32, 16, 16, 16, 0, asc_dual_dst_mode::SPLIT_N, asc_unit_flag_mode::DISABLE,
                    asc_quant_mode::NoQuant, asc_relu_pre_mode::NoRelu, false, true, false, 0);
    asc_copy_l0c2ub(ub, c, 32, 16, 32, 16, 0, asc_dual_dst_mode::SPLIT_M, asc_unit_flag_mode::DISABLE,
                    asc_quant_mode::NoQuant, asc_relu_pre_mode::NoRelu, false, false, false, 0);
  }
  if ASC_IS_AIV {
    const uint32_t sub = asc_get_sub_block_id();
    __cbuf__ uint8_t *l1 = (__cbuf__ uint8_t *)0 + sub * 1024;
    asc_copy_ub2l1(l1, (__ubuf__ uint8_t *)0, 4, 2, 2, 0);
    asc_copy_ub2l1(l1 + 512, (__ubuf__ uint8_t *)0, 4, 2, 0, 0);
  }
}
'''


def test_a_dual_destination_fixpipe_and_ub_to_l1_rows(twin_runtime):
    with timeline.recording():
        result = launch_source(twin_runtime, "dual_fixpipe", DUAL_FIXPIPE, torch.zeros(1))
    (aic,) = [tr for tr in result.traces if tr.kind == "AIC"]
    moves = [(timeline.ROUTES[e.a], timeline.MOVE_VARIANTS[e.b], e.n, e.m) for e in aic.events if e.type == "move"]
    assert moves == [("l0c_to_ub", "dual", 2048, 128), ("l0c_to_ub", "dual", 2048, 64),
                     ("l0c_to_ub", "dual", 2048, 0)]
    rows, cols, nz = (timeline.move_cost(e, COSTS_950) for e in aic.events if e.type == "move")
    # both halves through the endpoint at min(256, 2 x each AIV's row) B/cycle, 128 for NZ; 2 issue cycles,
    # usable 55 cycles after (TileLang 0.1.15: fixpipe_dual_bandwidth 256, _width_scale 2,
    # _unknown_width_bandwidth 128, fixpipe_dual_base_latency 55)
    assert [(m.bytes_per_cycle, m.latency, m.issue) for m in (rows, cols, nz)] == [(256, 55, 2), (128, 55, 2),
                                                                                   (128, 55, 2)]
    est = timeline.schedule([_trace(aic.events[:1])], "cube", COSTS)
    assert est.cycles == pytest.approx(2 + 2048 / 256 + 55)
    # a plain single-destination copy keeps FixPipe's 128 B/cycle
    assert timeline.move_cost(_move("l0c_to_ub", "plain", 2048, 0), COSTS_950).bytes_per_cycle == 128
    aiv0 = next(tr for tr in result.traces if tr.kind == "AIV" and tr.slot == 1)
    l1 = [(timeline.MOVE_VARIANTS[e.b], e.n, e.m) for e in aiv0.events if e.type == "move"]
    assert l1 == [("strided", 256, 64), ("plain", 256, 0)]
    # the two AIVs' strided copies share their AI core's UB -> L1 path (256 B/cycle) at 48 B/cycle between
    # them: each 256-byte copy takes 256 / 48 x 2 cycles when both run at once
    aivs = [tr for tr in result.traces if tr.kind == "AIV"]
    strided = [_trace([next(e for e in tr.events if e.type == "move")], kind="AIV", slot=tr.slot) for tr in aivs]
    est = timeline.schedule(strided, "mix", replace(COSTS, movers=COSTS_950.movers))
    assert est.cycles == pytest.approx(2 * 256 / 48 + COSTS_950.movers["ub_to_l1"].latency, rel=0.02)
