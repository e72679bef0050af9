"""The libraries' host GEMM-family kernels on each matrix engine this machine has, forced through
DJ_HOST_MATRIX: a representative subset of their tests (dense, mixed precision, grouped with empty
groups, k-grouped (the host engine's tails and the public ops), MQA logits, einsum, flash_mla's
micro-kernel and sparse attention) run in a fresh interpreter, since the engine is read when a library's runtime is made. Engines absent, and the
automatic one (the rest of the suite runs on it), are skipped with the reason; the full files pass the same way (``DJ_HOST_MATRIX=fma pytest tests/deep_gemm ...``)."""
import os
import subprocess
import sys

import pytest

from deepjit.backends.host import cpu_identity
from deepjit.backends.host import matrix_engine as me

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# One case per behaviour (tails, M = 1, each dtype and group layout, each micro-kernel mode); the einsum's
# reference backend is torch and does not depend on the engine.
SUBSET = [
    ("tests/deep_gemm/host/test_gemm.py", "(bf16_gemm and (1-33-128 or 77-100-300)) or c_alpha or mixed_precision "
                                          "or m_grouped or k_grouped or decode_rows"),
    ("tests/deep_gemm/test_k_grouped.py", "host and (True-fp8-32 or True-bf16 or packed_scales)"),
    ("tests/deep_gemm/host/test_gemm_small_groups.py", "not contiguous_small_ragged_groups or 40-352 or bf16"),
    ("tests/deep_gemm/host/test_mqa_logits.py", "5-64 or 16-64-1 or 12-16-2"),
    ("tests/deep_gemm/test_einsum_misc.py", "ragged and host and not hc_prenorm"),
    ("tests/flash_mla/test_micro_kernel.py", "37-1 or 3-64-0"),
    ("tests/flash_mla/test_sparse_decode.py", "host_matches_reference"),
]


def _automatic(flags: str) -> str | None:
    """The engine the rest of the suite runs on (no variable set, the default -march=native), or None
    when the environment forces one."""
    forced = any(k.endswith("_HOST_MATRIX") and v for k, v in os.environ.items())
    if forced or any(k.endswith("_JIT_HOST_MARCH") and v != "native" for k, v in os.environ.items()):
        return None
    return me.automatic(flags)


def _params():
    flags = cpu_identity()[1]
    automatic = _automatic(flags)
    for engine in me.ENGINES:
        why = me.unavailable(engine, flags, "DJ_HOST_MATRIX")
        # where avx512bf16 is automatic, deep_gemm's dense E4M3 GEMMs of 12-512 rows run on brgemm (host/gemm.py
        # engine_for): the subset runs forced to avx512bf16 too, so those shapes keep a run on it
        moved = engine == "avx512bf16" and me.brgemm_missing() is None
        if why is None and engine == automatic and not moved:
            why = f"{engine} is this machine's automatic engine: the whole suite already runs these tests on it"
        yield pytest.param(engine, marks=[pytest.mark.skip(reason=why)] if why else [], id=engine)


def _selection() -> str:
    """One -k expression for the whole subset: each file's name ANDed with its selection."""
    terms = []
    for path, select in SUBSET:
        module = os.path.basename(path)
        terms.append(f"({module} and ({select}))" if select else module)
    return " or ".join(terms)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("engine", list(_params()))
def test_library_subset_on_engine(engine):
    # only DJ_HOST_MATRIX: a library's own <PREFIX>_HOST_MATRIX would take precedence over it
    env = {k: v for k, v in os.environ.items() if not k.endswith("_HOST_MATRIX")}
    env["DJ_HOST_MATRIX"] = engine
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-m", "not bench",
            *[path for path, _ in SUBSET], "-k", _selection()]
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, f"DJ_HOST_MATRIX={engine}: {summary}\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert " passed" in summary, summary
