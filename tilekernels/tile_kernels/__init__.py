"""TileKernels on CPU (C++ host kernels) and Ascend: MoE routing, quantisation casts, mHC, Engram, transpose.

A drop-in for ``import tile_kernels``: every op validates its arguments once, then runs a host
kernel for CPU tensors, a TileLang-Ascend kernel for the forms its table entry serves on NPU tensors,
or the PyTorch reference (``tile_kernels.reference``) for the rest.
"""

from deepjit.guard import warn_if_upstream_installed  # noqa: E402

from ._lib import __version__  # noqa: F401  (beside LIB: the version keys the kernel cache)

warn_if_upstream_installed("tile_kernels", "tile-kernels-ascend", ("tile_kernels",))

# torch_ops registers torch.ops.tile_kernels.*
from . import config, engram, mhc, modeling, moe, quant, testing, torch, torch_ops, transpose  # noqa: E402,F401
from .config import get_device_num_sms, get_num_sms, set_num_sms  # noqa: E402

__all__ = ["config", "engram", "mhc", "modeling", "moe", "quant", "transpose", "torch", "testing",
           "get_num_sms", "get_device_num_sms", "set_num_sms"]
