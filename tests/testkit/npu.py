"""Where the npu-marked tests run. On an Ascend NPU they take ``DEVICE = "npu"``. With
``NPU_TESTS_ON_TWIN=1`` they run on CPU tensors with every library's Ascend backend forced
(``<PREFIX>_BACKEND=ascend``, i.e. deepjit's Ascend CPU twin), so the NPU tests themselves are
checked on a machine without an NPU: ``NPU_TESTS_ON_TWIN=1 pytest -m npu``. Not part of make test
(the twin tests already cover these kernels; this mode checks the NPU test code)."""
import os

ON_TWIN = os.environ.get("NPU_TESTS_ON_TWIN") == "1"
DEVICE = "cpu" if ON_TWIN else "npu"   # a string: torch.device("npu") needs torch_npu at import
# The env that sends an op to its Ascend implementation on DEVICE (empty on an NPU: the device decides).
ASCEND_ENV = {p + "_BACKEND": "ascend" for p in ("DG", "TK", "EP", "FMLA")} if ON_TWIN else {}


def force_ascend() -> None:
    """Apply ASCEND_ENV to this process (and the ranks it spawns, which inherit the environment)."""
    os.environ.update(ASCEND_ENV)


def npu_seconds(fn, warmup: int = 3, reps: int = 20) -> float:
    """Median device time of ``fn`` in seconds, between NPU events on the current stream (after warm-up)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.npu.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]
