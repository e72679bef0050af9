"""A runtime's default compiler and launch options are its own and may be edited in place, as
upstream's option structs (the spec's only members a library may mutate after construction)."""
import json
import os

import pytest

from deepjit.backends.ascend import AscendLaunchOptions

from .helpers import make_fake_ascend_toolkit, make_runtime

VECTOR = 'extern "C" __global__ __vector__ void scalar_increment(__gm__ int* out, int x) { *out = x + 1; }\n'


@pytest.fixture
def runtimes(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_HOME_PATH", make_fake_ascend_toolkit(tmp_path / "cann"))
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.delenv("TST_JIT_LAUNCH_TIMEOUT", raising=False)
    return make_runtime(tmp_path, monkeypatch, backend="ascend"), make_runtime(tmp_path, monkeypatch, backend="ascend")


def _compiled_options(path):
    with open(os.path.join(path, "meta.json")) as f:
        return json.load(f)["compiler_options"]


def test_compiler_defaults_edited_in_place_apply_to_that_runtime(runtimes):
    rt, other = runtimes
    assert rt.default_compiler_options is not other.default_compiler_options
    rt.default_compiler_options.arch = 3510                  # no NPU here: the library names the arch
    first = rt.compile_without_load("scalar_increment", VECTOR)
    assert _compiled_options(first)["optimize_level"] == "2"
    rt.default_compiler_options.optimize_level = "3"         # the in-process memo must not serve the old key
    second = rt.compile_without_load("scalar_increment", VECTOR)
    assert second != first and _compiled_options(second)["optimize_level"] == "3"
    rt.default_compiler_options.extra_bisheng_flags = ["-DX=1"]
    assert rt.default_compiler_options.extra_bisheng_flags == ("-DX=1",)
    assert rt.compile_without_load("scalar_increment", VECTOR) not in (first, second)
    assert other.default_compiler_options.arch is None and other.default_compiler_options.optimize_level == "2"


def test_launch_defaults_edited_in_place(runtimes):
    rt, other = runtimes
    rt.default_launch_options.num_launch_timeout_secs = 3
    merged = rt.default_launch_options.override_with(AscendLaunchOptions(num_blocks=2))
    assert (merged.num_blocks, merged.num_launch_timeout_secs, merged.num_ubuf_bytes) == (2, 3, 0)
    assert other.default_launch_options.num_launch_timeout_secs != 3
