"""The disk cache of TileLang Ascend lowerings (deepjit.tilelang_route.lowering_cache): keyed by the
builder, its args and its package's sources; a hit neither calls the builder nor imports TileLang; a
corrupt entry is lowered again. TileLang's lowering is faked except in the end-to-end subprocess test."""
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from deepjit.disk_cache import DiskCache
from deepjit.tilelang_route import lowering_cache
from deepjit.tilelang_route.lowering_cache import TAG, CachedLowering, cached_lowering, lowering_key

PACKAGE = {
    "__init__.py": 'import deepjit\n\nLIB = deepjit.KernelLibrary("lcpkg", "LCPKG", __file__, "0")\n',
    "helper.py": "TILE = 1024\n",
    "kernels.py": textwrap.dedent('''\
        import os

        from . import LIB  # noqa: F401 - the launches go through the package's library
        from .helper import TILE


        def build(n):
            """Records each call in $LCPKG_CALLS; a sample TileLang kernel (imports TileLang)."""
            with open(os.environ["LCPKG_CALLS"], "a") as f:
                f.write(f"{n}\\n")
            if os.environ.get("LCPKG_FAKE"):
                return ("fake", n)
            from deepjit.tilelang_route import samples
            return samples.vector_add(n, TILE)


        def other(n):
            return build(n)
        '''),
}


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """The package ``lcpkg`` (imported from tmp_path) whose builder counts its calls in ``pkg.calls()``."""
    root = tmp_path / "src" / "lcpkg"
    root.mkdir(parents=True)
    for name, text in PACKAGE.items():
        (root / name).write_text(text)
    calls = tmp_path / "calls"
    monkeypatch.setenv("LCPKG_CALLS", str(calls))
    monkeypatch.setenv("LCPKG_FAKE", "1")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    import lcpkg.kernels

    lcpkg.kernels.root, lcpkg.kernels.calls = root, lambda: calls.read_text().split() if calls.exists() else []
    yield lcpkg.kernels
    for name in [m for m in sys.modules if m == "lcpkg" or m.startswith("lcpkg.")]:
        del sys.modules[name]


@pytest.fixture
def fake_lowering(monkeypatch):
    """TileLang's lowering replaced by a record derived from the fake PrimFunc ``("fake", n)``."""
    def lower(func):
        return CachedLowering("k", f'extern "C" __global__ __vector__ void k(__gm__ float* X) {{}} // {func[1]}\n',
                              func[1] % 7 + 1, ("X",))

    monkeypatch.setattr(lowering_cache, "_lower", lower)


@pytest.fixture
def cache(tmp_path):
    return DiskCache([str(tmp_path / "jit")])


def test_the_key_follows_builder_args_and_package_sources(pkg):
    key = lowering_key(pkg.build, (64,))
    assert lowering_key(pkg.build, (64,)) == key
    assert lowering_key(pkg.build, (65,)) != key
    assert lowering_key(pkg.build, (64.0,)) != key
    assert lowering_key(pkg.other, (64,)) != key
    (pkg.root / "helper.py").write_text("TILE = 512\n")  # a file the builder only imports
    assert lowering_key(pkg.build, (64,)) != key


def test_a_hit_does_not_call_the_builder(pkg, fake_lowering, cache):
    first = cached_lowering(pkg.build, 64, disk_cache=cache)
    assert (first.symbol, first.grid, first.params, pkg.calls()) == ("k", 64 % 7 + 1, ("X",), ["64"])
    assert cached_lowering(pkg.build, 64, disk_cache=cache) == first
    assert pkg.calls() == ["64"]
    assert cached_lowering(pkg.build, 65, disk_cache=cache).source.endswith("// 65\n")
    assert pkg.calls() == ["64", "65"]


def test_editing_the_package_lowers_again(pkg, fake_lowering, cache):
    cached_lowering(pkg.build, 64, disk_cache=cache)
    (pkg.root / "helper.py").write_text("TILE = 512  # edited\n")
    cached_lowering(pkg.build, 64, disk_cache=cache)
    assert pkg.calls() == ["64", "64"]


@pytest.mark.parametrize("damage", ["source", "record", "marker-only"])
def test_a_corrupt_entry_is_lowered_again(pkg, fake_lowering, cache, damage):
    good = cached_lowering(pkg.build, 64, disk_cache=cache)
    entry = cache.lookup(TAG, lowering_key(pkg.build, (64,)))
    if damage == "source":
        with open(os.path.join(entry, "kernel.cpp"), "a") as f:
            f.write("// tampered\n")
    elif damage == "record":
        os.remove(os.path.join(entry, "lowering.json"))
    else:
        for name in os.listdir(entry):
            if name != ".committed":
                os.remove(os.path.join(entry, name))
    with pytest.warns(RuntimeWarning, match="lowering again"):
        assert cached_lowering(pkg.build, 64, disk_cache=cache) == good
    assert pkg.calls() == ["64", "64"]
    assert cached_lowering(pkg.build, 64, disk_cache=cache) == good  # the rebuilt entry is a clean hit
    assert pkg.calls() == ["64", "64"]


def test_the_library_memoises_the_handle(pkg, fake_lowering, tmp_path, monkeypatch):
    monkeypatch.setenv("LCPKG_JIT_CACHE_DIR", str(tmp_path / "jit"))
    handle = pkg.LIB.tilelang_kernel(pkg.build, 64)
    assert (handle.name, handle.grid, handle.params) == ("k", 64 % 7 + 1, ("X",))
    assert pkg.LIB.tilelang_kernel(pkg.build, 64) is handle
    assert pkg.LIB.tilelang_kernel(pkg.build, 65) is not handle
    assert pkg.calls() == ["64", "65"]
    assert os.listdir(tmp_path / "jit" / "cache")  # the library's cache root holds the entries


def test_bad_builder():
    with pytest.raises(TypeError, match=re.escape("builder: expected a callable (cached_lowering), got")):
        cached_lowering("not a function", 1)


LAUNCH = textwrap.dedent('''\
    import json, sys, torch
    import lcpkg.kernels as k
    n = 16384
    a, b, c = torch.arange(n, dtype=torch.float32), torch.full((n,), 0.5), torch.zeros(n)
    k.LIB.tilelang_kernel(k.build, n).launch(None, a, b, c)
    print(json.dumps({"ok": bool(torch.equal(c, a + b)), "tilelang": "tilelang" in sys.modules}))
    ''')


def test_a_warm_process_never_imports_tilelang(pkg, tmp_path):
    """Two processes launch the same kernel on the twin: the first lowers it (TileLang imported), the
    second takes it from the cache (builder not called, TileLang never imported)."""
    if importlib.util.find_spec("tilelang") is None:  # not imported here: the children must start clean
        pytest.skip("tilelang is not installed")
    shared = os.environ.get("DJ_JIT_CACHE_DIR")  # compiled twin kernels are reused from the suite's cache
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), *sys.path]),
           "LCPKG_JIT_CACHE_DIR": os.pathsep.join([str(tmp_path / "jit"), *([shared] if shared else [])])}
    env.pop("LCPKG_FAKE", None)
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", LAUNCH], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs == [{"ok": True, "tilelang": True}, {"ok": True, "tilelang": False}]
    assert pkg.calls() == ["16384"]
