"""What ``make ascend-check`` prints and writes for a timeline estimate: the estimated time, the achieved
rate and its share of the unit's peak, the bound pipe, each pipe's busy / waiting share (the
``results.json`` record) and a pipe-occupancy chart (PNG) of a kernel's first block -- the view a
kernel engineer reads in a profiler's timeline. Every figure is an estimate, never a measurement."""
from __future__ import annotations

import struct
import zlib

from .costs import COSTS_950, CostTable
from .timeline import REPORT_PIPES, Estimate

# Chip peak FLOP/s by cube operand class (ascend_check.cube_operand's names).
_OPERAND_WIDTH = {"bf16": "b16", "fp8": "b8", "fp4": "b4", "hf32": "hf32"}


def combine(estimates: list[Estimate]) -> Estimate | None:
    """Launches run one after another: their times add; shares are time-weighted; the bound and the
    busiest unit are the longest launch's."""
    estimates = [e for e in estimates if e is not None]
    if not estimates:
        return None
    if len(estimates) == 1:
        return estimates[0]
    cycles = sum(e.cycles for e in estimates)

    def weighted(attr):
        keys = {k for e in estimates for k in getattr(e, attr)}
        return {k: sum(getattr(e, attr).get(k, 0.0) * e.cycles for e in estimates) / cycles for k in keys}

    main = max(estimates, key=lambda e: e.cycles)
    return Estimate(kernel="+".join(sorted({e.kernel for e in estimates})), cycles=cycles,
                    seconds=sum(e.seconds for e in estimates), cores=max(e.cores for e in estimates),
                    busy=weighted("busy"), waiting=weighted("waiting"), bound=main.bound,
                    gm_bytes=sum(e.gm_bytes for e in estimates), hbm_bytes=sum(e.hbm_bytes for e in estimates),
                    flops=sum(e.flops for e in estimates), segments=main.segments,
                    busiest=main.busiest, flag_hazards=sum(e.flag_hazards for e in estimates),
                    first_flag_hazard=next((e.first_flag_hazard for e in estimates if e.flag_hazards), ""))


def rates(est: Estimate, operand: str = "bf16", costs: CostTable = COSTS_950) -> dict:
    """Achieved TFLOP/s and GB/s (GM bytes) at the estimated time, and the share of the bound unit's peak:
    cube FLOP/s over the chip's peak for the operand class; HBM bytes over HBM bandwidth when HBM is the
    bound (GM bytes over L2 bandwidth for L2); for any other pipe (a mover, the vector unit) its busy share,
    the busiest unit's when the kernel is latency-bound."""
    seconds = est.seconds or float("inf")
    tflops = est.flops / seconds / 1e12
    gbps = est.gm_bytes / seconds / 1e9
    unit = _peak_of(est)
    if unit == "cube":
        peak = costs.cube_flops_per_cycle[_OPERAND_WIDTH.get(operand, "b16")] * costs.aic_cores * costs.clock_hz
        share = est.flops / seconds / peak
    elif unit == "l2":
        share = est.gm_bytes / seconds / (costs.l2_bytes_per_cycle * costs.clock_hz)
    elif unit == "hbm":
        share = est.hbm_bytes / seconds / costs.hbm_bytes_per_s
    else:  # a pipe: how busy it is
        share = est.busy.get(unit, 0.0)
    return {"tflops": tflops, "gbps": gbps, "peak_share": share}


def format_estimate(est: Estimate | None, operand: str = "bf16") -> str:
    if est is None:
        return "timeline: n/a (no recording)"
    r = rates(est, operand)
    busy = ", ".join(f"{p} {est.busy[p] * 100:.0f}%" + (f" (+{est.waiting[p] * 100:.0f}% waiting)"
                                                         if est.waiting.get(p, 0) >= 0.005 else "")
                     for p in REPORT_PIPES if est.busy.get(p))
    hazards = (f" | FLAG HAZARDS: {est.flag_hazards} set(s) of a flag still set, the first: {est.first_flag_hazard}"
               if est.flag_hazards else "")
    return (f"timeline estimate, not a measurement: {est.microseconds:.2f} us, {r['tflops']:.1f} TFLOP/s, "
            f"{r['gbps']:.0f} GB/s, {r['peak_share'] * 100:.0f}% of {_peak_of(est)} peak, {est.bound}-bound | "
            f"busy: {busy}{hazards}")


