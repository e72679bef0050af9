"""The twin's precompiled-header prelude is a cache entry like a kernel's: it carries meta.json with
its artifacts' digests, and a damaged .gch or launch object (the launch machinery every kernel links) is set
aside and rebuilt (one warning) instead of breaking every later twin compile."""
import json
import warnings

import pytest
import torch

import deepjit
from deepjit.backends.ascend_twin import AscendLaunchOptions
from deepjit.disk_cache import DIGESTS_KEY, verify
from deepjit.tilelang_route import route_config

from ..helpers import list_entries
from .test_entry_points import ADD_ONE

LAUNCH = AscendLaunchOptions(num_blocks=1, num_ubuf_bytes=0, num_launch_timeout_secs=0)


def _look_up_prelude() -> str:
    """The hand-written kernels' prelude looked up (built, verified, rebuilt) exactly as a compile with the
    default options looks it up, without compiling a kernel."""
    runtime = deepjit.Runtime(route_config(), "ascend_twin")
    return runtime.backend._prelude("c_api", runtime.default_compiler_options.get_flags())


@pytest.mark.parametrize("artifact", ["prelude.h.gch", "launch.o"])
def test_damaged_artifact_is_rebuilt(tmp_path, monkeypatch, artifact):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DJ_JIT_CACHE_DIR", str(cache))
    monkeypatch.setenv("TL_ASCEND_JIT_CACHE_DIR", str(cache))
    built = _look_up_prelude()
    (prelude,) = [cache / "cache" / e for e in list_entries(cache) if e.startswith("ascend_twin_prelude.")]
    assert str(prelude) == built
    meta = json.loads((prelude / "meta.json").read_text())
    assert {"prelude.h.gch", "launch.o"} <= set(meta[DIGESTS_KEY]) and verify(str(prelude)) is None
    damaged = prelude / artifact
    damaged.write_bytes(b"\0damaged" * 64)
    with pytest.warns(RuntimeWarning, match="twin prelude .* does not match its SHA-256"):
        assert _look_up_prelude() == built
    assert verify(str(prelude)) is None and damaged.read_bytes()[:8] != b"\0damaged"
    # and a kernel compiles against the healed entry, launches right, and warns about nothing
    runtime = deepjit.Runtime(route_config(), "ascend_twin")
    x = torch.arange(64, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        runtime.compile("twin_add_one_healed", ADD_ONE.replace("twin_add_one", "twin_add_one_healed")).launch(LAUNCH, x)
    assert torch.equal(x, torch.arange(64, dtype=torch.float32) + 1)
    assert [e for e in list_entries(cache) if e.startswith("ascend_twin_prelude.")] == [prelude.name]
