from . import engram, mhc

__all__ = ["engram", "mhc"]
