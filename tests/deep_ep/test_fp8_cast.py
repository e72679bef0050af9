"""The per-token FP8 cast used by the low-latency dispatch: the reference against hand-computed
values, and the host kernel bit for bit against the reference (FP32 and power-of-two scales)."""
import pytest
import torch

from deep_ep.utils.math import per_token_cast_back, per_token_cast_to_fp8, round_up_to_power_of_two, unpack_ue8m0


def test_reference_cast_by_hand():
    x = torch.zeros(2, 128)
    x[0, 0], x[0, 1] = 448.0, -224.0         # amax 448 -> scale 1, values kept
    x[1, 5] = 3.0                            # amax 3 -> scale 3/448, 3 maps to 448
    fp8, scale = per_token_cast_to_fp8(x.bfloat16())
    assert scale[0, 0] == 1.0 and fp8[0, 0].float() == 448.0 and fp8[0, 1].float() == -224.0
    assert scale[1, 0] == torch.tensor(3.0) / 448.0 and fp8[1, 5].float() == 448.0
    assert torch.equal(per_token_cast_back(fp8, scale)[0, :2], torch.tensor([448.0, -224.0]))
    assert round_up_to_power_of_two(torch.tensor([0.75, 1.0, 1.0000001, 3.0])).tolist() == [1.0, 1.0, 2.0, 4.0]
    packed = torch.tensor([0x7F, 0x80, 0x7E, 0x81], dtype=torch.uint8).view(torch.int32).view(1, 1)
    assert unpack_ue8m0(packed).tolist() == [[1.0, 2.0, 0.5, 4.0]]


@pytest.mark.parametrize("round_scale", [False, True])
def test_host_cast_matches_reference(round_scale):
    from deep_ep._lib import kernel
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(33, 512, generator=g) * torch.logspace(-6, 4, 33)[:, None]).bfloat16()
    x[7] = 0
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
    scales = torch.empty(33, 4)
    kernel("ep_fp8_cast")(x, out, scales, 33, 512, int(round_scale), 2)
    ref, ref_scales = per_token_cast_to_fp8(x, use_ue8m0=round_scale)
    assert torch.equal(out.view(torch.uint8), ref.view(torch.uint8))
    assert torch.equal(scales, ref_scales)
