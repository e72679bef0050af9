"""TileLang's Ascend code generation reaching DeepJIT: lowering, entry/kind reading, the compile
hook (with a fake toolkit, and with the real bisheng where installed) and the codegen driver."""
import json
import os
import sys
import types

import pytest

tilelang = pytest.importorskip("tilelang", reason="tilelang is not installed")

from deepjit.backends.ascend import find_home  # noqa: E402
from deepjit.errors import DeepJITError, ToolchainNotFoundError  # noqa: E402
from deepjit.tilelang_route import (  # noqa: E402  # noqa: E402
    AscendKernelSpec,
    codegen_all,
    entry_point,
    install,
    kernel_kind,
    lower,
    route_config,
    samples,
    uninstall,
)

from .helpers import list_entries, make_fake_ascend_toolkit, read_calls  # noqa: E402


def test_entry_and_kind_from_source():
    assert entry_point('extern "C" __global__ __vector__ void k(__gm__ int* x) {}') == "k"
    assert kernel_kind('extern "C" __global__ __mix__(1, 2) void k(__gm__ int* x) {}') == "mix"
    assert kernel_kind('__simt_vf__ inline void f() {}\nextern "C" __global__ __cube__ void g() {}') == "cube"
    with pytest.raises(DeepJITError, match="found 2"):
        entry_point('extern "C" __global__ __cube__ void a() {}\nextern "C" __global__ __cube__ void b() {}')
    with pytest.raises(DeepJITError, match="cannot tell the core type"):
        kernel_kind('extern "C" __global__ void a() {}')


def test_spec_validation():
    with pytest.raises(ValueError, match="kind: expected one of"):
        AscendKernelSpec("x", lambda: None, "simt")
    with pytest.raises(ValueError, match="letters, digits, or underscores"):
        AscendKernelSpec("bad-name", lambda: None, "cube")


@pytest.mark.parametrize("build, kind, entry", [(samples.vector_add, "vector", "vector_add_kernel"),
                                                (samples.gemm_nt, "cube", "gemm_nt_kernel")])
def test_samples_lower_to_the_intended_core_type(build, kind, entry):
    lowered = lower(build())
    assert (lowered.kind, lowered.entry) == (kind, entry)
    assert lowered.source.startswith("#include <tl_templates/ascend/common.h>")


@pytest.fixture(autouse=True)
def private_tilelang_cache(tmp_path, monkeypatch):
    # TileLang's own kernel cache would answer before the compile hook runs.
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "tilelang-cache"))
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")


def test_hook_routes_tilelang_source_through_deepjit(tmp_path, monkeypatch):
    import deepjit

    home = make_fake_ascend_toolkit(tmp_path / "cann")
    monkeypatch.setenv("ASCEND_HOME_PATH", home)
    monkeypatch.setenv("TL_ASCEND_JIT_CACHE_DIR", str(tmp_path / "cache"))
    runtime = deepjit.Runtime(route_config(), "ascend")
    install(runtime)
    try:
        kernel = tilelang.compile(samples.vector_add(), target="ascend")
    finally:
        uninstall()
    entries = list_entries(tmp_path / "cache")
    assert len(entries) == 1 and entries[0].startswith("vector_add_kernel.")
    entry = tmp_path / "cache" / "cache" / entries[0]
    assert (entry / "kernel.asc").read_text() == kernel.get_kernel_source()
    bisheng = read_calls(home)[0]["argv"]
    assert "--npu-arch=dav-3510" in bisheng and "-std=c++20" in bisheng
    from tilelang.env import TILELANG_TEMPLATE_PATH
    assert f"-I{os.path.normpath(TILELANG_TEMPLATE_PATH)}" in bisheng
    # The templates are folded into the key through the extra signature.
    assert json.loads((entry / "meta.json").read_text())["config"]["extra_signature"].startswith(
        f"tilelang-{tilelang.__version__}-templates-")


def _real_toolkit():
    try:
        home = find_home()
    except ToolchainNotFoundError as exc:
        return None, str(exc)
    if "fake bisheng" in open(os.path.join(home, "bin", "bisheng"), "rb").read(4096).decode(errors="replace"):
        return None, "only a fake toolkit is configured"
    return home, ""


def test_hook_with_the_real_bisheng(tmp_path, monkeypatch):
    home, why = _real_toolkit()
    if home is None:
        pytest.skip(f"no Ascend toolkit with bisheng on this machine, so the compile step is skipped ({why})")
    import deepjit
    monkeypatch.setenv("TL_ASCEND_JIT_CACHE_DIR", str(tmp_path / "cache"))
    install(deepjit.Runtime(route_config(), "ascend"))
    try:
        tilelang.compile(samples.vector_add(), target="ascend")
    finally:
        uninstall()
    (entry,) = list_entries(tmp_path / "cache")
    assert os.path.getsize(tmp_path / "cache" / "cache" / entry / "kernel.o") > 0


# ---- the codegen driver ----------------------------------------------------------------------------
def test_codegen_driver_on_the_samples(tmp_path):
    results = codegen_all.run(str(tmp_path), modules=[codegen_all.SAMPLES], log=lambda *_: None)
    assert {r["name"]: r["kind"] for r in results} == {"vector_add": "vector", "gemm_nt": "cube",
                                                       "gemm_nt_relu": "mix"}
    for r in results:
        folder = tmp_path / f"deepjit.{r['name']}"
        info = json.loads((folder / "kernel.json").read_text())
        source = (folder / "kernel.asc").read_text()
        assert info == {"library": "deepjit", "name": r["name"], "entry": r["entry"], "kind": r["kind"],
                        "source": "kernel.asc"}
        assert f" void {info['entry']}(" in source and kernel_kind(source) == info["kind"]


def _registry(monkeypatch, name, specs=None, error=None):
    module = types.ModuleType(name)

    def kernels():
        if error:
            raise error
        return specs

    module.kernels = kernels
    monkeypatch.setitem(sys.modules, name, module)
    return name


def test_codegen_driver_fails_loudly_and_skips_missing(tmp_path, monkeypatch, capsys):
    wrong_kind = _registry(monkeypatch, "fake_lib_a.ascend.kernel_specs",
                           [AscendKernelSpec("add", samples.vector_add, "cube")])
    broken = _registry(monkeypatch, "fake_lib_b.ascend.kernel_specs",
                       [AscendKernelSpec("bad", lambda: samples.vector_add(n=1000), "vector")])
    with pytest.raises(SystemExit) as exc:
        codegen_all.run(str(tmp_path), modules=[wrong_kind, broken, "no_such_library.ascend.kernel_specs"])
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert "lowered to a vector kernel, declared cube" in out
    assert "fake_lib_b.bad" in out and "n: expected a multiple of tile * num_blocks = 8192, got 1000" in out
    assert "note: no_such_library.ascend.kernel_specs not found; skipped" in out


def test_codegen_command_line(tmp_path, capsys):
    assert codegen_all.main(["--out", str(tmp_path), "--only", "deepjit.gemm_nt_relu"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deepjit.gemm_nt_relu"]
    assert json.loads((tmp_path / "deepjit.gemm_nt_relu" / "kernel.json").read_text())["kind"] == "mix"
    assert "1 Ascend kernel(s) lowered" in capsys.readouterr().out
