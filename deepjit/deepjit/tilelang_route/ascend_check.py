"""``python -m deepjit.tilelang_route.ascend_check`` (``make ascend-check``): every registered Ascend
kernel that has a reference runs on the CPU twin and is compared with it; each line also gives a
roofline estimate from the twin's counters at dav-3510's published rates.

Kernels come from DeepJIT's samples, the conformance suite and each library's twin-check module, the
module its package registers in the ``deepjit.ascend_checks`` entry point group
(``[project.entry-points."deepjit.ascend_checks"]`` in its pyproject.toml, e.g.
``deep_gemm = "deep_gemm.ascend.twin_checks"``): its ``cases()`` are run -- conformance ``Case`` objects
(a TileLang build + inputs + reference) and ``SourceCase`` objects (a hand-written package ``.asc``
kernel run through the library's own entry point, which compares with its reference; the twin's
counters of every launch it makes give the roofline). The kernels of a library that registers kernel
specs (``deepjit.ascend_kernels``) but no twin-check module are listed as not checked. The run fails
(exit status 1) when any kernel mismatches or errors, after trying them all.
A library's ``published_shapes()`` (``PublishedShape``) then add a roofline-only section at its benchmark
shapes, each run whole on the twin (``--no-published`` skips it); a ``multi_rank`` one spawns rank processes of
its own (deep_ep's EP8 window dispatch/combine, deep_gemm's EP8 Mega MoE: ``--no-multi-rank`` skips those).

The roofline is an estimate, not a measurement: the twin counts bytes by route (GM bytes only on
routes with a GM end; L0C->UB, L1->L0 and UB->L1 on their own units), MACs, vector element-ops and
the SIMT lane ops it can see (simt_api/asc_simt.h); the time each unit would need at its rate (per-core
share for the cores the launch uses) says which unit bounds the kernel. The twin knows nothing of
latency, overlap or bank conflicts, nor of plain ``__gm__`` dereferences or built-in scalar arithmetic
inside SIMT lanes (only asc_ldcg / asc_ldca / asc_stcg / asc_stwt and the vector structs' operators are
counted).

HBM and L2: what a data mover or SIMT lane moves to or from GM goes through the chip's L2 (the ``l2``
unit, at its bandwidth: the 128-byte lines each core requests, a SIMT data-cache hit or a line of the
same burst not again); the HBM bytes are what the twin's L2 model (dj_twin/l2_model.h: an LRU of
dav-3510's 112 MiB, the cores' accesses replayed round-robin) says misses and write-backs cost.
The checks here run with the model on (``DJ_TWIN_L2=1``); counters from a launch without it count
every GM byte as an HBM byte.

Timeline: every launch here also records the twin's per-pipe event stream and schedules it on the
dav-3510 cost table (backends/ascend_twin/timeline.py, costs.py): each line then gives the estimated time,
the achieved TFLOP/s and GB/s, the share of the bound unit's peak, the bound pipe and each pipe's busy (and
flag-waiting) share, with the roofline beside it as the lower bound. The same records go to
``build/ascend-check/results.json`` and a pipe chart of each kernel's first block to
``build/ascend-check/<library>.<kernel>.png``. Estimates, never measurements."""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..backends.ascend_twin import timeline, timeline_report
from .codegen_all import registered as registered_kernels
from .conformance import CASES as CONFORMANCE_CASES
from .conformance import Case, check_outputs
from .conformance.samples import CASES as SAMPLE_CASES


