"""Shared by the Ascend GEMM tests: the kernels a glue module launches, and the wide-tile kernels
(DG_BLOCK_M 256, one L0C stage) at shapes too small for ``_launch.cube_block_m`` to pick them."""
from deep_gemm.ascend._launch import WIDE_BLOCK_M


def record_kernels(monkeypatch, module) -> list:
    """``(name, defines)`` of every kernel ``module`` (a kernel glue module) asks for from now on."""
    seen, real = [], module.kernel
    monkeypatch.setattr(module, "kernel",
                        lambda name, path, defines: seen.append((name, defines)) or real(name, path, defines))
    return seen


def force_wide_tiles(monkeypatch, module) -> list:
    """Makes ``module`` ask for 256-row tiles; returns ``record_kernels``' list, so a test can check the wide
    kernel is what ran."""
    monkeypatch.setattr(module, "cube_block_m", lambda m, n, cores: WIDE_BLOCK_M)
    return record_kernels(monkeypatch, module)
