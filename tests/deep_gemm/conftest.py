"""deep_gemm test settings: run every test on each available CPU path.

``backend`` parametrises over "reference" and "host" (host only where ``deep_gemm.host`` exists)
by setting ``DG_BACKEND`` for the duration of the test, so the host kernels are checked by the
same tests as the reference. Tests that do not take the fixture run on the default path."""
import importlib.util
import os
import random

import pytest
import torch

from deep_gemm import runtime

BACKENDS = ["reference"] + (["host"] if importlib.util.find_spec("deep_gemm.host") is not None else [])


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    monkeypatch.setenv("DG_BACKEND", request.param)
    return request.param


@pytest.fixture(autouse=True)
def _seed_and_settings():
    random.seed(0)
    torch.manual_seed(0)
    saved_alignment = runtime._state.mk_alignment  # None: the path's default, kept as such
    yield
    runtime._state.mk_alignment = saved_alignment
    os.environ.pop("DG_PSUM_LAYOUT_FORM", None)
