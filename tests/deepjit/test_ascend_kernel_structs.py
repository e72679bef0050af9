"""Every hand-written Ascend kernel (``<pkg>/ascend/*.asc`` of each library) takes exactly one named
argument struct, ``__gm__ const <Struct>* args``, declared in the package's ``ascend/kernel_args.h`` in
plain fields that deepjit.descriptors reads; the twin finds it through the kernel's includes
(deepjit.kernel_args). A kernel with a positional parameter list fails here."""
import pathlib
import re

import pytest

from deepjit import descriptors
from deepjit.backends.ascend_twin.source import args_struct, parse_entry

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = {"deep_gemm": ROOT / "deepgemm_ascend" / "deep_gemm", "flash_mla": ROOT / "flashmla" / "flash_mla",
            "deep_ep": ROOT / "deepep_ascend" / "deep_ep", "symm": ROOT / "deepjit" / "deepjit" / "symm"}
KERNELS = sorted((name, path) for name, pkg in PACKAGES.items() for path in (pkg / "ascend").glob("*.asc"))


def test_the_kernels_are_found():
    assert {name for name, _ in KERNELS} == set(PACKAGES) and len(KERNELS) >= 9


@pytest.mark.parametrize(("package", "path"), KERNELS, ids=[p.name for _, p in KERNELS])
def test_entry_takes_one_named_struct(package, path):
    entry = parse_entry(path.read_text())
    assert len(entry.params) == 1, f"{entry.name}: {len(entry.params)} parameters, expected one argument struct"
    param = entry.params[0]
    match = re.fullmatch(r"__gm__ const (\w+)\s*\*", param.type)
    assert match, f"{entry.name}: parameter {param.type} {param.name}, expected __gm__ const <Struct>* args"
    header = (PACKAGES[package] / "ascend" / "kernel_args.h").read_text()
    fields = descriptors.declared_fields(header, match.group(1))  # declared in the shared header, plain fields
    assert fields, f"{entry.name}: struct {match.group(1)} has no fields"
    found = args_struct(entry, path.read_text(), [str(PACKAGES[package].parent)])
    assert found is not None and found.cpp_type == match.group(1), f"{entry.name}: the twin cannot find the struct"
    assert any(pointer for _, pointer in found.fields), f"{entry.name}: no tensor reaches the kernel"


# Kernels whose blocks wait for each other through the window (a grid barrier on a window flag), besides
# those that use the all-core flags (asc_sync_inter_*).
WINDOW_BARRIERS = {"dg_mega_moe_comm"}


@pytest.mark.parametrize(("package", "path"), KERNELS, ids=[p.name for _, p in KERNELS])
def test_kernels_that_wait_on_other_blocks_ask_for_batch_scheduling(package, path):
    """CANN's SetScheduleMode: a kernel synchronising across cores needs batch mode (all its cores start at
    once); in normal mode, beside another stream's kernel, some of its blocks could wait for blocks that never
    start. Every other kernel keeps normal mode, which lets its blocks start as cores free up."""
    text = path.read_text()
    entry = parse_entry(text)
    waits = "asc_sync_inter_" in text or entry.name in WINDOW_BARRIERS
    assert entry.sched_mode == (1 if waits else 0), f"{entry.name}: __schedmode__({entry.sched_mode})"
