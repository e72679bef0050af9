"""Which matrix engine a host GEMM call runs on (deep_gemm/host/gemm.py ``engine_for``): the process's, except
that a dense GEMM with E4M3 B and 12-512 rows takes brgemm where vdpbf16ps is the automatic engine and
brgemm links; grouped calls and a forced engine keep the process's. Each gives float64 math's answer."""
import importlib

import pytest
import torch

from deep_gemm import host as H
from tests.testkit import calc_diff

from .quant import cast_fp8, dequant

gemm_module = importlib.import_module("deep_gemm.host.gemm")


@pytest.mark.parametrize(("process", "links", "b_type", "rows", "want"), [
    (("avx512bf16", False), True, 1, 11, "avx512bf16"), (("avx512bf16", False), True, 1, 12, "brgemm"),
    (("avx512bf16", False), True, 1, 512, "brgemm"), (("avx512bf16", False), True, 1, 513, "avx512bf16"),
    (("avx512bf16", False), True, 2, 64, "avx512bf16"),        # FP4 B: not measured
    (("avx512bf16", False), True, 0, 64, "avx512bf16"),        # BF16 B stays on ours
    (("avx512bf16", False), False, 1, 64, "avx512bf16"),       # brgemm does not link here
    (("avx512bf16", True), True, 1, 64, "avx512bf16"),         # forced
    (("fma", False), True, 1, 64, "fma"), (("brgemm", False), True, 1, 4, "brgemm")])
def test_policy(monkeypatch, process, links, b_type, rows, want):
    monkeypatch.setattr(gemm_module, "process_engine", lambda: process)
    monkeypatch.setattr(gemm_module, "brgemm_links", lambda: links)
    assert H.gemm_engine(rows, b_type) == want


@pytest.mark.parametrize(("mode", "rows", "want_brgemm"), [("dense", 11, False), ("dense", 12, True),
                                                           ("masked", 12, False), ("psum", 12, False),
                                                           ("m_indices", 12, False)])
def test_calls_take_the_engine_of_their_rows(monkeypatch, mode, rows, want_brgemm):
    """The kernel of the chosen engine runs and matches float64 math on the dequantised operands."""
    monkeypatch.setattr(gemm_module, "process_engine", lambda: ("avx512bf16", False))
    if not gemm_module.brgemm_links():
        pytest.skip("torch's CPU library here does not export oneDNN's brgemm")
    used = []
    real = gemm_module.kernel
    monkeypatch.setattr(gemm_module, "kernel", lambda *a, engine=None: used.append(engine) or real(*a, engine=engine))
    g, n, k = 3, 160, 256
    x, w = torch.randn(g * rows, k), torch.randn(g, n, k)
    a, sfa = cast_fp8(x, (1, 128), True)
    bs = [cast_fp8(w[e], (128, 128), True) for e in range(g)]
    b, sfb = torch.stack([q for q, _ in bs]), torch.stack([s for _, s in bs])
    want = torch.stack([dequant(a, sfa, (1, 128)).view(g, rows, k)[e] @ dequant(bs[e][0], bs[e][1], (128, 128)).T
                        for e in range(g)])
    if mode == "dense":
        d = torch.empty(rows, n, dtype=torch.bfloat16)
        H.gemm(a[:rows], sfa[:rows], b[0], sfb[0], d)
        got, want = d, want[0]
    elif mode == "masked":
        d = torch.empty(g, rows + 5, n, dtype=torch.bfloat16)
        pad = lambda t: torch.cat([t.view(g, rows, -1), torch.zeros(g, 5, t.size(-1), dtype=t.dtype)], 1)  # noqa: E731
        H.m_grouped_gemm_masked(pad(a.view(torch.uint8)).view(torch.float8_e4m3fn), pad(sfa), b, sfb, d,
                                torch.full((g,), rows, dtype=torch.int32))
        got = d[:, :rows]
    else:
        d = torch.empty(g * rows, n, dtype=torch.bfloat16)
        layout = (torch.arange(1, g + 1, dtype=torch.int32) * rows if mode == "psum"
                  else torch.arange(g, dtype=torch.int32).repeat_interleave(rows))
        H.m_grouped_gemm_contiguous(a, sfa, b, sfb, d, layout, use_psum_layout=mode == "psum", alignment=1,
                                    zero_padding=False)
        got = d.view(g, rows, n)
    assert used == [("brgemm" if want_brgemm else None)]
    assert calc_diff(got.double(), want.double()) < 1e-5


def test_process_engine_is_the_runtimes():
    """What the policy starts from is what the host runtime builds on, and it follows a hand edit of the
    runtime's default options (then no longer the automatic choice)."""
    from deep_gemm.host import _lib
    runtime = _lib.LIB.host_runtime
    engine, forced = _lib.process_engine()
    assert engine == runtime.default_compiler_options.matrix_engine
    assert forced == (runtime.backend.matrix.source is not None)
    other = "fma" if engine != "fma" else "avx512bf16"
    old = runtime.default_compiler_options.matrix_engine
    runtime.default_compiler_options.matrix_engine = other
    try:
        assert _lib.process_engine() == (other, True)
        assert H.gemm_engine(64, 1) == other
    finally:
        runtime.default_compiler_options.matrix_engine = old
