"""deepjit.BackendTable: the backend per op from <PREFIX>_BACKEND and the device, accepts predicates,
and a clear error for a forced backend an op lacks."""
import re

import pytest
import torch

import deepjit
from deepjit import BackendTable, BackendUnavailableError, Impl


def _table(host_ok=True):
    lib = deepjit.KernelLibrary("tbl", "TBL", __file__, "0")
    lib.host_available = lambda: host_ok
    table = BackendTable(lib)
    table.register("double", reference=lambda x: ("reference", x * 2),
                   host=Impl(lambda x: ("host", x * 2), "even sizes", lambda x: x.numel() % 2 == 0))
    table.register("negate", reference=lambda x: ("reference", -x))
    return table


@pytest.fixture(autouse=True)
def _no_forcing(monkeypatch):
    monkeypatch.delenv("TBL_BACKEND", raising=False)
    monkeypatch.delenv("DJ_BACKEND", raising=False)


def test_cpu_takes_the_host_entry_and_accepts_routes_other_forms_to_the_reference():
    table = _table()
    assert table.run("double", "cpu", torch.ones(4))[0] == "host"
    assert table.run("double", "cpu", torch.ones(3))[0] == "reference"
    assert table.serves("double", "cpu", torch.ones(3)) == "reference"


def test_an_op_without_a_host_entry_runs_its_reference_unforced():
    assert _table().run("negate", "cpu", torch.ones(2))[0] == "reference"


def test_npu_without_an_ascend_entry_keeps_the_reference():
    table = _table()
    assert table.backend("double", torch.device("meta")) == "reference"
    assert table.backend("double", "npu") == "reference"


def test_no_compiler_takes_the_reference():
    with pytest.warns(RuntimeWarning):
        assert _table(host_ok=False).backend("double", "cpu") == "reference"


@pytest.mark.parametrize("op,forced", [("double", "ascend"), ("negate", "host"), ("negate", "ascend")])
@pytest.mark.parametrize("device", ["cpu", "npu"])
def test_forcing_an_absent_backend_names_the_op_and_backend(monkeypatch, op, forced, device):
    monkeypatch.setenv("TBL_BACKEND", forced)
    with pytest.raises(BackendUnavailableError, match=rf"tbl\.{op} has no {forced} implementation \(TBL_BACKEND"):
        _table().run(op, device, torch.ones(2))


def test_forcing_an_existing_backend(monkeypatch):
    monkeypatch.setenv("TBL_BACKEND", "reference")
    assert _table().run("double", "cpu", torch.ones(4))[0] == "reference"
    monkeypatch.setenv("TBL_BACKEND", "host")
    assert _table().run("double", "cpu", torch.ones(4))[0] == "host"
    with pytest.raises(ValueError, match=re.escape("TBL_BACKEND: expected a backend for device npu (host needs CPU tensors), got 'host'")):
        _table().run("double", "npu", torch.ones(4))


def test_an_ascend_entry_is_chosen_for_npu_and_lists_its_kernels():
    table = _table()
    table.register("scale", reference=lambda x: "reference", host=lambda x: "host",
                   ascend=Impl(lambda x: "ascend", kernels=("spec",)))
    assert table.run("scale", "npu", None) == "ascend"
    assert table.ascend_kernels() == ["spec"]
    assert table["scale"].backends() == ("reference", "host", "ascend")


def test_registration_errors():
    table = _table()
    with pytest.raises(deepjit.DeepJITError, match="registered twice"):
        table.register("double", reference=lambda x: x)
    with pytest.raises(deepjit.DeepJITError, match="no op 'missing'"):
        table.backend("missing", "cpu")
