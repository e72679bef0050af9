from ..reference.engram import engram_gate_ref, engram_hash_ref, make_offsets

__all__ = ["engram_gate_ref", "engram_hash_ref", "make_offsets"]
