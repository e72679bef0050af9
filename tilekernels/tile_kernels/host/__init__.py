"""Host (CPU) kernels of tile_kernels: the C++ sources, compiled by deepjit on first use, and beside
them the thin Python wrappers that allocate outputs and launch them (one module per op family)."""
