"""The host matrix engine (deepjit/backends/host/matrix_engine.py, deepjit/host/matrix_engine.hpp):
the automatic choice from the CPU's flags, DJ_HOST_MATRIX forcing one, the engine in the cache key,
clear errors for an engine this CPU or this deepjit lacks, and the shared BF16 micro-kernel on every
engine present, at ragged row counts and in each combine mode."""
import platform

import pytest
import torch

import deepjit
from deepjit.backends.host import HostCompilerOptions, cpu_identity
from deepjit.backends.host import matrix_engine as me
from deepjit.env import Env

CPU_FLAGS = cpu_identity()[1]
AVX512_BF16 = "fpu avx2 fma avx512f avx512bw avx512_bf16"
SAPPHIRE = AVX512_BF16 + " amx_tile amx_bf16 amx_int8"
ZEN3 = "fpu avx2 fma"


def engine_targets():
    """(engine, march) per engine, those this machine cannot build skipped with the reason; and the
    fma engine's portable loop (a target without AVX2) where the machine is x86."""
    out = []
    for engine in me.ENGINES:
        why = me.unavailable(engine, CPU_FLAGS, "DJ_HOST_MATRIX")
        out.append(pytest.param(engine, None, id=engine, marks=[pytest.mark.skip(reason=why)] if why else []))
    if platform.machine() == "x86_64":
        out.append(pytest.param("fma", "x86-64", id="fma-portable"))
    return out


ENGINE_SOURCE = r"""
#include <deepjit/host/gemm_bf16.hpp>
DJ_KERNEL(engine_id, "ptr") void engine_id(int64_t* out) { out[0] = DJ_HOST_MATRIX_ENGINE; }
"""
ENGINE_IDS = {"fma": 1, "avx512bf16": 2, "brgemm": 3}


def _runtime(tmp_path, monkeypatch, forced=None):
    if forced is None:
        monkeypatch.delenv("DJ_HOST_MATRIX", raising=False)
    else:
        monkeypatch.setenv("DJ_HOST_MATRIX", forced)
    monkeypatch.delenv("MEAPP_HOST_MATRIX", raising=False)
    monkeypatch.setenv("MEAPP_JIT_HOST_MARCH", "native")   # the automatic choice reads the CPU's flags only then
    return deepjit.Runtime(deepjit.Config(str(tmp_path), "MEAPP"), "host")


# ---- the choice, without compiling ---------------------------------------------------------------
@pytest.mark.parametrize("flags,march,expected", [
    (ZEN3, "native", "fma"),
    (AVX512_BF16, "native", "avx512bf16"),
    (SAPPHIRE, "native", "brgemm" if me.brgemm_missing() is None else "avx512bf16"),   # AMX: oneDNN's tiles
    (AVX512_BF16, "x86-64-v3", "fma"),       # the CPU's flags say nothing of another target
])
def test_automatic_choice(monkeypatch, flags, march, expected):
    monkeypatch.delenv("DJ_HOST_MATRIX", raising=False)
    monkeypatch.delenv("MEAPP_HOST_MATRIX", raising=False)
    choice = me.choose(Env("MEAPP"), flags, march)
    assert choice == me.Choice(expected, None)


def test_present_engines():
    brgemm = ["brgemm"] if me.brgemm_missing() is None else []
    assert me.present_engines(SAPPHIRE) == brgemm + ["avx512bf16", "fma"]
    assert me.present_engines(ZEN3) == brgemm + ["fma"]


def test_forced_by_the_prefixed_variable_first(monkeypatch):
    monkeypatch.setenv("DJ_HOST_MATRIX", "avx512bf16")
    monkeypatch.setenv("MEAPP_HOST_MATRIX", "FMA")
    assert me.choose(Env("MEAPP"), AVX512_BF16, "native") == me.Choice("fma", "MEAPP_HOST_MATRIX")


def test_invalid_name_raises_naming_the_variable(monkeypatch):
    monkeypatch.delenv("MEAPP_HOST_MATRIX", raising=False)
    monkeypatch.setenv("DJ_HOST_MATRIX", "tensorcore")
    with pytest.raises(deepjit.DeepJITError, match=r"DJ_HOST_MATRIX: 'tensorcore'.*brgemm, avx512bf16, fma$"):
        me.choose(Env("MEAPP"), ZEN3, "native")


