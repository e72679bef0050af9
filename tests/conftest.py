"""Suite-wide pytest settings: one JIT cache per checkout (build/jit-cache) unless DJ_JIT_CACHE_DIR names
another, and the skip of npu-marked tests where no NPU is present."""
import os
import tempfile

import pytest


def _has_npu() -> bool:
    try:
        import torch
        import torch_npu  # noqa: F401
        return torch.npu.is_available()
    except Exception:
        return False


def pytest_configure(config):
    # Tests share one JIT cache per checkout so compiled kernels are reused across runs.
    if "DJ_JIT_CACHE_DIR" not in os.environ:
        os.environ["DJ_JIT_CACHE_DIR"] = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                      "build", "jit-cache")
    os.environ.setdefault("TMPDIR", tempfile.gettempdir())


def pytest_collection_modifyitems(config, items):
    from tests.testkit import backends, npu
    backends.deselect_unlisted(config, items)
    if npu.ON_TWIN:  # NPU_TESTS_ON_TWIN=1: the npu tests run on the Ascend twin (see tests/testkit/npu.py)
        npu.force_ascend()
        off = pytest.mark.skip(reason="NPU_TESTS_ON_TWIN=1 runs only the npu-marked tests")
        for item in items:
            marker = item.get_closest_marker("npu")
            if marker is None:
                item.add_marker(off)
            elif marker.kwargs.get("hardware"):  # @pytest.mark.npu(hardware="why the twin cannot stand in")
                item.add_marker(pytest.mark.skip(reason=f"needs the NPU itself: {marker.kwargs['hardware']}"))
            elif "bench" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="an NPU benchmark times the NPU: nothing to time on the twin "
                                                        "(the npu tests run these kernels)"))
        return
    if _has_npu():
        return
    skip = pytest.mark.skip(reason="needs an Ascend NPU (torch_npu with a visible device); none on this machine")
    for item in items:
        if "npu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """An ``ascend`` case of the backend fixture that passed without any call reaching an Ascend kernel
    (a reference-only or validation-only check) is reported as skipped, not as a second pass."""
    outcome = yield
    report = outcome.get_result()
    if call.when == "call" and report.passed:
        from tests.testkit.backends import unserved_ascend
        why = unserved_ascend(item)
        if why is not None:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {why}")


@pytest.fixture(autouse=True)
def _deep_gemm_alignment_restored():
    """deep_gemm's contiguous-layout alignment is process state that tests set; each test leaves it as it
    found it, so a later test sees the path's default (256 on Ascend, 128 on the host)."""
    import sys
    runtime = sys.modules.get("deep_gemm.runtime")
    saved = None if runtime is None else runtime._state.mk_alignment
    yield
    runtime = sys.modules.get("deep_gemm.runtime")
    if runtime is not None:
        runtime._state.mk_alignment = saved
