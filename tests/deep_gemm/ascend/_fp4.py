"""Shared by the Ascend MX GEMM tests: the FP8 x FP4 forms whose FP4 operand the GEMM's own vector cores
widen into L1 must not call the separate widening launch (``fp4_to_fp8.widen``)."""
from deep_gemm.ascend import fp8_mx_gemm


def forbid_widening_launch(monkeypatch) -> None:
    def separate_launch(_data):
        raise AssertionError("fp4_to_fp8.widen was called")
    monkeypatch.setattr(fp8_mx_gemm, "widen", separate_launch)
