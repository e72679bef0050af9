"""Plain-PyTorch dispatch and combine over torch.distributed: the semantics, and the path for
devices without host kernels (NPU with HCCL) or when ``EP_BACKEND=reference`` forces it."""