def _peak_of(est: Estimate) -> str:
    return est.busiest if est.bound == "latency" else est.bound


def record(library: str, kernel: str, shape: str, est: Estimate | None, roofline: dict | None,
           operand: str = "bf16") -> dict:
    """One ``results.json`` object."""
    roof = None
    if roofline:
        roof = max((v for k, v in roofline.items() if k != "bound" and isinstance(v, float)), default=0.0) * 1e6
    out = {"library": library, "kernel": kernel, "shape": shape, "estimated_us": None, "roofline_us": roof,
           "roofline_bound": roofline.get("bound") if roofline else None, "bound": None, "peak_share": None,
           "label": "estimate (CPU twin timeline model, dav-3510 cost table), not a measurement"}
    if est is not None:
        r = rates(est, operand)
        out.update(estimated_us=est.microseconds, bound=est.bound, busiest=est.busiest, peak_share=r["peak_share"],
                   tflops=r["tflops"],
                   gbps=r["gbps"], busy=est.busy, waiting=est.waiting, flag_hazards=est.flag_hazards)
    return out


# ---- pipe chart -------------------------------------------------------------------------------------------
_COLORS = {"scalar": (120, 120, 120), "mte2": (31, 119, 180), "mte1": (23, 190, 207), "cube": (214, 39, 40),
           "fixpipe": (255, 127, 14), "vector": (44, 160, 44), "simt": (148, 103, 189), "mte3": (140, 86, 75)}


def write_chart(est: Estimate, path: str, title: str = "", costs: CostTable = COSTS_950) -> str:
    """A PNG of the first block's cores: one row per (core, pipe), a bar per busy interval. With matplotlib
    the rows are labelled; without it a plain raster is written (rows: each core's pipes in
    ``REPORT_PIPES`` order, colours as ``_COLORS``). Returns the path."""
    rows = [(core, pipe) for core, segs in sorted(est.segments.items()) for pipe in REPORT_PIPES
            if any(s[0] == pipe for s in segs)]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _raster_chart(est, rows, path)
    cycles_per_us = costs.clock_hz / 1e6
    fig, ax = plt.subplots(figsize=(12, 0.35 * max(len(rows), 1) + 1.2))
    for y, (core, pipe) in enumerate(rows):
        spans = [(s, e - s) for p, s, e in est.segments[core] if p == pipe and e > s]
        ax.broken_barh([(s / cycles_per_us, w / cycles_per_us) for s, w in spans], (y - 0.4, 0.8),
                       color=[c / 255 for c in _COLORS[pipe]])
    ax.set_yticks(range(len(rows)), [f"{core} {pipe}" for core, pipe in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"estimated time (us, dav-3510 at {costs.clock_hz / 1e9:.2f} GHz) -- an estimate, "
                  "not a measurement")
    ax.set_title(title or est.kernel)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _raster_chart(est: Estimate, rows: list, path: str, width: int = 1200, row_px: int = 14) -> str:
    height = max(len(rows), 1) * row_px
    img = [bytearray(b"\xff" * (width * 3)) for _ in range(height)]
    scale = (width - 1) / est.cycles if est.cycles else 0.0
    for y, (core, pipe) in enumerate(rows):
        color = bytes(_COLORS[pipe])
        for p, s, e in est.segments[core]:
            if p != pipe:
                continue
            x0, x1 = int(s * scale), max(int(e * scale), int(s * scale) + 1)
            for line in img[y * row_px + 2:(y + 1) * row_px - 2]:
                line[x0 * 3:x1 * 3] = color * (x1 - x0)
    raw = b"".join(b"\x00" + bytes(line) for line in img)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(png)
    return path
