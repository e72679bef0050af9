"""``make ascend-check`` runs deep_gemm's hand-written .asc kernels (deep_gemm.ascend.twin_checks.cases():
ascend_check.SourceCase) on the twin against the reference and prints each one's roofline estimate from
the twin's counters of the launches it made; a mismatch or a case that launches nothing fails the run."""
import pytest

from deep_gemm.ascend import twin_checks
from deepjit.tilelang_route import ascend_check


def _case(name):
    return next(c for c in twin_checks.cases() if c.name.startswith(name))


def test_every_hand_written_kernel_has_a_case():
    names = [c.name for c in twin_checks.cases()]
    assert len(set(names)) == len(names)
    for prefix in ("bf16_gemm_nt", "fp8_mx_gemm_nt", "m_grouped_bf16", "k_grouped_bf16", "fp8_mqa_logits",
                   "fp8_paged_mqa_logits", "sf_transform", "tf32_hc_prenorm_gemm",
                   "bf16_einsum", "fp8_einsum", "fp8_fp4_mx_gemm", "m_grouped_fp8_fp4_mx_gemm", "mega_swiglu"):
        assert any(n.startswith(prefix) for n in names), prefix


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


def test_make_ascend_check_command_runs_the_hand_written_cases():
    """The Makefile's ``python -m`` entry point (a ``__main__`` copy of the module must still recognise the
    libraries' SourceCase objects)."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "deepjit.tilelang_route.ascend_check", "--only",
                           "deep_gemm.sf_transform"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "PASS deep_gemm.sf_transform" in proc.stdout and "1 of 1 Ascend kernel(s) match" in proc.stdout


def test_published_shapes_are_the_issues_benchmark_shapes():
    """make ascend-check's rooflines at the published Ascend 950 figures' shapes (deep_gemm README), an MoE
    decode GEMM's (FP8 x FP4, the weights' bytes dominating) and a whole Mega MoE call on EP8 rank processes
    (its published figure was measured on NVIDIA hardware)."""
    published = twin_checks.published_shapes()
    assert [s.name for s in published if s.multi_rank] == ["fp8_fp4_mega_moe_ep8_v4_flash_batch1"]
    shapes = {s.name: s.kind for s in published}
    assert shapes == {"fp8_fp4_mega_moe_ep8_v4_flash_batch1": "mix", "bf16_gemm_nt_4096x4096x4096": "cube", "fp8_mx_gemm_nt_4096x4096x4096": "cube",
                      "fp4_mx_gemm_nt_4096x4096x4096": "cube", "m_grouped_bf16_gemm_psum_8x512x4096x7168": "cube",
                      "m_grouped_fp8_fp4_mx_gemm_decode_8x48x4096x7168": "mix",
                      "fp8_mqa_logits_prefill_4096q_8192kv_32x128": "mix",
                      "fp8_mqa_logits_decode_256q_8192kv_32x128": "mix",
                      "tf32_hc_prenorm_gemm_prefill_4096x24x28672_16splits": "mix",
                      "tf32_hc_prenorm_gemm_decode_128x24x28672_16splits": "mix",
                      "mxfp8_mqa_logits_prefill_4096q_8192kv_64x128": "mix",
                      "mxfp8_mqa_logits_decode_256q_8192kv_64x128": "mix"}


def test_sf_transform_reports_its_gm_bytes():
    """Its lanes load and store GM through asc_ldcg / asc_stcg, which the twin counts: 4096 x 64 FP32 scales
    read once, 4096 x 32 int16 pairs written once."""
    with ascend_check.recorded_launches() as launches:
        assert _case("sf_transform").run() == []
    counters, _, _ = ascend_check._summed_counters(launches)
    assert counters["routes"] == {"simt_gm_load": 4096 * 64 * 4, "simt_gm_store": 4096 * 32 * 2}
    assert ascend_check.roofline(counters, "vector", launches[0][0], "bf16")["bound"] == "hbm"
