"""45 of 45: every public tile_kernels op reaches an Ascend kernel on NPU tensors. The ops are derived from
the public API (each public module's ``__all__``, walked to the backend-table entries it calls, as
tests/deepjit/test_library_tables.py does) and from the table itself; an op without an Ascend column fails
unless this file names it below as a pure helper that does no kernel work (with why)."""
from tests.deepjit.test_library_tables import public_callables, reached_ops
from tile_kernels import _dispatch

# Public callables that are no kernel op (they reach no table entry), each with why.
HELPERS = {
    "ScoringFunc": "an enum of scoring-function names",
    "unpack_from_e2m1fn_x2": "upstream's quant.common debugging helper: unpacks FP4 bytes for printing, plain torch "
                             "upstream too",
    "round_to_tf32": "upstream's helper rounding callers' weights to TF32 (plain torch upstream too), no kernel op",
}


def _table_ops() -> dict:
    return {entry.name: entry for entry in _dispatch.TABLE}


def test_helper_list_is_current():
    ops, public = _table_ops(), public_callables("tile_kernels")
    assert set(HELPERS) <= set(public), f"helpers no longer public: {sorted(set(HELPERS) - set(public))}"
    for name in HELPERS:  # a helper that starts calling a table op is an op: it must leave HELPERS
        assert not reached_ops(public[name], "tile_kernels", set(ops)), name


def test_every_table_op_has_an_ascend_column():
    ops = _table_ops()
    missing = sorted(name for name, entry in ops.items() if entry.ascend is None)
    assert not missing, f"tile_kernels ops without an Ascend kernel: {missing}"
    for name, entry in ops.items():
        if entry.ascend is not None:
            assert callable(entry.ascend.fn) and entry.ascend.supports, name
            assert _dispatch.TABLE.backend(name, "npu") == "ascend", name


def test_every_public_op_reaches_ascend_kernels_only():
    ops = _table_ops()
    unserved = {}
    for name, obj in sorted(public_callables("tile_kernels").items()):
        if name in HELPERS:
            continue
        reached = reached_ops(obj, "tile_kernels", set(ops))
        lacking = sorted(op for op in reached if ops[op].ascend is None)
        if not reached or lacking:
            unserved[name] = lacking or "reaches no table op"
    assert not unserved, f"public tile_kernels ops not served by Ascend kernels: {unserved}"
