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


def test_cast_back_takes_scales_in_any_shape_of_their_order():
    """Upstream's low-latency test views packed UE8M0 words as [-1, H/128]; only their order counts.
    A hidden that is not a multiple of 128 is padded per block, as upstream."""
    x = torch.randn(8, 2048, dtype=torch.float32).bfloat16()
    q, s = per_token_cast_to_fp8(x, use_ue8m0=True)
    packed = ((s.view(torch.int32) >> 23) & 0xFF).to(torch.uint8).contiguous().view(torch.int32)   # [8, 4]
    expected = (q.float().view(8, 16, 128) * s.unsqueeze(2)).view(8, 2048).bfloat16()
    assert torch.equal(per_token_cast_back(q.view(-1, 2048), packed.view(-1, 16)), expected)
    q200 = q[:, :200].contiguous()
    assert torch.equal(per_token_cast_back(q200, s[:, :2]), expected[:, :200])
    assert per_token_cast_back(q[:0], s[:0]).shape == (0, 2048)
