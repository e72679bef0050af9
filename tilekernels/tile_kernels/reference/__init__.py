"""Plain-PyTorch references: device-agnostic, written for clarity, the oracle of every test.
``tile_kernels.torch`` re-exports them under upstream's names."""
