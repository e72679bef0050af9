"""TileKernels on CPU (C++ host kernels) and Ascend: MoE routing, quantisation casts, mHC, Engram, transpose.

A drop-in for ``import tile_kernels``: every op validates its arguments once, then runs a host
kernel for CPU tensors (where one exists) or the PyTorch reference in ``tile_kernels.torch``.
"""

__version__ = "0.1.0"

# torch_ops registers torch.ops.tile_kernels.*
from . import config, engram, mhc, modeling, moe, quant, testing, torch, torch_ops, transpose  # noqa: E402,F401
from .config import get_device_num_sms, get_num_sms, set_num_sms  # noqa: E402

__all__ = ["config", "engram", "mhc", "modeling", "moe", "quant", "transpose", "torch", "testing",
           "get_num_sms", "get_device_num_sms", "set_num_sms"]
