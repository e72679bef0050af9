"""Warnings, once each, for the two ways a framework can pick this suite up by accident:

- an upstream package of the same import name is installed too (``pip install deep_gemm`` next to
  ``deep-gemm-ascend``): both wheels write the same package directory, so whichever was installed last
  is what ``import deep_gemm`` gives, and uninstalling one breaks the other;
- CUDA tensors reach an op: this suite has no CUDA kernels, so they would run the plain-PyTorch
  reference path, correct but far slower than upstream's kernels (vLLM and SGLang call ``deep_gemm``
  on CUDA when a ``deep_gemm`` is importable).

``DJ_QUIET_GUARDS=1`` silences both (a deliberate setup, e.g. running the reference on a GPU for checks)."""
from __future__ import annotations

import os
import warnings
from importlib import metadata

_warned: set[tuple[str, str]] = set()


class SuiteGuardWarning(UserWarning):
    """This suite was picked up where upstream's package (or its CUDA kernels) were likely meant."""


def _once(key: tuple[str, str], message: str) -> None:
    if key in _warned or os.environ.get("DJ_QUIET_GUARDS", "0") not in ("", "0"):
        return
    _warned.add(key)
    warnings.warn(message, SuiteGuardWarning, stacklevel=3)


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def warn_if_upstream_installed(import_name: str, ours: str, upstream_dists: tuple[str, ...]) -> None:
    """Warns if one of ``upstream_dists`` (upstream's distribution names for ``import_name``) is installed
    beside our distribution ``ours``."""
    for dist in upstream_dists:
        version = _installed(dist)
        if version is not None:
            _once(("upstream", import_name),
                  f"both {ours} and upstream's {dist} {version} are installed and provide `import {import_name}`: "
                  f"they share one package directory, so `{import_name}` is whichever was installed last. "
                  f"Keep one (pip uninstall {dist} or {ours}), then reinstall it.")
            return


def warn_if_cuda(library: str, device) -> None:
    """Warns the first time one of ``library``'s ops is given CUDA tensors."""
    if getattr(device, "type", None) == "cuda":
        _once(("cuda", library),
              f"{library} was called with CUDA tensors: this suite has no CUDA kernels, so they run the "
              f"plain-PyTorch reference (correct, much slower). For NVIDIA GPUs install upstream's {library} "
              f"instead; this suite serves CPUs and Ascend NPUs.")
