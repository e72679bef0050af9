"""Every library's backend table: each op has a reference and a host entry (or is listed below with
the reason it has none), forcing a backend an op lacks raises naming the op, and each package
registers its table's Ascend kernels through the deepjit.ascend_kernels entry point and its twin-check
module through the deepjit.ascend_checks entry point."""
import importlib
import importlib.metadata
import inspect
import os
import pkgutil
import types

import pytest
import tomllib

from deepjit import BackendUnavailableError
from deepjit.tilelang_route import ascend_check, codegen_all, samples
from deepjit.tilelang_route.lowering import AscendKernelSpec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (package folder, import name, module holding TABLE, env prefix)
LIBRARIES = [("deepgemm_ascend", "deep_gemm", "deep_gemm._dispatch", "DG"),
             ("tilekernels", "tile_kernels", "tile_kernels._dispatch", "TK"),
             ("flashmla", "flash_mla", "flash_mla._dispatch", "FMLA"),
             ("deepep_ascend", "deep_ep", "deep_ep._dispatch", "EP")]
# Public names that are no kernel op, each with why (every other public callable must reach its table).
NOT_OPS = {
    "deep_gemm": {
        "settings (runtime.py): numbers kept for API parity, no tensor work": (
            "set_num_sms", "get_num_sms", "set_tc_util", "get_tc_util", "set_ignore_compile_dims",
            "get_ignore_compile_dims", "set_block_size_multiple_of", "get_block_size_multiple_of", "set_pdl",
            "get_pdl", "set_psum_layout_form", "get_psum_layout_form", "use_deterministic_algorithms",
            "get_deterministic_algorithms", "set_npu_arch", "get_npu_arch", "get_k_alignment_for_contiguous_layout",
            "get_m_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout",
            "get_theoretical_mk_alignment_for_contiguous_layout", "set_mk_alignment_for_contiguous_layout",
            "get_tma_aligned_size"),
        "the library baseline: the vendor BLAS by definition (cuBLASLt upstream, torch's GEMM here)": (
            "cublaslt_gemm_nt", "cublaslt_gemm_nn", "cublaslt_gemm_tn", "cublaslt_gemm_tt"),
        "upstream's deep_gemm.utils: plain-torch helpers that prepare test inputs, not kernels upstream either": (
            "align", "ceil_div", "ceil_to_ue8m0", "cast_back_from_fp4", "pack_ue8m0_to_int", "pack_ue8m0_to_short",
            "per_block_cast_to_fp8", "per_channel_cast_to_fp8", "per_custom_dims_cast_to_fp8",
            "per_token_cast_to_fp4", "per_token_cast_to_fp8", "transpose_packed_fp4", "unpack_ue8m0_from_int",
            "unpack_ue8m0_from_short"),
        "Mega MoE's buffer object and its allocation (the ops on it are fp8_fp4_mega_moe / bf16_mega_moe)": (
            "SymmBuffer", "get_symm_buffer_for_mega_moe"),
    },
    "tile_kernels": {
        "an enum of scoring functions": ("ScoringFunc",),
        "upstream's quant.common debugging helper (plain torch upstream too)": ("unpack_from_e2m1fn_x2",),
        "upstream's TF32 rounding helper for callers' weights (a bit-level add, plain torch)": ("round_to_tf32",),
    },
    "flash_mla": {
        "upstream's test helpers (FlashMLA tests/quant.py, tests/lib.py: plain torch there too) that build and "
        "read caches for tests": ("quantize_k_cache", "dequantize_k_cache", "abs_indices_to_indices_in_kvcache"),
        "the schedule object and its factory: no work (these paths run every request in one piece)": (
            "FlashMLASchedMeta", "get_mla_metadata"),
        "an enum of cache formats": ("KVCacheFormat",),
    },
    "deep_ep": {
        "buffer plumbing: allocation, configuration, handles, events and errors (the engines they drive are "
        "the table's)": ("BufferAllocator", "BufferBase", "Config", "EPHandle", "EventHandle", "EventOverlap",
                          "BufferBrokenError", "get_buffer_size_hint", "get_logical_domain_size",
                          "get_physical_domain_size", "get_num_allocation_alignment", "get_num_rdma_alignment",
                          "get_num_tma_alignment"),
        "communicator lifetime": ("destroy_all_managed_hccl_comm", "destroy_all_managed_nccl_comm"),
        "point-to-point transfers through torch.distributed: communication only, no local kernel": ("PPBuffer",),
    },
}
# Public ops that do tensor work but have no table entry yet, each with why (none left).
PENDING: dict[str, dict[str, str]] = {}
# tile_kernels' public surface: upstream's kernel modules and packages (not its torch references or tests).
_TK_PRIVATE = ("torch", "testing", "reference", "host", "ascend", "config", "utils", "torch_ops")


