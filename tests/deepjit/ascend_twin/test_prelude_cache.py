"""The twin's precompiled-header prelude is a cache entry like a kernel's: it carries meta.json with
its artifacts' digests, and a damaged .gch is set aside and rebuilt (one warning) instead of breaking
every later twin compile."""
import json

import pytest
import torch

import deepjit
from deepjit.backends.ascend_twin import AscendLaunchOptions
from deepjit.disk_cache import DIGESTS_KEY, verify
from deepjit.tilelang_route import route_config

from ..helpers import list_entries
from .test_entry_points import ADD_ONE

LAUNCH = AscendLaunchOptions(num_blocks=1, num_ubuf_bytes=0, num_launch_timeout_secs=0)


def _add_one(name: str):
    """A fresh runtime (no memory cache) compiling its own kernel, so the prelude is looked up again."""
    runtime = deepjit.Runtime(route_config(), "ascend_twin")
    x = torch.arange(64, dtype=torch.float32)
    runtime.compile(name, ADD_ONE.replace("twin_add_one", name)).launch(LAUNCH, x)
    assert torch.equal(x, torch.arange(64, dtype=torch.float32) + 1)


def test_damaged_gch_is_rebuilt(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DJ_JIT_CACHE_DIR", str(cache))
    monkeypatch.setenv("TL_ASCEND_JIT_CACHE_DIR", str(cache))
    _add_one("twin_add_one_a")
    (prelude,) = [cache / "cache" / e for e in list_entries(cache) if e.startswith("ascend_twin_prelude.")]
    meta = json.loads((prelude / "meta.json").read_text())
    assert "prelude.h.gch" in meta[DIGESTS_KEY] and verify(str(prelude)) is None
    gch = prelude / "prelude.h.gch"
    gch.write_bytes(b"\0damaged" * 64)
    with pytest.warns(RuntimeWarning, match="twin prelude .* does not match its SHA-256"):
        _add_one("twin_add_one_b")
    assert verify(str(prelude)) is None and gch.read_bytes()[:8] != b"\0damaged"
    _add_one("twin_add_one_c")  # and the healed entry serves later compiles without a warning
