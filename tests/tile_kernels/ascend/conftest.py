"""tests/tile_kernels/ascend/: only what is specific to the Ascend kernels, on deepjit's Ascend CPU twin (CPU
tensors) against tile_kernels' reference: tile and block boundaries of a kernel, its flags and sync modes,
no host reads and the clamping of unvalidated device values, the Ascend-only forms (int16 packed UE8M0
scales, kernel entry points the public ops do not expose), ascend-check cases, which forms the table serves
on Ascend, the every-op-has-an-Ascend-column check, and the NPU tests (test_npu*.py). Each op's
public-contract cases (tails, empty inputs, NaN/Inf, the op's forms) live in its main test file under
tests/tile_kernels/<area>/ and run there on every backend, Ascend included (the ``backend`` fixture).

Helpers: the Ascend int16 packed-UE8M0 expectation is built from the reference's FP32 scales."""
import torch
import torch.nn.functional as F


def ascend_packed_ue8m0(sf_fp32: torch.Tensor) -> torch.Tensor:
    """Reference FP32 ``(Mb, Kb)`` scales -> the Ascend int16 form: logical ``(Mb, ceil(Kb/2))``, column-major
    storage ``(ceil(Kb/2), Mb)``, byte j of word i = biased exponent of block 2i + j (a missing block 0)."""
    exps = ((sf_fp32.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    exps = F.pad(exps, (0, exps.shape[1] % 2)).contiguous()
    words = exps.view(torch.int16)
    return words.T.contiguous().T


def unpack_ascend_ue8m0(sf: torch.Tensor) -> torch.Tensor:
    """Ascend int16 packed scales -> FP32 ``(Mb, 2 * words)`` (for the reference cast-back), decoded as
    torch's ``float8_e8m0fnu`` (0xFF NaN, 0x00 2^-127: the suite's UE8M0 policy)."""
    return sf.contiguous().view(torch.uint8).view(torch.float8_e8m0fnu).float()