def test_amx_points_to_brgemm(monkeypatch):
    """There is no hand-written AMX engine: the name is refused with the way to AMX tiles."""
    monkeypatch.delenv("MEAPP_HOST_MATRIX", raising=False)
    monkeypatch.setenv("DJ_HOST_MATRIX", "AMX")
    with pytest.raises(deepjit.DeepJITError, match=r"'AMX'.*DJ_HOST_MATRIX=brgemm runs on AMX tiles"):
        me.choose(Env("MEAPP"), SAPPHIRE, "native")


def test_brgemm_without_torch_library(monkeypatch):
    monkeypatch.setattr(me, "brgemm_missing", lambda: "no installed torch with lib/libtorch_cpu.so was found")
    assert me.automatic(SAPPHIRE) == "avx512bf16"
    assert me.present_engines(SAPPHIRE) == ["avx512bf16", "fma"]
    assert me.link_flags("brgemm") == []
    why = me.unavailable("brgemm", SAPPHIRE, "DJ_HOST_MATRIX")
    assert why.startswith("DJ_HOST_MATRIX=brgemm: no installed torch") and "engines present: avx512bf16, fma" in why


def test_unavailable_messages():
    lacking = me.unavailable("avx512bf16", ZEN3, "DJ_HOST_MATRIX")
    assert lacking.startswith("DJ_HOST_MATRIX=avx512bf16:")
    assert "lacks avx512f avx512bw avx512_bf16" in lacking and "engines present: " in lacking
    assert lacking.endswith(("engines present: brgemm, fma)", "engines present: fma)"))
    assert "unknown matrix engine" in me.unavailable("amx", SAPPHIRE, "DJ_HOST_MATRIX")
    assert me.unavailable("avx512bf16", SAPPHIRE, "DJ_HOST_MATRIX") is None
    assert me.unavailable("fma", ZEN3, "DJ_HOST_MATRIX") is None


def test_engine_is_in_the_cache_key(tmp_path, monkeypatch):
    runtime = _runtime(tmp_path, monkeypatch)
    keys = {e: runtime.cache_key(ENGINE_SOURCE, HostCompilerOptions(matrix_engine=e)) for e in me.ENGINES}
    assert len(set(keys.values())) == len(me.ENGINES)
    chosen = runtime.default_compiler_options.matrix_engine
    assert runtime.cache_key(ENGINE_SOURCE) == keys[chosen]
    assert me.define(chosen) in runtime.default_compiler_options.get_flags()


def test_unknown_engine_in_options_raises():
    with pytest.raises(deepjit.DeepJITError, match="unknown matrix engine 'gpu'"):
        HostCompilerOptions(optimize_level="3", matrix_engine="gpu").get_flags()


# ---- compiling on each engine ----------------------------------------------------------------------
@pytest.mark.parametrize("engine", me.ENGINES)
def test_forcing_an_engine(tmp_path, monkeypatch, engine):
    """Forced through DJ_HOST_MATRIX: a kernel built on an engine present reports that engine; one
    this machine lacks (or deepjit has not built) raises at compile time, naming the variable."""
    runtime = _runtime(tmp_path, monkeypatch, forced=engine)
    why = me.unavailable(engine, CPU_FLAGS, "DJ_HOST_MATRIX")
    if why is not None:
        with pytest.raises(deepjit.DeepJITError, match=f"DJ_HOST_MATRIX={engine}: ") as info:
            runtime.compile("engine_id", ENGINE_SOURCE)
        assert str(info.value) == why
        return
    kernel = runtime.compile("engine_id", ENGINE_SOURCE)
    out = torch.zeros(1, dtype=torch.int64)
    runtime.launch(kernel, None, out)
    assert out.item() == ENGINE_IDS[engine]


def test_automatic_engine_is_what_runs(tmp_path, monkeypatch):
    runtime = _runtime(tmp_path, monkeypatch)
    out = torch.zeros(1, dtype=torch.int64)
    runtime.launch(runtime.compile("engine_id", ENGINE_SOURCE), None, out)
    assert out.item() == ENGINE_IDS[me.automatic(CPU_FLAGS)]