@dataclass(frozen=True)
class Rates:
    """Ascend 950 (dav-3510) rates used by the estimate: whole-chip for cube, HBM and vector; per core
    (bytes or ops per cycle at ``clock_hz``) for the on-chip movers and SIMT lanes."""
    aic_cores: int = 32
    aiv_cores: int = 64
    cube_flops: dict = None  # per operand class, dense FLOP/s for the whole chip (1 MAC = 2 FLOP)
    hbm_bytes_per_s: float = 1.6e12  # Ascend 950PR HBM (HiBL 1.0)
    # L2, per AI core: 100 B/cycle (CANN platform_config Ascend950PR_957bx.ini [AICoreMemoryRates]
    # l2_rate=100; ddr_rate=27 there, i.e. 1.4 TB/s over 32 cores, near the published HBM figure).
    l2_bytes_per_cycle: int = 100
    vector_ops_per_s: float = 64 * 1.65e9 * 64  # 64 FP32 lanes/cycle per AIV at an assumed 1.65 GHz, x64 AIV
    # dav-3510 runs at 1650 MHz in asc-devkit's tests/perf/{fixpipe,mmad}_perf/generate_roofline.py scenarios.
    clock_hz: float = 1.65e9
    # FixPipe, per AIC: 32 FP32 elements (128 B) a cycle L0C -> UB single destination, 64 halves (128 B)
    # L0C -> L1 (asc-devkit tests/perf/fixpipe_perf/generate_roofline.py, dav-3510 scenarios 11-13);
    # L0C -> GM is not measured there: assumed the same 128 B/cycle (estimate).
    fixpipe_bytes_per_cycle: int = 128
    # MTE1 L1 -> L0A/L0B, per AIC: 256 B/cycle (asc-devkit tests/perf/load_data_perf/README.md, dav-3510
    # scenarios 11-14); L1 -> UB assumed the same (estimate).
    mte1_bytes_per_cycle: int = 256
    # UB -> L1 (MTE3, on chip), per AIV: no published figure; 128 B/cycle is an estimate.
    ub_to_l1_bytes_per_cycle: int = 128
    # SIMT, per AIV: one 32-lane warp instruction a cycle (estimate: the docs give warp size 32, no issue rate).
    simt_ops_per_cycle: int = 32

    def cube_rate(self, operand: str) -> float:
        # hf32: 4096 FLOP/cycle x 32 AIC x 1.65 GHz (TileLang 0.1.15's cube_throughput_hf32, costs.py)
        table = self.cube_flops or {"bf16": 432e12, "fp8": 865e12, "fp4": 1730e12, "hf32": 4096 * 32 * 1.65e9}
        return table[operand]


RATES = Rates()
# the twin counts cube MACs by input width (c_api/cube.h); the rate class each width runs at. FP32 operands
# at the HF32 rate, the quickest they run (plain FP32 is 8x slower): the roofline stays a lower bound.
OPERAND_OF_WIDTH = {"b16": "bf16", "fp32": "hf32", "b8": "fp8", "b4": "fp4"}


@dataclass(frozen=True)
class SourceCase:
    """A library's hand-written Ascend kernel (a package ``.asc`` source) at one shape: ``run()`` calls the
    library's entry point on CPU tensors (so the kernel runs on the twin), compares the result with the
    library's reference and returns the mismatches (empty when it matches). ``kind``: the kernel's core
    type ("cube", "vector" or "mix"), for the roofline's core counts."""
    name: str
    kind: str
    run: Callable[[], list]
    known_gap: str = ""


@dataclass(frozen=True)
class PublishedShape:
    """A library kernel's roofline at a published (benchmark) shape: ``run()`` launches the kernel on the
    whole shape on the twin (no correctness check; the L2 model sees every wave, including what later
    waves find in L2 from earlier ones). ``multi_rank``: the kernel runs in rank processes of its own
    (deep_ep's window transport, deep_gemm's Mega MoE), which ``run()`` spawns; it returns the outcome ``run_published`` would
    (``estimate``, ``roofline``, ``operand``), the slowest rank's, plus ``extra`` (fields for results.json)
    and ``note`` (a line to print)."""
    name: str
    kind: str
    run: Callable[[], object]
    multi_rank: bool = False


