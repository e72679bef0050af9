"""The library's handle on deepjit: host kernels, backend choice, worker threads."""
import deepjit

__version__ = "0.1.0+deepgemm.2.6.1"  # the suite's 0.1.0, mirroring upstream DeepGEMM 2.6.1 (commit 54e2261)

LIB = deepjit.KernelLibrary("deep_gemm", "DG", __file__, __version__)
DEFAULT_NUM_THREADS = LIB.num_threads


def on_ascend(device) -> bool:
    """Whether tensors on ``device`` take the Ascend path (NPU tensors, or ``DG_BACKEND=ascend``: the
    twin on CPU tensors): its defaults follow DeepGEMM-Ascend and no device tensor is read on the host."""
    return getattr(device, "type", device) == "npu" or LIB.forced_backend() == "ascend"
