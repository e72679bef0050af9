"""Unified Buffer layout rules shared by every library's TileLang Ascend kernels."""

UB_BLOCK_BYTES = 32  # a UB DMA burst starts 32-byte aligned, so every UB row is padded to whole blocks


def padded(n: int, elem_bytes: int) -> int:
    """``n`` elements of ``elem_bytes`` bytes rounded up to whole 32-byte UB blocks."""
    per = UB_BLOCK_BYTES // elem_bytes
    return -(-n // per) * per
