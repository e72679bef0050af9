"""Core-count settings. Upstream counts CUDA SMs; here it is the worker count of the host kernels
(the CPU's core count by default) and, on Ascend, the AI-core count. Results never depend on it,
but the shapes of persistent-grid partials (engram_gate_bwd's grad_w_partial) do."""
import functools
import os

from deepjit import validation as C

from ._lib import set_threads, threads


@functools.cache
def get_device_num_sms() -> int:
    return os.cpu_count() or 1


def set_num_sms(num_sms: int) -> None:
    if isinstance(num_sms, bool) or not isinstance(num_sms, int):
        raise C.fail("num_sms", "an int", type(num_sms).__name__, TypeError)
    if not 0 < num_sms <= get_device_num_sms():
        raise C.fail("num_sms", f"a value in [1, {get_device_num_sms()}] (the device's core count)", num_sms)
    set_threads(num_sms)


def get_num_sms() -> int:
    return threads()


def get_max_smem_per_sm() -> int:
    """Upstream sizes engram grids by shared memory; a CPU core's L2 plays that role."""
    return 1 << 20
