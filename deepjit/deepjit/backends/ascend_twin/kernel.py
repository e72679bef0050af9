"""A twin kernel: the shared object the twin toolchain built, launched like ``AscendKernel`` with
``(AscendLaunchOptions, *args)``. Tensor arguments are CPU tensors; each is copied into guarded
global memory for the launch and copied back only when the launch succeeds. A failure raises
``TwinLaunchError`` naming kernel, block, core, buffer, offset and operation."""
from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass, field

from ...descriptors import check_layout
from ...errors import DeepJITError
from ...kernel_args import KernelArgs
from ..args import pack_ascend_args
from ..ascend.options import AscendLaunchOptions
from ..params import read_declared_types
from . import windows
from .device import PROPERTIES
from .pipes import GM_READS, GM_WRITES, PIPES, ROUTES

BINARY = "kernel.so"
ABI_VERSION = 5
WAIT_TIMEOUT_ENV = "DJ_TWIN_WAIT_TIMEOUT"
L2_MODEL_ENV = "DJ_TWIN_L2"          # "1": replay each launch's GM lines through the L2 model
L2_BYTES_ENV = "DJ_TWIN_L2_BYTES"    # the model's L2 size (default dav-3510's 112 MiB)
DEFAULT_WAIT_TIMEOUT_SECS = 10.0
# One lock per loaded library (its .so holds one recording switch and one last-launch timeline for every
# TwinKernel of it): switching recording, launching and reading the events back happen under it, so two
# threads launching at once never read each other's recording.
_LIBRARY_LOCKS: dict = {}
_LIBRARY_LOCKS_GUARD = threading.Lock()
_ERR_LEN = 4096


class TwinLaunchError(DeepJITError):
    """A twin launch stopped: out-of-bounds access, sync error, timeout or a not-implemented mode."""


@dataclass
class CoreCounters:
    block: int
    core: str                     # "AIC", "AIV0", "AIV1" (a vector-only kernel's cores are "AIV0")
    bytes: dict = field(default_factory=dict)  # pipe name -> bytes moved
    cube_macs: int = 0
    cube_macs_by_input: dict = field(default_factory=dict)  # "fp32" / "b16" / "b8" / "b4" -> MACs
    vector_ops: int = 0
    wait_seconds: float = 0.0
    routes: dict = field(default_factory=dict)  # route name (ROUTES) -> bytes
    simt_ops: int = 0
    # the L2 model's HBM bytes (DJ_TWIN_L2=1, dj_twin/l2_model.h): misses this core caused, lines it wrote back
    hbm_read: int = 0
    hbm_write: int = 0
    l2_bytes: int = 0  # what it moved to or from L2 (dj_twin/runtime.h touch_gm: lines, streaming SIMT bytes)
    l2_modelled: bool = False


@dataclass
class LaunchCounters:
    """What one launch did, per core and in total (for roofline estimates, never timings). ``traces``:
    each core's recorded events when the launch recorded a timeline (``timeline.recording()`` or
    ``DJ_TWIN_TIMELINE=1``), else None; ``estimate()`` schedules them (``timeline.schedule``)."""
    kernel: str
    num_blocks: int
    cores: list
    kind: str = "vector"
    traces: list | None = None
    _estimate: object = field(default=None, repr=False)

    def estimate(self, costs=None):
        """The timeline estimate of this launch (``timeline.Estimate``), or None without a recording."""
        if self.traces is None:
            return None
        from .timeline import schedule
        if costs is not None:
            return schedule(self.traces, self.kind, costs, kernel=self.kernel)
        if self._estimate is None:
            self._estimate = schedule(self.traces, self.kind, kernel=self.kernel)
        return self._estimate

    def total_bytes(self, pipe: str) -> int:
        return sum(c.bytes.get(pipe, 0) for c in self.cores)

    @property
    def cube_macs(self) -> int:
        return sum(c.cube_macs for c in self.cores)

    @property
    def vector_ops(self) -> int:
        return sum(c.vector_ops for c in self.cores)

    @property
    def simt_ops(self) -> int:
        return sum(c.simt_ops for c in self.cores)

    def total_route_bytes(self, route: str) -> int:
        return sum(c.routes.get(route, 0) for c in self.cores)

    @property
    def wait_seconds(self) -> float:
        return sum(c.wait_seconds for c in self.cores)

    @property
    def l2_modelled(self) -> bool:
        return bool(self.cores) and all(c.l2_modelled for c in self.cores)

    @property
    def hbm_bytes(self) -> int | None:
        """HBM bytes the L2 model counted (reads that missed + write-backs); None when it was off."""
        return sum(c.hbm_read + c.hbm_write for c in self.cores) if self.l2_modelled else None

    @property
    def l2_bytes(self) -> int | None:
        """Bytes the cores moved to or from L2 (L2 model: a data mover's 128-byte lines once per instruction,
        streaming SIMT accesses by their bytes, cached SIMT loads that missed the data cache as lines); None
        when it was off."""
        return sum(c.l2_bytes for c in self.cores) if self.l2_modelled else None

    def l2_counts(self) -> dict:
        """``{"hbm_bytes", "l2_bytes"}`` where the L2 model ran, else empty."""
        return {"hbm_bytes": self.hbm_bytes, "l2_bytes": self.l2_bytes} if self.l2_modelled else {}

    def cube_macs_by_input(self) -> dict:
        out: dict = {}
        for c in self.cores:
            for k, v in c.cube_macs_by_input.items():
                out[k] = out.get(k, 0) + v
        return out

    @property
    def counters(self) -> dict:
        """Totals over all cores as plain values: bytes per pipe (``PIPE_MTE2``, ...), cube MACs (also
        by input width), vector element-ops, bytes per route (``gm_to_ub``, ...: ROUTES), SIMT lane ops and
        nanoseconds spent in cross-core waits; with the L2 model on (``DJ_TWIN_L2=1``) also ``hbm_bytes`` and
        ``l2_bytes``."""
        return {**self.l2_counts(), "bytes": {f"PIPE_{p}": self.total_bytes(p) for p in PIPES if self.total_bytes(p)},
                "cube_macs": self.cube_macs, "cube_macs_by_input": self.cube_macs_by_input(),
                "vector_ops": self.vector_ops, "wait_ns": int(self.wait_seconds * 1e9),
                "routes": {r: self.total_route_bytes(r) for r in ROUTES if self.total_route_bytes(r)},
                "simt_ops": self.simt_ops}


