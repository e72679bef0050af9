"""Every conformance kernel (deepjit.tilelang_route.conformance) lowered by TileLang for dav-3510,
run on the twin and compared with its torch reference: bit-exact for copies, casts and integer ops,
FP32-accumulation tolerance for cube products."""
import pytest
import torch

from deepjit.tilelang_route import lower
from deepjit.tilelang_route.conformance import CASES, check_outputs


def _param(case):
    """A case with a ``known_gap`` (the twin lacks what it needs) is a strict xfail: a fix must
    remove the note."""
    marks = [pytest.mark.xfail(strict=True, reason=case.known_gap)] if case.known_gap else []
    return pytest.param(case, id=case.name, marks=marks)


def test_registry_covers_the_constructs():
    assert len(CASES) >= 30
    assert {c.kind for c in CASES} == {"vector", "cube", "mix"}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_lowers_to_its_core_type(case):
    assert lower(case.build()).kind == case.kind


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_matches_torch_on_the_twin(case, run_on_twin):
    args = [t.clone() for t in case.inputs(torch.Generator().manual_seed(0))]
    inputs = [t.clone() for t in args]
    expected = case.reference(*[t.clone() for t in args])
    run_on_twin(case.build(), *args)
    assert check_outputs(case, args, expected) == []
    for i, (before, after) in enumerate(zip(inputs, args, strict=True)):
        if i not in expected:  # inputs are read, never written
            assert torch.equal(before.view(torch.uint8), after.view(torch.uint8)), f"input {i} was modified"


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
def test_reference_rejects_untouched_outputs(case):
    """The comparison can fail: outputs still holding the sentinel never match the reference."""
    args = case.inputs(torch.Generator().manual_seed(0))
    expected = case.reference(*[t.clone() for t in args])
    assert expected and len(check_outputs(case, args, expected)) == len(expected)
