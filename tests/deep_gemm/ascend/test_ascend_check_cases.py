"""``make ascend-check`` runs deep_gemm's hand-written .asc kernels (deep_gemm.ascend.codegen.cases():
ascend_check.SourceCase) on the twin against the reference and prints each one's roofline estimate from
the twin's counters of the launches it made; a mismatch or a case that launches nothing fails the run."""
import pytest

from deep_gemm.ascend import codegen
from deepjit.tilelang_route import ascend_check


def _case(name):
    return next(c for c in codegen.cases() if c.name.startswith(name))


def test_every_hand_written_kernel_has_a_case():
    names = [c.name for c in codegen.cases()]
    assert len(set(names)) == len(names)
    for prefix in ("bf16_gemm_nt", "fp8_mx_gemm_nt", "m_grouped_bf16", "k_grouped_bf16", "fp8_mqa_logits",
                   "fp8_paged_mqa_logits", "sf_transform"):
        assert any(n.startswith(prefix) for n in names), prefix
    assert codegen.kernels() == []


def test_a_case_passes_with_a_roofline_from_its_launch(capsys):
    (result,) = ascend_check.run([("deep_gemm", _case("fp8_paged_mqa_logits"))])
    assert result["ok"] and result["roofline"]["cube"] > 0 and result["roofline"]["hbm"] > 0
    out = capsys.readouterr().out
    assert "PASS deep_gemm.fp8_paged_mqa_logits" in out and "[mix]" in out and "roofline estimate" in out


def test_mismatches_and_missing_launches_fail(capsys):
    wrong = ascend_check.SourceCase("wrong", "vector", lambda: ["logits: calc_diff 1 >= 0.001"])
    with pytest.raises(SystemExit) as exc:
        ascend_check.run([("fake_lib", wrong)])
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert "FAIL fake_lib.wrong" in out and "calc_diff 1" in out and "no Ascend kernel was launched" in out
