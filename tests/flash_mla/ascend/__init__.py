"""What only flash_mla's Ascend kernels have, on deepjit's Ascend twin (CPU tensors) or an NPU (npu-marked): their
entry points at the smallest head block, cube-block and work-item boundaries, the running max and rescale skip,
bytes the kernels read, their own clamping of device values, and forms routed through the table. Each op's public
contract runs on every backend, the twin included, from its file in tests/flash_mla/ (the ``backend`` fixture of
tests/flash_mla/conftest.py)."""
