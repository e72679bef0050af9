"""``make ascend-check``: the driver's pass/fail accounting and exit status, and the roofline arithmetic
(an estimate at dav-3510's published rates, labelled as such)."""
import dataclasses

import pytest
import torch

from deepjit.backends.ascend_twin.timeline import Estimate
from deepjit.tilelang_route import ascend_check
from deepjit.tilelang_route.conformance import BY_NAME


def test_roofline_picks_the_bounding_unit():
    # 4 cube blocks of 32 AIC: 1/8 of the chip. 2^24 MACs at 432 TFLOP/s / 8 vs 1 MiB at 1.6 TB/s / 8.
    est = ascend_check.roofline({"routes": {"gm_to_l1": 1 << 20, "l1_to_l0": 1 << 20}, "cube_macs": 1 << 24,
                                 "vector_ops": 0}, "cube", 4, "bf16")
    assert est["cube"] == pytest.approx(2 * (1 << 24) / (432e12 / 8))
    assert est["hbm"] == pytest.approx((1 << 20) / (1.6e12 / 8))  # MTE1 (L1->L0) is on-chip: not HBM
    assert est["vector"] == 0 and est["bound"] == "hbm"
    fp8 = ascend_check.roofline({"routes": {}, "cube_macs": 1 << 24}, "cube", 4, "fp8")
    assert fp8["cube"] == pytest.approx(est["cube"] / 865 * 432) and fp8["bound"] == "cube"
    assert ascend_check.roofline(None, "cube", 1, "bf16") is None
    text = ascend_check.format_roofline(est)
    assert "estimate, not a measurement" in text and "hbm-bound" in text


def test_cube_operand_and_block_count_from_the_kernel():
    from deepjit.tilelang_route.twin import lowered_with_grid
    mx = BY_NAME["gemm_mx_fp8"].build()
    assert ascend_check.cube_operand(lowered_with_grid(mx)[0].source) == "fp8"
    assert lowered_with_grid(BY_NAME["gemm_pipelined_fp16"].build())[1] == 4
    assert lowered_with_grid(mx)[1] == 1


def test_driver_passes_and_fails(run_on_twin, capsys):
    good = BY_NAME["copy_strided_2d"]
    wrong = dataclasses.replace(good, name="copy_strided_2d_wrong_reference",
                                reference=lambda a, b: {1: a[3:19, 8:48] + 1})
    results = ascend_check.run([("deepjit.conformance", good)])
    assert [r["ok"] for r in results] == [True]
    with pytest.raises(SystemExit) as exc:
        ascend_check.run([("deepjit.conformance", good), ("fake_lib", wrong)])
    assert exc.value.code == 1
    out = capsys.readouterr().out
    assert "PASS deepjit.conformance.copy_strided_2d" in out
    assert "FAIL fake_lib.copy_strided_2d_wrong_reference" in out and "differ bitwise" in out
    assert "1 of 2 Ascend kernel(s) match" in out and "not measurements" in out


def test_known_twin_gaps_are_expected_failures(run_on_twin, capsys):
    good = BY_NAME["copy_strided_2d"]
    gap = dataclasses.replace(good, name="copy_strided_2d_gap", known_gap="twin: something not implemented",
                              reference=lambda a, b: {1: a[3:19, 8:48] + 1})
    results = ascend_check.run([("deepjit.conformance", good), ("fake_lib", gap)])
    assert [r["ok"] for r in results] == [True, False]
    out = capsys.readouterr().out
    assert "XFAIL fake_lib.copy_strided_2d_gap" in out and "known twin gap: twin: something" in out
    assert "1 of 1 Ascend kernel(s) match" in out and "1 known twin gap(s)" in out
    fixed = dataclasses.replace(good, name="copy_strided_2d_fixed", known_gap="twin: was missing")
    with pytest.raises(SystemExit):
        ascend_check.run([("fake_lib", fixed)])
    assert "XPASS fake_lib.copy_strided_2d_fixed" in capsys.readouterr().out


