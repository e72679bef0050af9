"""Every asc_* name TileLang 0.1.15's Ascend code generator (src/ascend/codegen/*.cc) and its
tl_templates/ascend headers can emit, read from the installed package's sources, either compiles on
the twin or is listed in c_api/unimplemented.h (or sync.h's unmodelled flags) and then fails to
compile with the twin's own "<name> is not implemented on the Ascend twin" message."""
import os
import re

import pytest

from deepjit.backends.ascend_twin.toolchain import INCLUDE_DIR, tilelang_templates
from deepjit.errors import DeepJITError

from .conftest import launch_source  # noqa: F401  (the twin_runtime fixture lives there too)

_NAME = re.compile(r"\basc_[A-Za-z0-9_]+")
# Names the codegen builds from a prefix and a suffix (codegen_ascend.cc: tl.ascend_set_atomic,
# atomic_*_elem_op, tl.ascend_set_mmad_direction, EmitCrossCoreSync_ / GetCrossCoreSyncScope, simd_vld2's
# asc_update_addr_reg_b<bits>; simd_inst.h TL_SIMD_PINTLV_IMPL(b8 / b16 / b32)).
_FAMILIES = {
    **{f"asc_set_atomic_{op}": [f"asc_set_atomic_{op}_{t}" for t in ("bfloat", "float16", "float", "int8", "int16",
                                                                     "int32")] for op in ("add", "max", "min")},
    "asc_atomic_": [f"asc_atomic_{op}" for op in ("add", "max", "min")],
    "asc_set_mmad_direction_": ["asc_set_mmad_direction_m", "asc_set_mmad_direction_n"],
    "asc_sync_": [f"asc_sync_{scope}_{what}" for scope in ("inter", "subblock", "block", "intra")
                  for what in ("arrive", "wait")],
    "asc_update_addr_reg_b": [f"asc_update_addr_reg_b{w}" for w in (8, 16, 32)],
    "asc_intlv_": [f"asc_intlv_b{w}" for w in (8, 16, 32)],
    "asc_deintlv_": [f"asc_deintlv_b{w}" for w in (8, 16, 32)],
    "asc_create_mask_b": [],  # the b8 / b16 / b32 forms are spelled out in the sources too
}
# Header-path fragments (#include "simt_api/asc_fp16.h"), not names.
_NOT_NAMES = {"asc_bf16", "asc_fp16", "asc_fp8", "asc_simd", "asc_simt", "asc_loadalign_v2_impl"}


def tilelang_names() -> list[str]:
    _, root = tilelang_templates()
    if root is None:
        pytest.skip("tilelang is not installed")
    package = os.path.dirname(root)
    files = [os.path.join(root, "ascend", "codegen", f) for f in os.listdir(os.path.join(root, "ascend", "codegen"))
             if f.endswith(".cc")]
    files += [os.path.join(root, "tl_templates", "ascend", f)
              for f in os.listdir(os.path.join(root, "tl_templates", "ascend")) if f.endswith(".h")]
    assert os.path.isdir(package) and len(files) >= 5
    names = set()
    for path in files:
        with open(path) as f:
            names.update(_NAME.findall(f.read()))
    for prefix, expanded in _FAMILIES.items():
        names.discard(prefix)
        names.update(expanded)
    return sorted(names - _NOT_NAMES)


def listed_unimplemented() -> set[str]:
    listed = set()
    for header in ("c_api/unimplemented.h", "c_api/sync.h"):
        with open(os.path.join(INCLUDE_DIR, header)) as f:
            listed.update(re.findall(r"^DJ_TWIN_(?:SYNC_)?UNIMPLEMENTED\((\w+)\)", f.read(), re.M))
    return listed


def _compile_errors(runtime, name: str, body: str) -> str:
    source = ("#include <c_api/asc_simd.h>\n#include <simt_api/asc_simt.h>\n#include <simt_api/asc_fp16.h>\n"
              "#include <tl_templates/ascend/common.h>\n#include <tl_templates/ascend/simd_inst.h>\n"
              "#include <tl_templates/ascend/reduce.h>\n"
              f'extern "C" __global__ __vector__ void {name}(__gm__ float* x) {{\n{body}}}\n')
    try:
        runtime.compile(name, source)
    except DeepJITError as exc:
        return str(exc)
    return ""


def test_every_tilelang_name_is_declared_on_the_twin(twin_runtime):
    names = tilelang_names()
    assert len(names) > 150
    # A using-declaration finds any function, overload set, template, enum or variable of that name.
    errors = _compile_errors(twin_runtime, "tl_names_declared", "".join(f"  using ::{n};\n" for n in names))
    missing = sorted(n for n in names if re.search(rf"[‘']{n}[’'] has not been declared", errors))
    assert missing == [] and "error" not in errors, errors[-3000:]


def test_unimplemented_names_fail_naming_themselves(twin_runtime):
    names = [n for n in tilelang_names() if n in listed_unimplemented()]
    assert names, "no TileLang name is listed as unimplemented: the check would be empty"
    # An argument of a type no real overload takes selects the listed fallback.
    body = "  struct DjProbe {} probe;\n" + "".join(f"  {n}(probe);\n" for n in names)
    errors = _compile_errors(twin_runtime, "tl_names_unimplemented", body)
    silent = [n for n in names if f"{n} is not implemented on the Ascend twin" not in errors]
    assert silent == [], silent


def tilelang_cce_names() -> list[str]:
    """The CCE register builtins TileLang 0.1.15 calls in their destination-first form for
    ``mode="MODE_MERGING"`` (codegen_ascend.cc EmitSimdMergingCall: ``::<op>(dst, ..., MODE_MERGING)``):
    every ``tl.simd`` op of ascend/language/simd.py that takes a mode, vdupv emitted as vdup."""
    _, root = tilelang_templates()
    if root is None:
        pytest.skip("tilelang is not installed")
    with open(os.path.join(os.path.dirname(root), "ascend", "language", "simd.py")) as f:
        ops = set(re.findall(r'^def (\w+)\([^)]*mode="MODE_ZEROING"', f.read(), re.M))
    with open(os.path.join(root, "ascend", "codegen", "codegen_ascend.cc")) as f:
        assert "EmitSimdMergingCall" in f.read(), "TileLang's codegen no longer has the merging path this reads"
    return sorted({"vdup" if op == "vdupv" else op for op in ops})


def test_every_tilelang_merging_builtin_is_declared_on_the_twin(twin_runtime):
    names = tilelang_cce_names()
    assert {"vmax", "vadds", "vdup", "vcadd"} <= set(names)
    errors = _compile_errors(twin_runtime, "tl_cce_declared", "".join(f"  using ::{n};\n" for n in names))
    assert "error" not in errors, errors[-3000:]
    listed = [n for n in names if n in listed_unimplemented()]
    assert listed, "no merging builtin is listed as unimplemented: the second check would be empty"
    body = "  struct DjProbe {} probe;\n" + "".join(f"  ::{n}(probe);\n" for n in listed)
    errors = _compile_errors(twin_runtime, "tl_cce_unimplemented", body)
    assert [n for n in listed if f"{n} is not implemented on the Ascend twin" not in errors] == []
