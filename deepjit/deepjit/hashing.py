"""Two-lane FNV-1a with length framing and a SplitMix64 finaliser (the upstream key hash)."""
from __future__ import annotations

_MASK = (1 << 64) - 1
_LANE0_INIT, _LANE0_MULT = 0xC6A4A7935BD1E995, 0x100000001B3
_LANE1_INIT, _LANE1_MULT = 0xFF51AFD7ED558CCD, 0x9E3779B97F4A7C15


def _as_bytes(data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


def _splitmix64(v: int) -> int:
    v ^= v >> 30
    v = (v * 0xBF58476D1CE4E5B9) & _MASK
    v ^= v >> 27
    v = (v * 0x94D049BB133111EB) & _MASK
    v ^= v >> 31
    return v


class FNV1a:
    """``update`` feeds the 8-byte little-endian length, then each byte, into both lanes."""

    __slots__ = ("lane0", "lane1")

    def __init__(self):
        self.lane0, self.lane1 = _LANE0_INIT, _LANE1_INIT

    def update(self, data) -> FNV1a:
        data = _as_bytes(data)
        a, b = self.lane0, self.lane1
        for byte in len(data).to_bytes(8, "little") + data:
            a = ((a ^ byte) * _LANE0_MULT) & _MASK
            b = ((b ^ byte) * _LANE1_MULT) & _MASK
        self.lane0, self.lane1 = a, b
        return self

    def copy(self) -> FNV1a:
        other = FNV1a.__new__(FNV1a)
        other.lane0, other.lane1 = self.lane0, self.lane1
        return other

    def digest(self) -> tuple[int, int]:
        return _splitmix64(self.lane0), _splitmix64(self.lane1)

    def hexdigest(self) -> str:
        a, b = self.digest()
        return f"{a:016x}{b:016x}"


def hash_hex(*components) -> str:
    h = FNV1a()
    for c in components:
        h.update(c)
    return h.hexdigest()