def _public_modules(name):
    if name != "tile_kernels":
        return [importlib.import_module(name)]
    package = importlib.import_module(name)
    found = []
    for info in pkgutil.walk_packages(package.__path__, f"{name}."):
        parts = info.name.split(".")[1:]
        if parts[0] not in _TK_PRIVATE and not any(p.startswith("_") for p in parts):
            module = importlib.import_module(info.name)
            if hasattr(module, "__all__"):
                found.append(module)
    return found


def public_callables(name):
    """{public name: object} of every callable a library exports (``__all__``), modules left out."""
    out = {}
    for module in _public_modules(name):
        for attr in module.__all__:
            obj = getattr(module, attr)
            if callable(obj) and not isinstance(obj, types.ModuleType):
                out[attr] = obj
    return out


def _codes(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def reached_ops(obj, package, table_ops, seen=None) -> set[str]:
    """Table op names that ``obj`` can reach: string constants in its code and in the code of every
    function, method and class of ``package`` it names, followed transitively."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return set()
    seen.add(id(obj))
    if isinstance(getattr(obj, "__self__", None), type):  # a bound classmethod: autograd's Fn.apply
        obj = obj.__self__
    if isinstance(obj, type):
        if not obj.__module__.startswith(package):
            return set()
        found = set()
        for cls in (c for c in obj.__mro__ if c.__module__.startswith(package)):
            for member in vars(cls).values():
                member = getattr(member, "__func__", getattr(member, "fget", member))
                found |= reached_ops(member, package, table_ops, seen)
        return found
    fn = inspect.unwrap(obj)
    if not isinstance(fn, types.FunctionType) or not fn.__module__.startswith(package):
        return set()
    found = set()
    for code in _codes(fn.__code__):
        for const in code.co_consts:
            for s in (const if isinstance(const, tuple) else (const,)):
                if isinstance(s, str) and s in table_ops:
                    found.add(s)
        for name in code.co_names:
            target = fn.__globals__.get(name)
            if isinstance(target, types.ModuleType):  # module.attr: follow the attributes this code names
                if target.__name__.startswith(package):
                    for attr in code.co_names:
                        if hasattr(target, attr):
                            found |= reached_ops(getattr(target, attr), package, table_ops, seen)
            elif target is not None:
                found |= reached_ops(target, package, table_ops, seen)
    return found


def _table(module):
    return importlib.import_module(module).TABLE


@pytest.fixture(autouse=True)
def _unforced(monkeypatch):
    for _, _, _, prefix in LIBRARIES:
        monkeypatch.delenv(f"{prefix}_BACKEND", raising=False)
    monkeypatch.delenv("DJ_BACKEND", raising=False)


@pytest.mark.parametrize("folder,name,module,prefix", LIBRARIES)
def test_every_public_op_is_served_by_the_table(folder, name, module, prefix):
    table_ops = {e.name for e in _table(module)}
    public = public_callables(name)
    exempt = {n for names in NOT_OPS.get(name, {}).values() for n in names} | set(PENDING.get(name, {}))
    assert exempt <= set(public), f"stale exemptions: {sorted(exempt - set(public))}"
    unserved = sorted(n for n, obj in public.items()
                      if n not in exempt and not reached_ops(obj, name, table_ops))
    assert not unserved, f"{name}: public ops that reach no table entry: {unserved}"


@pytest.mark.parametrize("folder,name,module,prefix", LIBRARIES)
def test_every_op_has_a_reference_and_a_host_entry(folder, name, module, prefix):
    table = _table(module)
    for entry in table:
        assert callable(entry.reference.fn), entry.name
        assert entry.host is not None and callable(entry.host.fn), entry.name
        assert entry.host.fn is not entry.reference.fn, entry.name
        assert entry.host.supports, entry.name
        assert table.backend(entry.name, "cpu") == "host"
        if entry.ascend is None:
            assert table.backend(entry.name, "npu") == "reference"  # npu tensors keep the reference
        else:
            assert callable(entry.ascend.fn) and entry.ascend.supports, entry.name
            assert table.backend(entry.name, "npu") == "ascend"


class _Table:
    def run(self, op, device):
        return op


_TABLE = _Table()


def _dispatching_helper():
    return _TABLE.run("served", "cpu")


def _served():
    """A public op whose table call sits in a helper, as the libraries' aliases have them."""
    return _dispatching_helper()


def _unserved():
    return None


def test_the_walk_finds_an_op_missing_from_the_table():
    """The public-API test fails for an op that reaches no entry, and follows helpers to the ones that do."""
    table_ops = {"served"}
    assert reached_ops(_served, __name__, table_ops) == {"served"}
    assert reached_ops(_unserved, __name__, table_ops) == set()


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


def _project(folder: str) -> dict:
    with open(os.path.join(ROOT, folder, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


@pytest.mark.parametrize("folder,name,module,prefix", LIBRARIES)
def test_the_entry_point_lists_the_tables_ascend_kernels(folder, name, module, prefix):
    project = _project(folder)
    value = project["entry-points"][codegen_all.ENTRY_POINT_GROUP][name]
    ep = importlib.metadata.EntryPoint(name, value, codegen_all.ENTRY_POINT_GROUP)
    specs = ep.load()()
    assert all(isinstance(s, AscendKernelSpec) for s in specs)
    if not any(e.ascend is not None for e in _table(module)):
        assert specs == []
    assert project["optional-dependencies"]["npu"] == ["torch-npu"]


def _check_registration(project: dict, name: str) -> list[str]:
    """What is wrong with a package's ``deepjit.ascend_checks`` registration (nothing: empty)."""
    group = ascend_check.CHECKS_ENTRY_POINT_GROUP
    value = project.get("entry-points", {}).get(group, {}).get(name)
    if value is None:
        return [f"{name}: no {group} entry point"]
    if not callable(getattr(importlib.metadata.EntryPoint(name, value, group).load(), "cases", None)):
        return [f"{name}: {value} has no cases()"]
    return []


@pytest.mark.parametrize("folder,name,module,prefix", LIBRARIES)
def test_the_check_entry_point_names_the_twin_check_module(folder, name, module, prefix):
    """make ascend-check finds each library's cases through this entry point (as installed: make setup
    reinstalls when a pyproject.toml changes)."""
    project = _project(folder)
    assert _check_registration(project, name) == []
    installed = {ep.name: ep.value for ep in ascend_check.registered_checks()}
    assert installed.get(name) == project["entry-points"][ascend_check.CHECKS_ENTRY_POINT_GROUP][name]


def test_a_missing_check_registration_is_named():
    project = _project("deepgemm_ascend")
    group = project["entry-points"].pop(ascend_check.CHECKS_ENTRY_POINT_GROUP)
    assert _check_registration(project, "deep_gemm") == ["deep_gemm: no deepjit.ascend_checks entry point"]
    project["entry-points"][ascend_check.CHECKS_ENTRY_POINT_GROUP] = {**group, "deep_gemm": "deep_gemm.ascend"}
    assert _check_registration(project, "deep_gemm") == ["deep_gemm: deep_gemm.ascend has no cases()"]


def fake_kernels():
    return [AscendKernelSpec("add", samples.vector_add, "vector")]


def test_codegen_takes_the_registered_entry_points(tmp_path, monkeypatch):
    fake = importlib.metadata.EntryPoint("fake_lib", f"{__name__}:fake_kernels", codegen_all.ENTRY_POINT_GROUP)
    monkeypatch.setattr(codegen_all, "registered", lambda: [fake])
    results = codegen_all.run(str(tmp_path), only="fake_lib", log=lambda *_: None)
    assert [(r["library"], r["name"]) for r in results] == [("fake_lib", "add")]
