"""TileKernels: MoE routing, quantisation casts, mHC, Engram, transpose"""

__version__ = "0.1.0"
