"""TileLang's Ascend code generation routed through DeepJIT.

TileLang lowers a kernel written in its Ascend dialect to AscendC source; instead of TileLang's
own bisheng step, :func:`install` makes DeepJIT's Ascend toolchain compile, cache and hand back
the binary, so hand-written and generated kernels share one cache and one key scheme.
Libraries register their TileLang Ascend kernels for ``make ascend-codegen`` through the
``deepjit.ascend_kernels`` entry point group (a callable returning :class:`AscendKernelSpec`
entries, their backend table's ``ascend_kernels``); see ``codegen_all``. Their ``make ascend-check``
cases come through the ``deepjit.ascend_checks`` group (each library's twin-check module); see
``ascend_check``.

A per-pipe timeline estimate of any twin launch: run it inside ``timeline_recording()`` (or with
``DJ_TWIN_TIMELINE=1``); ``last_estimate()`` then gives it (an estimate, never a measurement), as does
the returned counters' ``estimate()``.
"""
from ..backends.ascend_twin.timeline import last_estimate
from ..backends.ascend_twin.timeline import recording as timeline_recording
from .hook import compile_ascendc, install, installed, route_config, uninstall
from .lowering import KINDS, AscendKernelSpec, LoweredKernel, entry_point, kernel_kind, lower
from .twin import run_on_twin, twin_runtime

__all__ = ["KINDS", "AscendKernelSpec", "LoweredKernel", "compile_ascendc", "entry_point", "install", "installed",
           "kernel_kind", "last_estimate", "lower", "route_config", "run_on_twin", "timeline_recording", "twin_runtime",
           "uninstall"]