# The twin's byte counters by route (backends/ascend_twin/kernel.py ROUTES): HBM traffic is only the
# routes with a GM end; each on-chip route is time on the unit that moves it. ``fill`` (asc_fill_*)
# writes on-chip memory and reads nothing: not counted against any unit.
GM_ROUTES = ("gm_to_ub", "gm_to_l1", "ub_to_gm", "l0c_to_gm", "simt_gm_load", "simt_gm_store")
AIC_UNITS = {"fixpipe": (("l0c_to_gm", "l0c_to_ub"), "fixpipe_bytes_per_cycle"),
             "mte1": (("l1_to_l0", "l1_to_ub"), "mte1_bytes_per_cycle")}
AIV_UNITS = {"ub_to_l1": (("ub_to_l1",), "ub_to_l1_bytes_per_cycle")}
UNITS = ("cube", "hbm", "l2", "vector", "simt", "fixpipe", "mte1", "ub_to_l1")


def cube_operand(source: str) -> str:
    """Which cube rate applies, from the operand types the kernel's mmad reads."""
    if "mmad_mx" in source or "blockscaled" in source:
        return "fp4" if "e2m1" in source else "fp8"
    return "bf16"


def roofline(counters: dict | None, kind: str, num_blocks: int, operand: str, rates: Rates = RATES) -> dict | None:
    """Seconds each unit needs for the counted work at its per-core share of the chip's rate, and the
    bounding unit. ``counters``: ``{"routes": {route: bytes}, "cube_macs": n, "vector_ops": n,
    "simt_ops": n}`` summed over the launch's cores, and ``"hbm_bytes"`` / ``"l2_bytes"`` where the L2 model
    ran (without it every GM byte is an HBM byte and there is no ``l2`` unit); None when the twin gave none."""
    if not counters:
        return None
    aic = num_blocks if kind in ("cube", "mix") else 0
    aiv = num_blocks * (2 if kind == "mix" else 1) if kind in ("vector", "mix") else 0
    used_share = min(1.0, max(aic / rates.aic_cores, aiv / rates.aiv_cores))
    routes = counters.get("routes", {})
    gm_bytes = sum(routes.get(r, 0) for r in GM_ROUTES)
    hbm_bytes = counters.get("hbm_bytes", gm_bytes)
    l2_rate = rates.l2_bytes_per_cycle * rates.clock_hz * rates.aic_cores
    times = {
        "cube": 2 * counters.get("cube_macs", 0) / (rates.cube_rate(operand) * aic / rates.aic_cores) if aic else 0.0,
        "hbm": hbm_bytes / (rates.hbm_bytes_per_s * used_share) if used_share else 0.0,
        "vector": counters.get("vector_ops", 0) / (rates.vector_ops_per_s * aiv / rates.aiv_cores) if aiv else 0.0,
        "simt": counters.get("simt_ops", 0) / (rates.simt_ops_per_cycle * rates.clock_hz * aiv) if aiv else 0.0,
    }
    if "hbm_bytes" in counters:
        times["l2"] = counters["l2_bytes"] / (l2_rate * used_share) if used_share else 0.0
    for units, cores in ((AIC_UNITS, aic), (AIV_UNITS, aiv)):
        for unit, (names, rate) in units.items():
            moved = sum(routes.get(r, 0) for r in names)
            times[unit] = moved / (getattr(rates, rate) * rates.clock_hz * cores) if cores else 0.0
    bound = max(times, key=times.get)
    return {**times, "bound": bound if times[bound] > 0 else "none"}


def format_roofline(estimate: dict | None) -> str:
    if estimate is None:
        return "roofline: n/a (no counters)"
    shown = [u for u in UNITS if u in ("cube", "hbm", "vector") or estimate.get(u)]
    parts = ", ".join(f"{u} {estimate[u] * 1e6:.3f} us" for u in shown)
    if estimate["bound"] == "none":  # launched, yet nothing the twin counts (e.g. plain __gm__ loads in lanes)
        return f"roofline: no work counted ({parts}): the twin sees no GM bytes, MACs or vector/SIMT ops"
    return f"roofline estimate, not a measurement: {parts} -> {estimate['bound']}-bound"