MICRO_SOURCE = r"""
#include <deepjit/host/gemm_bf16.hpp>
using namespace dj::gemm;
template <int R>
void run(int64_t kp, const uint32_t* a, int64_t lda, const uint32_t* b, float* c, int64_t ldc, int64_t mode,
         bool acc, const float* sa, const float* sb) {
    const StridedRows rows{a, 1, lda};
    if (mode == 0) micro_kernel_core<R, Combine::Add>(kp, rows, b, c, ldc, acc, sa, sb);
    if (mode == 1) micro_kernel_core<R, Combine::Promote>(kp, rows, b, c, ldc, acc, sa, sb);
    if (mode == 2) micro_kernel_core<R, Combine::Rescale>(kp, rows, b, c, ldc, acc, sa, sb);
}
// C (R x 32) over R K-contiguous BF16 rows (lda words apart) and one packed B panel.
DJ_KERNEL(micro_r, "i64,i64,ptr,i64,ptr,ptr,i64,i64,i64,ptr,ptr")
void micro_r(int64_t r, int64_t kp, const uint32_t* a, int64_t lda, const uint32_t* b, float* c, int64_t ldc,
             int64_t mode, int64_t acc, const float* sa, const float* sb) {
    switch (r) {
    case 1: return run<1>(kp, a, lda, b, c, ldc, mode, acc != 0, sa, sb);
    case 3: return run<3>(kp, a, lda, b, c, ldc, mode, acc != 0, sa, sb);
    case 4: return run<4>(kp, a, lda, b, c, ldc, mode, acc != 0, sa, sb);
    case 5: return run<5>(kp, a, lda, b, c, ldc, mode, acc != 0, sa, sb);
    case 8: return run<8>(kp, a, lda, b, c, ldc, mode, acc != 0, sa, sb);
    case 14: return run<14>(kp, a, lda, b, c, ldc, mode, acc != 0, sa, sb);
    }
}
"""


@pytest.fixture(scope="module")
def micro_runtime(tmp_path_factory):
    return deepjit.Runtime(deepjit.Config(str(tmp_path_factory.mktemp("micro_r")), "MEMICRO"), "host")


@pytest.mark.parametrize("engine,march", engine_targets())
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 8, 14])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_micro_kernel_on_each_engine(micro_runtime, engine, march, rows, mode):
    """Ragged row counts (groups of 4 and their remainders on the AVX2 path), every combine mode,
    accumulating or not, against FP64 products of the same BF16 values."""
    kernel = micro_runtime.compile("micro_r", MICRO_SOURCE, HostCompilerOptions(matrix_engine=engine, march=march))
    for kp, accumulate in ((1, False), (45, True), (64, False)):
        g = torch.Generator().manual_seed(1000 * rows + 10 * mode + kp)
        lda, ldc = kp + 3, 37
        a = torch.randn(rows, 2 * lda, generator=g).bfloat16()
        bmat = torch.randn(32, 2 * kp, generator=g).bfloat16()
        panel = bmat.view(torch.int32).t().contiguous()         # word [p][j] = b[j][2p] | b[j][2p + 1] << 16
        c0 = torch.randn(rows, ldc, generator=g)
        sa, sb = torch.rand(rows, generator=g) + 0.5, torch.rand(32, generator=g) + 0.5
        c = c0.clone()
        micro_runtime.launch(kernel, None, rows, kp, a, lda, panel, c, ldc, mode, int(accumulate), sa, sb)
        prod = a[:, :2 * kp].double() @ bmat.double().t()
        base = c0[:, :32].double() if accumulate else torch.zeros(rows, 32, dtype=torch.float64)
        if mode == 1:
            prod = prod * sa.double()[:, None] * sb.double()[None, :]
        if mode == 2 and accumulate:
            base = base * sa.double()[:, None]
        torch.testing.assert_close(c[:, :32].double(), base + prod, rtol=1e-5, atol=1e-5 * (1 + kp) ** 0.5)
        assert torch.equal(c[:, 32:], c0[:, 32:]), "columns past the tile were written"
