"""deep_gemm test settings: run every public-contract test on each path.

``backend`` parametrises over "reference", "host" (only where ``deep_gemm.host`` exists) and "ascend"
(the Ascend kernels on deepjit's Ascend twin, CPU tensors) by setting ``DG_BACKEND`` for the duration of
the test; under "ascend" a call the table would serve elsewhere skips the case naming the op (see
tests/testkit/backends.py). Tests that do not take the fixture run on the default path; a test that cannot
run on every backend says which with ``@pytest.mark.backends(..., why=...)``. What only the Ascend
kernels have (tile boundaries, flags, no host reads, Ascend defaults and forms) lives in ``ascend/``."""
import importlib.util
import os
import random

import pytest
import torch

import deep_gemm._dispatch
from deep_gemm import runtime
from tests.testkit.backends import make_backend_fixture

BACKENDS = ["reference"] + (["host"] if importlib.util.find_spec("deep_gemm.host") is not None else []) + ["ascend"]

backend = make_backend_fixture("DG", deep_gemm._dispatch.TABLE, BACKENDS)


@pytest.fixture(autouse=True)
def _seed_and_settings():
    random.seed(0)
    torch.manual_seed(0)
    saved_alignment = runtime._state.mk_alignment  # None: the path's default, kept as such
    yield
    runtime._state.mk_alignment = saved_alignment
    os.environ.pop("DG_PSUM_LAYOUT_FORM", None)