def _counters(result) -> dict | None:
    """The twin's launch counters (``LaunchCounters``: per core) summed into the dict ``roofline`` takes."""
    counters = getattr(result, "counters", result)
    if hasattr(counters, "cores"):
        pipes = sorted({p for core in counters.cores for p in core.bytes})
        routes = sorted({r for core in counters.cores for r in core.routes})
        return {"bytes": {p: counters.total_bytes(p) for p in pipes}, "cube_macs": counters.cube_macs,
                "vector_ops": counters.vector_ops, "simt_ops": counters.simt_ops,
                "routes": {r: counters.total_route_bytes(r) for r in routes}, **counters.l2_counts()}
    return counters if isinstance(counters, dict) else None


@contextmanager
def l2_modelled():
    """Twin launches inside the block run the L2 model (their counters carry ``hbm_bytes``)."""
    from ..backends.ascend_twin.kernel import L2_MODEL_ENV

    before = os.environ.get(L2_MODEL_ENV)
    os.environ[L2_MODEL_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(L2_MODEL_ENV, None)
        else:
            os.environ[L2_MODEL_ENV] = before


@contextmanager
def recorded_launches():
    """Every launch of a library's Ascend kernel handle inside the block: ``[(num_blocks, LaunchCounters)]``."""
    from ..library import AscendKernelHandle

    launches, original = [], AscendKernelHandle.launch

    def launch(self, options=None, *args):
        result = original(self, options, *args)
        # the twin's counters know the block count even where a symbolic grid chose it
        static_grid = self.grid if isinstance(self.grid, int) else None  # not a symbolic grid's formula
        launches.append((getattr(result, "num_blocks", None) or (options.num_blocks if options else static_grid),
                         result))
        return result

    AscendKernelHandle.launch = launch
    try:
        yield launches
    finally:
        AscendKernelHandle.launch = original


def _summed_counters(launches) -> tuple[dict | None, int, str]:
    """(counters summed over the launches, the largest block count, the dominant cube operand class)."""
    if not launches:
        return None, 0, "bf16"
    total: dict = {"bytes": {}, "routes": {}, "cube_macs": 0, "vector_ops": 0, "simt_ops": 0, "hbm_bytes": 0,
                   "l2_bytes": 0}
    by_width: dict = {}
    all_modelled = True
    for _, result in launches:
        counters = _counters(result) or {}
        all_modelled = all_modelled and "hbm_bytes" in counters
        for key in ("hbm_bytes", "l2_bytes"):
            total[key] += counters.get(key, 0)
        for key in ("bytes", "routes"):
            for name, n in counters.get(key, {}).items():
                total[key][name] = total[key].get(name, 0) + n
        for key in ("cube_macs", "vector_ops", "simt_ops"):
            total[key] += counters.get(key, 0)
        for width, n in (result.cube_macs_by_input() if hasattr(result, "cube_macs_by_input") else {}).items():
            by_width[width] = by_width.get(width, 0) + n
    if not all_modelled:  # HBM bytes only where every launch ran the L2 model
        del total["hbm_bytes"], total["l2_bytes"]
    operand = OPERAND_OF_WIDTH[max(by_width, key=by_width.get)] if by_width else "bf16"
    return total, max((n for n, _ in launches if n), default=None), operand


def run_published(case: PublishedShape) -> dict:
    """The roofline of one published shape: ``{"seconds", "roofline"}``."""
    if case.multi_rank:  # its ranks recorded their own launches
        start = time.perf_counter()
        outcome = dict(case.run())
        return {**outcome, "seconds": time.perf_counter() - start}
    with l2_modelled(), timeline.recording(), recorded_launches() as launches:
        start = time.perf_counter()
        case.run()
        seconds = time.perf_counter() - start
    if not launches:
        raise RuntimeError("no Ascend kernel was launched")
    counters, num_blocks, operand = _summed_counters(launches)
    return {"seconds": seconds, "roofline": roofline(counters, case.kind, num_blocks, operand),
            "estimate": _launch_estimate(launches), "operand": operand}


def _launch_estimate(launches):
    """The timeline estimate of the launches (one after another), or None where none recorded one."""
    return timeline_report.combine([r.estimate() for _, r in launches if hasattr(r, "estimate")])


def run_source_case(case: SourceCase) -> dict:
    with l2_modelled(), timeline.recording(), recorded_launches() as launches:
        start = time.perf_counter()
        failures = list(case.run())
        seconds = time.perf_counter() - start
    counters, num_blocks, operand = _summed_counters(launches)
    if not launches:
        failures.append("no Ascend kernel was launched")
    estimate = roofline(counters, case.kind, num_blocks, operand)
    return {"ok": not failures, "failures": failures, "seconds": seconds, "roofline": estimate,
            "estimate": _launch_estimate(launches), "operand": operand}


def run_case(case: Case, seed: int = 0) -> dict:
    """Runs one case on the twin; ``{"ok", "failures", "seconds", "roofline"}``."""
    from .twin import lowered_with_grid, run_on_twin

    if isinstance(case, SourceCase):
        return run_source_case(case)

    func = case.build()
    lowered, grid = lowered_with_grid(func)  # run_on_twin reuses it
    source = lowered.source
    args = [t.clone() for t in case.inputs(torch.Generator().manual_seed(seed))]
    expected = case.reference(*[t.clone() for t in args])
    start = time.perf_counter()
    with l2_modelled(), timeline.recording():
        result = run_on_twin(func, *args)
    seconds = time.perf_counter() - start
    failures = check_outputs(case, args, expected)
    operand = cube_operand(source)
    estimate = roofline(_counters(result), case.kind, grid, operand)
    return {"ok": not failures, "failures": failures, "seconds": seconds, "roofline": estimate,
            "estimate": result.estimate() if hasattr(result, "estimate") else None, "operand": operand}


CHECKS_ENTRY_POINT_GROUP = "deepjit.ascend_checks"


def registered_checks() -> list[importlib.metadata.EntryPoint]:
    """The installed packages' twin-check modules (``cases()``, optionally ``published_shapes()``), by library."""
    return sorted(importlib.metadata.entry_points(group=CHECKS_ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _library_modules(module_names: Sequence[str] | None, log):
    """``(library, module)`` for each twin-check module: the ``deepjit.ascend_checks`` entry points, or the
    modules named (``module_names``; one that does not exist is noted and skipped)."""
    if module_names is None:
        for ep in registered_checks():
            yield ep.name, ep.load()
        return
    for name in module_names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                log(f"note: {name} not found; skipped")
                continue
            raise
        yield name.split(".")[0], module


def library_published(module_names: Sequence[str] | None = None, log=print) -> list[tuple[str, PublishedShape]]:
    """``(library, shape)`` for every twin-check module that has ``published_shapes()``."""
    return [(library, shape) for library, module in _library_modules(module_names, log)
            if hasattr(module, "published_shapes") for shape in module.published_shapes()]


def library_cases(module_names: Sequence[str] | None = None, log=print) -> list[tuple[str, Case]]:
    """``(library, case)`` for every twin-check module (default: the ``deepjit.ascend_checks`` entry points).
    Noted as not checked: each kernel of a library whose ``deepjit.ascend_kernels`` entry point has no
    twin-check module beside it, and of a named module with ``kernels()`` but no ``cases()``."""
    found = []
    for library, module in _library_modules(module_names, log):
        if hasattr(module, "cases"):
            found += [(library, c) for c in module.cases()]
        elif hasattr(module, "kernels"):
            _note_unchecked(library, module.kernels(), "no cases()", log)
    if module_names is None:
        checked = {ep.name for ep in registered_checks()}
        for ep in registered_kernels():
            if ep.name not in checked:
                _note_unchecked(ep.name, ep.load()(), f"no {CHECKS_ENTRY_POINT_GROUP} entry point", log)
    return found


def _note_unchecked(library: str, specs, why: str, log) -> None:
    for spec in specs:
        log(f"note: {library}.{spec.name} has no reference registered ({why}); not checked")


def all_cases(log=print) -> list[tuple[str, Case]]:
    return ([("deepjit.samples", c) for c in SAMPLE_CASES] + [("deepjit.conformance", c) for c in CONFORMANCE_CASES]
            + library_cases(log=log))


def _selected(cases: Sequence[tuple[str, Case]], only: str | None) -> list[tuple[str, Case]]:
    return [(lib, c) for lib, c in cases if not only or only in f"{lib}.{c.name}"]


def run(cases: Sequence[tuple[str, Case]], only: str | None = None, log=print) -> list[dict]:
    """Runs every case; raises SystemExit(1) listing the failures after trying them all. A case with a
    ``known_gap`` that fails is listed as XFAIL (not a failure); one that passes is a failure (XPASS: the
    twin has the feature now, drop the note); one with a flag hazard fails like any other."""
    results, failed = [], []
    for library, case in _selected(cases, only):
        label = f"{library}.{case.name}"
        try:
            outcome = run_case(case)
        except Exception as exc:  # noqa: BLE001 - an error is a failure of this kernel; keep going
            outcome = {"ok": False, "failures": [f"error: {exc}"], "seconds": 0.0, "roofline": None}
        est = outcome.get("estimate")
        hazard = est is not None and est.flag_hazards > 0
        if hazard:   # an illegal set_flag (timeline.schedule): the kernel is wrong
            outcome["ok"] = False
            outcome["failures"] = [*outcome.get("failures", []), f"{est.flag_hazards} set(s) of a pipe flag still "
                                   f"set (illegal: CANN cceapi set_flag & wait_flag), the first: {est.first_flag_hazard}"]
        outcome["name"], outcome["known_gap"] = label, bool(case.known_gap) and not hazard
        outcome["library"], outcome["kernel"], outcome["shape"] = library, case.name, "test"
        results.append(outcome)
        if outcome["known_gap"]:   # a twin gap excuses a mismatch, not a flag hazard
            status = "XPASS" if outcome["ok"] else "XFAIL"
        else:
            status = "PASS" if outcome["ok"] else "FAIL"
        log(f"{status} {label} [{case.kind}] {outcome['seconds'] * 1e3:.0f} ms | {format_roofline(outcome['roofline'])}")
        if outcome.get("estimate") is not None:
            log(f"     {timeline_report.format_estimate(outcome['estimate'], outcome.get('operand', 'bf16'))}")
        if status == "XFAIL":
            log(f"     known twin gap: {case.known_gap}")
        elif status == "XPASS":
            failed.append(label)
            log(f"     passes now: remove its known_gap ({case.known_gap})")
        elif status == "FAIL":
            failed.append(label)
            for line in outcome["failures"]:
                log(f"     {line}")
    passed = sum(r["ok"] and not r["known_gap"] for r in results)
    gaps = sum(r["known_gap"] for r in results)
    log(f"{passed} of {len(results) - gaps} Ascend kernel(s) match their reference on the twin, {gaps} known twin "
        f"gap(s) (rooflines are estimates at dav-3510 published rates, not measurements)")
    if failed:
        log("failed: " + ", ".join(failed))
        stop = SystemExit(1)
        stop.results = results  # main() still writes their records
        raise stop
    return results


def run_published_shapes(shapes: Sequence[tuple[str, PublishedShape]], only: str | None = None,
                         log=print, results: list | None = None) -> list[str]:
    """Prints each published shape's roofline and timeline lines (appending their outcomes to ``results``);
    returns the labels of those that raised."""
    selected = _selected(shapes, only)
    if selected:
        log("published shapes (rooflines only: correctness is checked at the small shapes above)")
    failed = []
    for library, case in selected:
        label = f"{library}.{case.name}"
        try:
            outcome = run_published(case)
        except Exception as exc:  # noqa: BLE001 - report it, keep going
            failed.append(label)
            log(f"FAIL {label} [{case.kind}] error: {exc}")
            continue
        log(f"EST  {label} [{case.kind}] {outcome['seconds'] * 1e3:.0f} ms, whole shape | "
            f"{format_roofline(outcome['roofline'])}")
        if outcome.get("estimate") is not None:
            log(f"     {timeline_report.format_estimate(outcome['estimate'], outcome['operand'])}")
            if outcome["estimate"].flag_hazards:   # an illegal set_flag at this shape: the kernel is wrong
                failed.append(label)
        if outcome.get("note"):
            log(f"     {outcome['note']}")
        if results is not None:
            results.append({**outcome, "name": label, "library": library, "kernel": case.name, "shape": "published"})
    return failed


def write_results(results: list, out_dir: str, log=print) -> str:
    """``results.json`` (one record per kernel and shape: timeline_report.record) and a pipe chart per
    kernel with a timeline estimate under ``out_dir``; returns the JSON's path."""
    import json

    os.makedirs(out_dir, exist_ok=True)
    records = []
    for r in results:
        est = r.get("estimate")
        records.append({**timeline_report.record(r.get("library", ""), r.get("kernel", r.get("name", "")),
                                                 r.get("shape", ""), est, r.get("roofline"), r.get("operand", "bf16")),
                        **r.get("extra", {})})
        if est is not None and est.segments:
            name = r.get("name", r.get("kernel", "kernel")).replace("/", "_")
            suffix = "" if r.get("shape") == "test" else f".{r.get('shape')}"
            timeline_report.write_chart(est, os.path.join(out_dir, f"{name}{suffix}.png"),
                                        title=f"{name} ({r.get('shape')} shape): timeline estimate")
    path = os.path.join(out_dir, "results.json")
    with open(path, "w") as f:
        json.dump(records, f, indent=1)
    log(f"wrote {path} and {sum(1 for r in results if r.get('estimate') is not None)} pipe chart(s) "
        f"(estimates, not measurements)")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="only kernels whose '<library>.<name>' contains this text")
    parser.add_argument("--no-published", action="store_true", help="skip the published-shape rooflines")
    parser.add_argument("--no-multi-rank", action="store_true",
                        help="skip the published shapes that spawn rank processes (deep_ep's EP8 window estimates, "
                             "deep_gemm's EP8 Mega MoE)")
    parser.add_argument("--out", default=os.path.join("build", "ascend-check"),
                        help="where results.json and the pipe charts go (default build/ascend-check)")
    args = parser.parse_args(argv)
    results: list = []
    try:
        results += run(all_cases(), only=args.only)
        status = 0
    except SystemExit as exc:
        status = exc.code
        results += getattr(exc, "results", [])
    if not args.no_published:
        shapes = [(lib, s) for lib, s in library_published(log=lambda _: None)
                  if not (args.no_multi_rank and s.multi_rank)]
        failed = run_published_shapes(shapes, only=args.only, results=results)
        if failed:
            print("failed published shapes: " + ", ".join(failed))
            status = 1
    write_results(results, args.out)
    return status


if __name__ == "__main__":
    # Run as the package module, not as ``__main__``: the libraries' cases are instances of the package
    # module's classes (``SourceCase``), which a ``__main__`` copy of this file would not recognise.
    from deepjit.tilelang_route.ascend_check import main as package_main

    sys.exit(package_main())
