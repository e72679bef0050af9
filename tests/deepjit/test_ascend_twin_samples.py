"""deepjit's three TileLang Ascend samples (vector, cube and mixed kernels) run on the Ascend twin
through run_on_twin and match torch: the add bit-exactly, the BF16 GEMMs to FP32 tolerance; a
launch after the first compile takes well under a few seconds."""
import re
import time

import pytest
import torch

pytest.importorskip("tilelang")

from deepjit.tilelang_route import run_on_twin, samples  # noqa: E402


def test_vector_add_is_bit_exact():
    n = 16384
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(n, generator=g), torch.randn(n, generator=g) * 1e3
    c = torch.full((n,), float("nan"))
    counters = run_on_twin(samples.vector_add(n), a, b, c)
    assert torch.equal(c, a + b)
    assert counters.total_bytes("MTE2") == 2 * n * 4 and counters.total_bytes("MTE3") == n * 4
    assert counters.num_blocks == 8


@pytest.mark.parametrize("name", ["gemm_nt", "gemm_nt_relu"])
def test_gemm_matches_torch(name):
    m, n, k = 256, 256, 256
    g = torch.Generator().manual_seed(2)
    a = torch.randn(m, k, generator=g).bfloat16()
    b = torch.randn(n, k, generator=g).bfloat16()
    c = torch.zeros(m, n)
    func = getattr(samples, name)(m, n, k)
    run_on_twin(func, a, b, c)  # compiles (cached across runs)
    c.zero_()
    start = time.perf_counter()
    counters = run_on_twin(func, a, b, c)
    assert time.perf_counter() - start < 5
    ref = a.float() @ b.float().T
    if name.endswith("relu"):
        ref = ref.relu()
        assert counters.total_bytes("MTE3") == m * n * 4  # the vector cores store C
    torch.testing.assert_close(c, ref, rtol=1e-5, atol=1e-4)
    assert counters.cube_macs == m * n * k


def test_run_on_twin_checks_its_tensors():
    func = samples.vector_add(16384)
    a = torch.zeros(16384)
    with pytest.raises(TypeError, match=r": expected 3 tensors \("):
        run_on_twin(func, a, a)
    with pytest.raises(ValueError, match=r"tensor C: expected shape \(16384,\), got \(8,\)"):
        run_on_twin(func, a, a, torch.zeros(8))
    with pytest.raises(ValueError, match="tensor B: expected dtype float32, got float16"):
        run_on_twin(func, a, a.half(), a)


def test_library_ascend_kernel_from_a_primfunc_runs_on_the_twin(tmp_path, monkeypatch):
    import deepjit

    pkg = tmp_path / "tlglue"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    lib = deepjit.KernelLibrary("tlglue", "TLG", str(pkg / "__init__.py"), "0.1")
    monkeypatch.setenv("TLG_BACKEND", "ascend")
    assert lib.backend_for(torch.device("cpu"), has_ascend=True, op="add") == "ascend"
    kernel = lib.ascend_kernel("vector_add", samples.vector_add(8192, tile=1024, num_blocks=4))
    a, b = torch.randn(8192), torch.randn(8192)
    c = torch.zeros(8192)
    counters = kernel.launch(None, a, b, c)  # TileLang's grid is the default block count
    assert torch.equal(c, a + b) and counters.num_blocks == 4
    with pytest.raises(ValueError, match=re.escape("defines: expected none for a TileLang PrimFunc (they apply to package sources), got")):
        lib.ascend_kernel("vector_add", samples.vector_add(), {"X": 1})
