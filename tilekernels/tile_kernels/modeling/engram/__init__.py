from .engram_gate import EngramGateFn, engram_gate

__all__ = ["engram_gate", "EngramGateFn"]
