"""Shared by the Ascend GEMM tests: the wide-tile kernels (DG_BLOCK_M 256, one L0C stage) at shapes
too small for ``_launch.cube_block_m`` to pick them."""
from deep_gemm.ascend._launch import WIDE_BLOCK_M


def force_wide_tiles(monkeypatch, module) -> list:
    """Makes ``module`` (a kernel glue module) ask for 256-row tiles; returns the defines of every kernel it
    asks for, so a test can check the wide kernel is what ran."""
    seen, real = [], module.kernel
    monkeypatch.setattr(module, "cube_block_m", lambda m, n, cores: WIDE_BLOCK_M)
    monkeypatch.setattr(module, "kernel", lambda name, path, defines: seen.append(defines) or real(name, path, defines))
    return seen
