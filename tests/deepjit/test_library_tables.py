"""Every library's backend table: each op has a reference and a host entry (or is listed below with
the reason it has none), forcing a backend an op lacks raises naming the op, and each package
registers its table's Ascend kernels through the deepjit.ascend_kernels entry point."""
import importlib
import importlib.metadata
import os

import pytest
import tomllib

from deepjit import BackendUnavailableError
from deepjit.tilelang_route import codegen_all, samples
from deepjit.tilelang_route.lowering import AscendKernelSpec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (package folder, import name, module holding TABLE, env prefix)
LIBRARIES = [("deepgemm_ascend", "deep_gemm", "deep_gemm._dispatch", "DG"),
             ("tilekernels", "tile_kernels", "tile_kernels._lib", "TK"),
             ("flashmla", "flash_mla", "flash_mla._dispatch", "FMLA"),
             ("deepep_ascend", "deep_ep", "deep_ep._dispatch", "EP")]
# The public ops each table must serve (the canonical ops the public names reduce to).
EXPECTED = {
    "deep_gemm": {"fp8_fp4_gemm_nt", "bf16_gemm_nt", "m_grouped_fp8_fp4_gemm_nt", "m_grouped_bf16_gemm_nt",
                  "m_grouped_fp8_fp4_gemm_nt_masked", "m_grouped_bf16_gemm_nt_masked", "k_grouped_fp8_gemm_tn",
                  "k_grouped_bf16_gemm_tn", "mqa_logits", "paged_mqa_logits", "hc_prenorm_gemm", "bf16_einsum",
                  "fp8_bmm"},
    "tile_kernels": {"per_token_cast", "per_block_cast", "per_channel_cast", "per_channel_cast_fused", "cast_back",
                     "per_block_cast_lossless", "swiglu_forward_and_per_token_cast",
                     "swiglu_backward_and_per_token_cast", "batched_transpose", "topk_gate", "top2_sum_gate",
                     "group_count", "get_fused_mapping", "expand_to_fused", "reduce_fused", "engram_hash",
                     "engram_gate_fwd", "engram_gate_bwd", "grad_w_reduce", "expand_to_mhc", "mhc_post",
                     "mhc_pre_big_fuse"},
    "flash_mla": {"sparse_decode", "dense_decode", "sparse_prefill", "varlen_attention"},
    "deep_ep": {"dispatch_combine", "low_latency", "per_token_cast_to_fp8"},
}


def _table(module):
    return importlib.import_module(module).TABLE


@pytest.fixture(autouse=True)
def _unforced(monkeypatch):
    for _, _, _, prefix in LIBRARIES:
        monkeypatch.delenv(f"{prefix}_BACKEND", raising=False)
    monkeypatch.delenv("DJ_BACKEND", raising=False)


@pytest.mark.parametrize("folder,name,module,prefix", LIBRARIES)
def test_every_op_has_a_reference_and_a_host_entry(folder, name, module, prefix):
    table = _table(module)
    ops = {e.name for e in table}
    assert EXPECTED[name] <= ops, EXPECTED[name] - ops
    for entry in table:
        assert callable(entry.reference.fn), entry.name
        assert entry.host is not None and callable(entry.host.fn), entry.name
        assert entry.host.supports, entry.name
        assert table.backend(entry.name, "cpu") == "host"
        if entry.ascend is None:
            assert table.backend(entry.name, "npu") == "reference"  # npu tensors keep the reference
        else:
            assert callable(entry.ascend.fn) and entry.ascend.supports, entry.name
            assert table.backend(entry.name, "npu") == "ascend"


@pytest.mark.parametrize("folder,name,module,prefix", LIBRARIES)
@pytest.mark.parametrize("device", ["cpu", "npu"])
def test_forcing_ascend_names_the_op(monkeypatch, folder, name, module, prefix, device):
    monkeypatch.setenv(f"{prefix}_BACKEND", "ascend")
    for entry in (e for e in _table(module) if e.ascend is None):
        with pytest.raises(BackendUnavailableError, match=rf"^{name}\.{entry.name} has no ascend implementation "
                                                           rf"\({prefix}_BACKEND=ascend\)"):
            _table(module).run(entry.name, device)


@pytest.mark.parametrize("folder,name,module,prefix", LIBRARIES)
def test_forcing_reference_and_host(monkeypatch, folder, name, module, prefix):
    table = _table(module)
    monkeypatch.setenv(f"{prefix}_BACKEND", "reference")
    assert all(table.backend(e.name, "cpu") == "reference" for e in table)
    monkeypatch.setenv(f"{prefix}_BACKEND", "host")
    assert all(table.backend(e.name, "cpu") == "host" for e in table)


@pytest.mark.parametrize("folder,name,module,prefix", LIBRARIES)
def test_the_entry_point_lists_the_tables_ascend_kernels(folder, name, module, prefix):
    with open(os.path.join(ROOT, folder, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    value = project["entry-points"][codegen_all.ENTRY_POINT_GROUP][name]
    ep = importlib.metadata.EntryPoint(name, value, codegen_all.ENTRY_POINT_GROUP)
    specs = ep.load()()
    assert all(isinstance(s, AscendKernelSpec) for s in specs)
    if not any(e.ascend is not None for e in _table(module)):
        assert specs == []
    assert project["optional-dependencies"]["npu"] == ["torch-npu"]


def fake_kernels():
    return [AscendKernelSpec("add", samples.vector_add, "vector")]


def test_codegen_takes_the_registered_entry_points(tmp_path, monkeypatch):
    fake = importlib.metadata.EntryPoint("fake_lib", f"{__name__}:fake_kernels", codegen_all.ENTRY_POINT_GROUP)
    monkeypatch.setattr(codegen_all, "registered", lambda: [fake])
    results = codegen_all.run(str(tmp_path), only="fake_lib", log=lambda *_: None)
    assert [(r["library"], r["name"]) for r in results] == [("fake_lib", "add")]