def wait_timeout() -> float:
    raw = os.environ.get(WAIT_TIMEOUT_ENV, "")
    if not raw:
        return DEFAULT_WAIT_TIMEOUT_SECS
    try:
        value = float(raw)
    except ValueError:
        raise DeepJITError(f"{WAIT_TIMEOUT_ENV} must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise DeepJITError(f"{WAIT_TIMEOUT_ENV} must be positive, got {raw!r}")
    return value


def _tensor_span(index: int | str, t) -> tuple[int, int]:
    """(address, bytes) of the memory a tensor argument's elements occupy."""
    if t.device.type != "cpu":
        raise TypeError(f"argument {index}: expected a CPU tensor (the Ascend twin runs on CPU tensors), got device "
                        f"{t.device}")
    if t.numel() == 0:
        return t.data_ptr(), 0
    if any(s < 0 for s in t.stride()):
        raise ValueError(f"argument {index}: expected non-negative strides, got {tuple(t.stride())}")
    extent = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) + 1
    return t.data_ptr(), extent * t.element_size()


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping tensors (views of one buffer) share one global region; merely adjacent ones keep
    their own, so an overrun from one into the next is still caught."""
    out: list[list[int]] = []
    for addr, size in sorted(spans):
        if out and addr < out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], addr + size - out[-1][0])
        else:
            out.append([addr, size])
    return [(a, s) for a, s in out]


class TwinKernel:
    def __init__(self, path: str):
        so = os.path.join(path, BINARY)
        if not os.path.isfile(so):
            raise DeepJITError(f"missing Ascend twin binary: {so}")
        self.path = path
        self._lib = ctypes.CDLL(so, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        abi = ctypes.c_int.in_dll(self._lib, "dj_twin_abi_version").value
        if abi != ABI_VERSION:
            raise DeepJITError(f"{so}: twin ABI version {abi}, expected {ABI_VERSION}")
        self.name = ctypes.c_char_p(ctypes.addressof(ctypes.c_char.in_dll(self._lib, "dj_twin_kernel_name"))).value.decode()
        self.kind = ctypes.c_char_p(ctypes.addressof(ctypes.c_char.in_dll(self._lib, "dj_twin_kernel_kind"))).value.decode()
        self._words = ctypes.c_int.in_dll(self._lib, "dj_twin_counter_words").value
        self.sched_mode = ctypes.c_int.in_dll(self._lib, "dj_twin_sched_mode").value
        # the entry's declared parameter kinds, as the NPU path packs them (a float is not a double)
        self.param_types = read_declared_types(os.path.join(path, "kernel.asc"), self.name)
        # the argument struct the entry reads (deepjit.kernel_args), as the compiler laid it out
        struct = self._string("dj_twin_args_struct")
        fields = [f for f in self._string("dj_twin_args_fields").split(";") if f]
        offsets = (ctypes.c_uint64 * (len(fields) + 1)).in_dll(self._lib, "dj_twin_args_layout")
        self.args_struct = (struct, offsets[0], list(zip(fields, offsets[1:], strict=True))) if struct else None
        self._checked_structs: set = set()
        self._fn = self._lib.dj_twin_launch
        u64p = ctypes.POINTER(ctypes.c_uint64)
        self._fn.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t, u64p, u64p, ctypes.c_int,
                             ctypes.c_double, ctypes.c_double, ctypes.c_char_p, ctypes.c_size_t, u64p]
        self._fn.restype = ctypes.c_int
        self._timeline = hasattr(self._lib, "dj_twin_timeline_copy")
        self._symm = hasattr(self._lib, "dj_twin_set_symm_windows")
        if self._symm:
            u64 = ctypes.POINTER(ctypes.c_uint64)
            self._lib.dj_twin_set_symm_windows.argtypes = [u64, u64, ctypes.c_char_p, ctypes.c_int]
        with _LIBRARY_LOCKS_GUARD:
            self._launch_lock = _LIBRARY_LOCKS.setdefault(os.path.realpath(so), threading.Lock())
        if self._timeline:
            self._lib.dj_twin_timeline_enable.argtypes = [ctypes.c_int]
            self._lib.dj_twin_timeline_size.argtypes = [ctypes.c_uint64]
            self._lib.dj_twin_timeline_size.restype = ctypes.c_uint64
            self._lib.dj_twin_timeline_copy.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64]
            self._lib.dj_twin_timeline_copy.restype = ctypes.c_uint64

    def _string(self, symbol: str) -> str:
        return ctypes.c_char_p(ctypes.addressof(ctypes.c_char.in_dll(self._lib, symbol))).value.decode()

    def _struct_arg(self, args: tuple) -> tuple[tuple, list]:
        """``args`` with a ``KernelArgs`` replaced by a fresh copy of its bytes (the launch rewrites its
        pointer fields in place) and the tensors its pointer fields name, which the launch guards too."""
        packed = [a for a in args if isinstance(a, KernelArgs)]
        if self.args_struct is None:
            if packed:
                raise TypeError(f"kernel {self.name}: expected no argument struct, got {packed[0]!r}")
            return args, []
        if len(args) != 1 or not packed:
            raise TypeError(f"kernel {self.name}: expected one {self.args_struct[0]} (deepjit.kernel_args.pack), "
                            f"got {len(args)} arguments")
        struct_cls = type(packed[0].struct)
        if struct_cls not in self._checked_structs:
            check_layout(f"kernel {self.name}", struct_cls, self.args_struct)
            self._checked_structs.add(struct_cls)
        referenced = [(f"{self.args_struct[0]}.{f}", t) for f, t in packed[0].referenced.items()]
        return (packed[0].tensor.clone(),), referenced

    @property
    def cores_per_block(self) -> int:
        return 3 if self.kind == "mix" else 1

    def launch(self, options: AscendLaunchOptions, *args) -> LaunchCounters:
        """Runs every block; returns the launch's counters. ``options.num_blocks`` is required;
        ``num_launch_timeout_secs`` (> 0) stops a launch that runs longer at its next intrinsic."""
        if not isinstance(options, AscendLaunchOptions):
            raise TypeError(f"options: expected AscendLaunchOptions, got {type(options).__name__}")
        options.validate(False)
        self._check_batch(options.num_blocks)
        args, referenced = self._struct_arg(args)
        payload = pack_ascend_args(args, self.param_types)
        spans = _merge([_tensor_span(i, a) for i, a in enumerate(args)
                        if hasattr(a, "data_ptr") and hasattr(a, "device")]
                       + [_tensor_span(field, t) for field, t in referenced])
        n = len(spans)
        addrs = (ctypes.c_uint64 * max(n, 1))(*[a for a, _ in spans])
        sizes = (ctypes.c_uint64 * max(n, 1))(*[s for _, s in spans])
        cores = options.num_blocks * self.cores_per_block
        counters = (ctypes.c_uint64 * (cores * self._words))()
        err = ctypes.create_string_buffer(_ERR_LEN)
        from . import timeline
        record = self._timeline and timeline.recording_on()
        windows = self._symm_windows()
        with self._launch_lock:
            if windows is not None:
                self._lib.dj_twin_set_symm_windows(*windows)
            if self._timeline:
                self._lib.dj_twin_timeline_enable(1 if record else 0)
            rc = self._fn(options.num_blocks, payload, len(payload), addrs, sizes, n, wait_timeout(),
                          float(options.num_launch_timeout_secs), err, _ERR_LEN, counters)
            if rc != 0:
                raise TwinLaunchError(f"Ascend twin launch of {self.name} ({options.num_blocks} blocks) failed: "
                                      f"{err.value.decode(errors='replace')}")
            result = self._counters(options.num_blocks, counters)
            if record:
                result.traces = self._traces(result)
        if record:
            timeline.note_launch(result)
        return result

    def _check_batch(self, num_blocks: int) -> None:
        """Batch mode (``__schedmode__(1)``) starts a launch once all its cores are idle at once: a launch
        needing more cores of a kind than the chip has never starts (normal mode runs it in waves)."""
        if self.sched_mode != 1:
            return
        needed = [("AIC", num_blocks, PROPERTIES.num_cube_cores)] if self.kind in ("cube", "mix") else []
        if self.kind in ("vector", "mix"):
            needed.append(("AIV", num_blocks * (2 if self.kind == "mix" else 1), PROPERTIES.num_vec_cores))
        for core, count, have in needed:
            if count > have:
                raise TwinLaunchError(f"Ascend twin launch of {self.name} ({num_blocks} blocks): __schedmode__(1) "
                                      f"(batch mode) starts a launch only when all its cores are idle at once; "
                                      f"it needs {count} {core} cores and the chip has {have}")

    def _symm_windows(self):
        """The arguments of ``dj_twin_set_symm_windows``: every live symmetric window's ranges in this
        process (windows.py), which the launch accesses in place and checks like GM."""
        if not self._symm:
            return None
        regions = windows.regions()
        n = len(regions)
        return ((ctypes.c_uint64 * max(n, 1))(*[a for a, _, _ in regions]),
                (ctypes.c_uint64 * max(n, 1))(*[b for _, b, _ in regions]),
                "\n".join(name for _, _, name in regions).encode(), n)

    def _traces(self, result: LaunchCounters) -> list:
        """Each core's recorded events, with the share of its GM bytes the L2 model says reach HBM."""
        from .timeline import EVENT_BYTES, CoreTrace, parse_events

        traces = []
        for i, core in enumerate(result.cores):
            n = self._lib.dj_twin_timeline_size(i)
            buf = ctypes.create_string_buffer(int(n) * EVENT_BYTES)
            got = self._lib.dj_twin_timeline_copy(i, buf, n)
            reads = sum(core.routes.get(r, 0) for r in (*GM_READS, "simt_gm_load"))
            writes = sum(core.routes.get(r, 0) for r in (*GM_WRITES, "simt_gm_store"))
            slot = 0 if self.kind != "mix" or core.core == "AIC" else 1 + int(core.core[-1])
            traces.append(CoreTrace(block=core.block, kind=core.core[:3], slot=slot,
                                    events=parse_events(buf.raw[:int(got) * EVENT_BYTES]),
                                    hbm_read_share=min(1.0, core.hbm_read / reads) if reads else 0.0,
                                    hbm_write_share=min(1.0, core.hbm_write / writes) if writes else 0.0))
        return traces

    def _counters(self, num_blocks: int, raw) -> LaunchCounters:
        out = []
        npipes = len(PIPES)
        for i in range(num_blocks * self.cores_per_block):
            w = raw[i * self._words:(i + 1) * self._words]
            name = "AIC" if w[1] == 0 else f"AIV{w[2]}"
            by_input = {k: w[6 + npipes + j] for j, k in enumerate(("fp32", "b16", "b8", "b4")) if w[6 + npipes + j]}
            routes = {r: w[10 + npipes + j] for j, r in enumerate(ROUTES) if w[10 + npipes + j]}
            out.append(CoreCounters(block=w[0], core=name, bytes={p: w[3 + j] for j, p in enumerate(PIPES) if w[3 + j]},
                                    cube_macs=w[3 + npipes], cube_macs_by_input=by_input, vector_ops=w[4 + npipes],
                                    wait_seconds=w[5 + npipes] * 1e-9, routes=routes,
                                    simt_ops=w[10 + npipes + len(ROUTES)],
                                    l2_modelled=bool(w[11 + npipes + len(ROUTES)]),
                                    hbm_read=w[12 + npipes + len(ROUTES)], hbm_write=w[13 + npipes + len(ROUTES)],
                                    l2_bytes=w[14 + npipes + len(ROUTES)]))
        return LaunchCounters(self.name, num_blocks, out, kind=self.kind)

    def __call__(self, num_blocks: int, *args) -> LaunchCounters:
        return self.launch(AscendLaunchOptions(num_blocks=num_blocks, num_ubuf_bytes=0, num_launch_timeout_secs=0),
                           *args)

    def __repr__(self):
        return f"TwinKernel({self.name} [{self.kind}] @ {self.path})"
