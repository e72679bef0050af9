"""What only deep_gemm's Ascend kernels have, on deepjit's Ascend twin (CPU tensors) or an NPU (npu-marked):
tile and block boundaries (tails, wide tiles, panels), kernel entry points and their defines, flags and sync,
no host reads (graph capture), layout clamping, DeepGEMM-Ascend's defaults and its Ascend-only forms (int16
scale layouts, MXFP8 caches), the toolchain, the ascend-check cases and which forms the table routes to the
Ascend kernels. Each op's public contract runs on every backend, the twin included, from its file in
tests/deep_gemm/ (the ``backend`` fixture of tests/deep_gemm/conftest.py)."""
