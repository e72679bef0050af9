"""Upstream's module paths ``deep_gemm.testing.utils`` and ``deep_gemm.utils.init_dist``, called through."""
import os

import pytest
import torch

from deep_gemm.testing import numeric
from deep_gemm.testing.utils import get_arch_major, ignore_env
from deep_gemm.testing.utils import test_filter as only_if  # not collected as a test
from deep_gemm.utils import init_dist, uneven_all_gather
from deep_gemm.utils.dist import init_dist as dist_init_dist


def test_testing_utils_helpers(monkeypatch):
    assert isinstance(get_arch_major(), int)
    calls = []

    @only_if(lambda: False)
    def skipped():
        calls.append("skipped")

    @ignore_env("DG_TEST_IMPORT_PATHS_FLAG", lambda: True)
    def guarded():
        calls.append(os.environ.get("DG_TEST_IMPORT_PATHS_FLAG"))

    skipped()
    monkeypatch.setenv("DG_TEST_IMPORT_PATHS_FLAG", "1")
    guarded()
    assert calls == [None] and os.environ["DG_TEST_IMPORT_PATHS_FLAG"] == "1"   # unset inside, restored after
    assert numeric.calc_diff(torch.ones(4), torch.ones(4)) == pytest.approx(0.0)


def test_utils_reexports_the_dist_helpers():
    assert init_dist is dist_init_dist and callable(uneven_all_gather)
