"""One table per library naming, for each public op, its reference, host and Ascend implementations.

    TABLE = deepjit.BackendTable(LIB)
    TABLE.register("transpose", reference=ref.transpose, host=Impl(_transpose_host, "2-D, any dtype"))
    ...
    return TABLE.run("transpose", x.device, x)       # in the public op, after validation

Every implementation of an op takes the same (validated, canonical) arguments. The backend comes
from ``KernelLibrary.backend_for`` (``<PREFIX>_BACKEND`` first, then the device), told whether the
op has an Ascend implementation. Forcing a backend the op lacks raises ``BackendUnavailableError``
naming the op and the backend; there is no silent fallback. Without forcing, a device whose
backend the op lacks (an NPU while the Ascend column is empty) takes the reference.

An implementation may cover only some forms of the op's input: ``Impl.accepts`` says which
(a predicate over the op's arguments) and ``Impl.supports`` says it in words; the reference
serves the other forms, forced or not, as the reference defines the op for every input.
Ascend implementations list their TileLang kernels in ``Impl.kernels`` so ``make ascend-codegen``
lowers exactly what the table serves (``BackendTable.ascend_kernels``, the package entry point).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from . import guard
from .errors import DeepJITError

BACKENDS = ("reference", "host", "ascend")


class BackendUnavailableError(DeepJITError, ValueError):
    """A forced backend (``<PREFIX>_BACKEND``) that the op has no implementation for."""


@dataclass(frozen=True)
class Impl:
    fn: Callable
    supports: str = "every input the op accepts"
    accepts: Callable[..., bool] | None = None  # False: this form is served by the reference
    kernels: Sequence = field(default_factory=tuple)  # AscendKernelSpec entries (Ascend implementations)


@dataclass(frozen=True)
class OpEntry:
    name: str
    reference: Impl
    host: Impl | None = None
    ascend: Impl | None = None

    def impl(self, backend: str) -> Impl | None:
        return getattr(self, backend)

    def backends(self) -> tuple[str, ...]:
        return tuple(b for b in BACKENDS if self.impl(b) is not None)


def _impl(value) -> Impl | None:
    return value if value is None or isinstance(value, Impl) else Impl(value)


class BackendTable:
    def __init__(self, library):
        self.library = library
        self._ops: dict[str, OpEntry] = {}

    def register(self, name: str, *, reference, host=None, ascend=None) -> OpEntry:
        """Adds op ``name``; each implementation is a callable or an ``Impl``."""
        if name in self._ops:
            raise DeepJITError(f"{self.library.name}: op {name!r} is registered twice")
        entry = OpEntry(name, _impl(reference), _impl(host), _impl(ascend))
        self._ops[name] = entry
        return entry

    def add_ascend(self, name: str, ascend) -> OpEntry:
        """Gives registered op ``name`` its Ascend implementation (a callable or an ``Impl``)."""
        entry = self[name]
        if entry.ascend is not None:
            raise DeepJITError(f"{self.library.name}: op {name!r} already has an Ascend implementation")
        entry = self._ops[name] = OpEntry(entry.name, entry.reference, entry.host, _impl(ascend))
        return entry

    def __getitem__(self, name: str) -> OpEntry:
        try:
            return self._ops[name]
        except KeyError:
            raise DeepJITError(f"{self.library.name}: no op {name!r} in the backend table") from None

    def __iter__(self) -> Iterator[OpEntry]:
        return iter(self._ops.values())

    def __contains__(self, name: str) -> bool:
        return name in self._ops

    def _forced_absent(self, entry: OpEntry) -> None:
        forced = self.library.forced_backend()
        if forced is not None and entry.impl(forced) is None:
            raise BackendUnavailableError(
                f"{self.library.name}.{entry.name} has no {forced} implementation "
                f"({self.library.env.prefix}_BACKEND={forced}); it has: {', '.join(entry.backends())}")

    def backend(self, name: str, device) -> str:
        """The backend that serves op ``name`` for tensors on ``device``."""
        entry = self[name]
        try:
            chosen = self.library.backend_for(device, has_ascend=entry.ascend is not None,
                                              op=f"{self.library.name}.{name}")
        except (ValueError, NotImplementedError):
            self._forced_absent(entry)  # name the op when the op is what lacks the backend
            raise
        if entry.impl(chosen) is None:
            self._forced_absent(entry)
            return "reference"
        return chosen

    def select(self, name: str, device, *args, **kwargs) -> tuple[str, Callable]:
        """(backend, implementation) for these arguments: ``accepts`` applied."""
        entry = self[name]
        guard.warn_if_cuda(self.library.name, device)
        backend = self.backend(name, device)
        impl = entry.impl(backend)
        if impl.accepts is not None and not impl.accepts(*args, **kwargs):
            return "reference", entry.reference.fn
        return backend, impl.fn

    def run(self, name: str, device, *args, **kwargs):
        return self.select(name, device, *args, **kwargs)[1](*args, **kwargs)

    def serves(self, name: str, device, *args, **kwargs) -> str:
        """The backend that ``run`` would use for these arguments."""
        return self.select(name, device, *args, **kwargs)[0]

    def ascend_kernels(self) -> list:
        """Every TileLang kernel the Ascend column declares (the ``deepjit.ascend_kernels`` entry point)."""
        return [k for e in self if e.ascend is not None for k in e.ascend.kernels]
