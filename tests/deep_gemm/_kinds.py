"""FP8 operand kinds across backends: the Ascend MX scale unit holds UE8M0 exponents, so arbitrary FP32
scales (SM90's "fp8" kind) are refused there (``ascend/fp8_mx_gemm.check_mantissa``)."""
import pytest

ANY_SCALES_WHY = "arbitrary FP32 scales: the Ascend MX scale unit takes powers of two only (UE8M0)"

# The "fp8" kind as a parameter that runs on the reference and the host kernels only.
FP8_ANY_SCALES = pytest.param("fp8", marks=pytest.mark.backends("reference", "host", why=ANY_SCALES_WHY))


def fp8_kind(backend: str) -> str:
    """"fp8" (arbitrary FP32 scales), or on Ascend its UE8M0 form "fp8_1d1d", where the kind is incidental."""
    return "fp8_1d1d" if backend == "ascend" else "fp8"
