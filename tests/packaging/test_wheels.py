"""Each distribution builds a wheel offline (no index, no build isolation) that carries its licence and a
version naming the upstream release it mirrors, and the wheels install into a fresh virtual environment
(no index, no dependencies resolved: torch comes from the running interpreter's site-packages) where the
packages import from the installed files and run an op."""
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DISTS = ("deepjit", "deepgemm_ascend", "flashmla", "tilekernels", "deepep_ascend", "integration")
# wheel name prefix -> the local version label naming the upstream release
UPSTREAM_WHEELS = {"deep_gemm_ascend": "+deepgemm.", "flash_mla_ascend": "+flashmla.",
                   "tile_kernels_ascend": "+tilekernels.", "deep_ep_ascend": "+deepep."}

pytestmark = pytest.mark.skipif(importlib.util.find_spec("setuptools") is None,
                                reason="the build backend (setuptools) is not installed in this interpreter")


def _run(*cmd, **kw):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    out, src = tmp_path_factory.mktemp("wheels"), tmp_path_factory.mktemp("src")
    for d in DISTS:   # built from copies: setuptools writes build/ and *.egg-info next to the sources
        shutil.copytree(ROOT / d, src / d, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-index", "--no-deps", "--no-build-isolation",
         "-w", str(out), *(str(src / d) for d in DISTS))
    found = sorted(out.glob("*.whl"))
    assert len(found) == len(DISTS), [w.name for w in found]
    return found


def test_wheels_carry_licence_and_upstream_version(wheels):
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            licences = [n for n in names if ".dist-info/" in n and "LICENSE" in n]
            assert licences, f"{wheel.name}: no licence file"
            assert "MIT License" in z.read(licences[0]).decode()
            metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        assert "License-Expression: MIT" in metadata or "License: MIT" in metadata
        for dist, marker in UPSTREAM_WHEELS.items():
            if wheel.name.startswith(dist + "-"):
                assert marker in wheel.name, f"{wheel.name}: no upstream release in the version"


def test_fresh_venv_install_imports_and_runs(wheels, tmp_path):
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", str(venv))
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-deps",
         *map(str, wheels))
    # torch (and numpy) from this interpreter's site-packages, after the venv's own (a .pth line: the
    # checkout's editable installs are .pth files there too, which a plain path line does not process)
    venv_site = next((venv / "lib").glob("python*/site-packages"))
    (venv_site / "zz_torch_from_parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    check = (
        "import torch, deep_gemm, flash_mla, tile_kernels, deep_ep, deepseek_layers\n"
        "root = " + repr(str(ROOT)) + "\n"
        "for m in (deep_gemm, flash_mla, tile_kernels, deep_ep):\n"
        "    assert not m.__file__.startswith(root), m.__file__\n"
        "assert '+deepgemm.2.6.1' in deep_gemm.__version__\n"
        "a, b = torch.randn(8, 64).bfloat16(), torch.randn(16, 64).bfloat16()\n"
        "d = torch.empty(8, 16, dtype=torch.bfloat16)\n"
        "deep_gemm.bf16_gemm_nt(a, b, d)\n"
        "assert (d.float() - a.float() @ b.float().T).abs().max() < 0.1\n"
        "print('ok')\n")
    env = {**os.environ, "DG_BACKEND": "reference", "PYTHONPATH": ""}
    assert _run(str(python), "-c", check, cwd=tmp_path, env=env).strip().endswith("ok")