def test_command_line_runs_the_samples(run_on_twin, capsys, tmp_path):
    # --out: results.json and the charts go to the test's own folder, never into the checkout (xdist
    # workers would race on build/ascend-check)
    assert ascend_check.main(["--only", "deepjit.samples.vector_add", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "PASS deepjit.samples.vector_add [vector]" in out and "1 of 1" in out
    assert (tmp_path / "results.json").is_file()


def test_library_registries(monkeypatch):
    """Modules named explicitly (instead of the entry points): cases run, specs without cases and missing
    modules are noted."""
    import sys
    import types
    notes = []
    with_cases = types.ModuleType("fake_lib_c.ascend.twin_checks")
    with_cases.cases = lambda: [BY_NAME["copy_ragged_1d"]]
    specs_only = types.ModuleType("fake_lib_d.ascend.kernel_specs")
    specs_only.kernels = lambda: [BY_NAME["copy_ragged_1d"].spec()]
    monkeypatch.setitem(sys.modules, "fake_lib_c.ascend.twin_checks", with_cases)
    monkeypatch.setitem(sys.modules, "fake_lib_d.ascend.kernel_specs", specs_only)
    found = ascend_check.library_cases(["fake_lib_c.ascend.twin_checks", "fake_lib_d.ascend.kernel_specs",
                                        "no_such_lib.ascend.twin_checks"], log=notes.append)
    assert [(lib, c.name) for lib, c in found] == [("fake_lib_c", "copy_ragged_1d")]
    assert any("fake_lib_d.copy_ragged_1d has no reference" in n for n in notes)
    assert any("no_such_lib.ascend.twin_checks not found" in n for n in notes)
    assert torch.is_tensor(BY_NAME["copy_ragged_1d"].inputs(torch.Generator().manual_seed(0))[0])


def _fake_specs():
    return [BY_NAME["copy_ragged_1d"].spec()]


def test_libraries_are_found_through_their_check_entry_points(monkeypatch):
    """By default a library's cases and published shapes come from the module its ``deepjit.ascend_checks``
    entry point names, whatever its name; a library with kernel specs and no such entry point is noted."""
    import sys
    import types
    from importlib.metadata import EntryPoint
    checks = types.ModuleType("fake_lib_e.anywhere")
    checks.cases = lambda: [BY_NAME["copy_ragged_1d"]]
    checks.published_shapes = lambda: [ascend_check.PublishedShape("copy_big", "vector", lambda: None)]
    monkeypatch.setitem(sys.modules, "fake_lib_e.anywhere", checks)
    monkeypatch.setattr(ascend_check, "registered_checks", lambda: [
        EntryPoint("fake_lib_e", "fake_lib_e.anywhere", ascend_check.CHECKS_ENTRY_POINT_GROUP)])
    monkeypatch.setattr(ascend_check, "registered_kernels", lambda: [
        EntryPoint(lib, f"{__name__}:_fake_specs", "deepjit.ascend_kernels") for lib in ("fake_lib_e", "fake_lib_f")])
    notes = []
    found = ascend_check.library_cases(log=notes.append)
    assert [(lib, c.name) for lib, c in found] == [("fake_lib_e", "copy_ragged_1d")]
    assert notes == ["note: fake_lib_f.copy_ragged_1d has no reference registered (no deepjit.ascend_checks entry "
                     "point); not checked"]
    assert [(lib, s.name) for lib, s in ascend_check.library_published()] == [("fake_lib_e", "copy_big")]


def test_published_shape_errors_fail(capsys):
    def broken():
        raise RuntimeError("slice too big")
    shape = ascend_check.PublishedShape("gemm_4096", "cube", broken)
    assert ascend_check.run_published_shapes([("fake_lib", shape)]) == ["fake_lib.gemm_4096"]
    out = capsys.readouterr().out
    assert "published shapes" in out and "FAIL fake_lib.gemm_4096 [cube] error: slice too big" in out
    assert ascend_check.run_published_shapes([("fake_lib", shape)], only="nothing") == []


def test_a_launch_with_nothing_counted_says_so():
    # a SIMT kernel whose lanes dereference __gm__ pointers directly moves bytes the twin cannot see
    est = ascend_check.roofline({"routes": {}, "cube_macs": 0, "vector_ops": 0, "simt_ops": 0}, "vector", 4, "bf16")
    assert est["bound"] == "none"
    assert "no work counted" in ascend_check.format_roofline(est)


def test_a_kernel_that_sets_a_flag_still_set_fails(run_on_twin, capsys, monkeypatch):
    # the timeline's set_flag check (timeline.schedule: a second set of a pipe flag before its wait is
    # illegal) makes the case a failure even though its outputs match
    good = BY_NAME["copy_strided_2d"]
    real = ascend_check.run_case

    def with_hazard(case, seed=0):
        outcome = real(case, seed)
        assert outcome["ok"] and outcome["estimate"] is not None and outcome["estimate"].flag_hazards == 0
        outcome["estimate"] = dataclasses.replace(outcome["estimate"], flag_hazards=2,
                                                  first_flag_hazard="flag (mte2 -> vector, 0) set at cycle 9")
        return outcome
    monkeypatch.setattr(ascend_check, "run_case", with_hazard)
    with pytest.raises(SystemExit):
        ascend_check.run([("deepjit.conformance", good)])
    out = capsys.readouterr().out
    assert "FAIL deepjit.conformance.copy_strided_2d" in out and "2 set(s) of a pipe flag still set" in out
    assert "FLAG HAZARDS: 2" in out
    # a known twin gap excuses a mismatch, not the kernel's own flag misuse
    gap = dataclasses.replace(good, name="copy_strided_2d_gap", known_gap="twin: something not implemented")
    with pytest.raises(SystemExit):
        ascend_check.run([("deepjit.conformance", gap)])
    out = capsys.readouterr().out
    assert "FAIL deepjit.conformance.copy_strided_2d_gap" in out and "XFAIL" not in out


def test_a_published_shape_with_a_flag_hazard_fails(capsys, monkeypatch):
    shape = ascend_check.PublishedShape("copy_big", "vector", lambda: None)
    est = Estimate("copy", 1850.0, 1e-6, 1, {}, {}, "mte2", 0, 0.0, 0.0, flag_hazards=1,
                   first_flag_hazard="flag (mte2 -> vector, 0)")
    monkeypatch.setattr(ascend_check, "run_published", lambda case: {
        "seconds": 0.0, "roofline": None, "estimate": est, "operand": "bf16"})
    monkeypatch.setattr(ascend_check.timeline_report, "format_estimate", lambda e, operand: "estimate line")
    monkeypatch.setattr(ascend_check, "format_roofline", lambda r: "roofline line")
    assert ascend_check.run_published_shapes([("fake_lib", shape)]) == ["fake_lib.copy_big"]
    monkeypatch.setattr(ascend_check, "run_published", lambda case: {
        "seconds": 0.0, "roofline": None, "estimate": dataclasses.replace(est, flag_hazards=0), "operand": "bf16"})
    assert ascend_check.run_published_shapes([("fake_lib", shape)]) == []
