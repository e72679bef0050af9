"""One conformance case: a TileLang Ascend kernel at a fixed small shape, its inputs, and the torch
reference it must match on the twin (and on a real Ascend 950).

The reference is computed with torch from the inputs alone, never from the twin's code. ``exact``
cases compare bit patterns (signed zeros included) except that any NaN matches a NaN: the AscendC
conversion docs specify "nan -> nan", not its payload, and torch's own NaN payloads differ between
its code paths; ``close`` cases compare with
``torch.testing.assert_close`` at the case's tolerance (FP32 accumulation of cube products)."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..lowering import KINDS, AscendKernelSpec

CHECKS = ("exact", "close")


@dataclass(frozen=True)
class Case:
    """``inputs(gen)`` returns every kernel argument in order (outputs pre-filled with a sentinel so an
    element the kernel forgets to write shows up); ``reference(*inputs)`` returns ``{argument index:
    expected tensor}`` for the outputs. ``construct`` names what the case pins, for reports.
    ``known_gap``: set only while the twin lacks something the case needs ("twin: <what> not
    implemented"); the case is then expected to fail, and passing is reported so the note gets removed."""
    name: str
    kind: str
    build: Callable[[], object]
    inputs: Callable[[object], Sequence]
    reference: Callable[..., dict]
    construct: str
    check: str = "exact"
    atol: float = 0.0
    rtol: float = 0.0
    tags: tuple = field(default=())
    known_gap: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS} (Case {self.name!r}), got {self.kind!r}")
        if self.check not in CHECKS:
            raise ValueError(f"check: expected one of {CHECKS} (Case {self.name!r}), got {self.check!r}")
        if not re.fullmatch(r"[A-Za-z0-9_]+", self.name):
            raise ValueError(f"name: expected only letters, digits, or underscores (a Case), got {self.name!r}")

    def spec(self) -> AscendKernelSpec:
        return AscendKernelSpec(self.name, self.build, self.kind)


def _bits(t):
    import torch
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(ints[t.element_size()])


def mismatch(case: Case, got, want) -> str | None:
    """None when ``got`` matches ``want`` under the case's check, else a short description."""
    import torch
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        return f"dtype/shape {got.dtype}{tuple(got.shape)} != expected {want.dtype}{tuple(want.shape)}"
    if case.check == "exact":
        differ = _bits(got) != _bits(want)
        if got.is_floating_point():
            differ &= ~(got.float().isnan() & want.float().isnan())
        diff = differ.flatten().nonzero()
        if diff.numel() == 0:
            return None
        i = int(diff[0])
        return (f"{diff.numel()} of {got.numel()} elements differ bitwise; first at flat index {i}: "
                f"got {got.flatten()[i].item()!r} (bits {_bits(got).flatten()[i].item():#x}), "
                f"expected {want.flatten()[i].item()!r} (bits {_bits(want).flatten()[i].item():#x})")
    try:
        torch.testing.assert_close(got, want, atol=case.atol, rtol=case.rtol, equal_nan=True)
    except AssertionError as exc:
        return str(exc).splitlines()[0] + " " + " ".join(str(exc).splitlines()[1:4])
    return None


def check_outputs(case: Case, args: Sequence, expected: dict) -> list[str]:
    """Every output compared; the list of failures as ``argument i: what differs``."""
    return [f"argument {i}: {why}" for i, want in expected.items() if (why := mismatch(case, args[i], want))]
