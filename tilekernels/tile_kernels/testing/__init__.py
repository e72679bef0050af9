from . import bench, generator, numeric, quant
from .quant import clear_unused_sf

__all__ = ["bench", "generator", "numeric", "quant", "clear_unused_sf"]
