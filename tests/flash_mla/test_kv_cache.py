"""KV-cache formats: hand-computed bytes of one token per format, round trips, placements, relayout."""
import pytest
import torch

import flash_mla
from flash_mla.kv_cache import KVCacheFormat, e2m1_encode, pow2_scale

BF16_1_5 = [0xC0, 0x3F]  # 1.5 in bf16, little endian


def _token(d: int, pieces: dict) -> torch.Tensor:
    x = torch.zeros(d)
    for (lo, hi), v in pieces.items():
        x[lo:hi] = v
    return x


def _one_token_cache(x: torch.Tensor, fmt, placement=None, page=1, slot=0) -> torch.Tensor:
    k = torch.zeros(1, page, 1, x.numel())
    k[0, slot, 0] = x
    return flash_mla.quantize_k_cache(k.bfloat16(), fmt, placement)


def test_pow2_scale_is_exact_ceil():
    # 3.5/448 = 2^-7 exactly (no round-up), a hair above must go to 2^-6, zero clamps to 1e-4 -> 2^-13.
    amax = torch.tensor([3.5, 3.5 * (1 + 2 ** -20), 0.0, 2.0])
    assert pow2_scale(amax).tolist() == [2 ** -7, 2 ** -6, 2 ** -13, 2 ** -7]


def test_e2m1_rounding_ties_to_even_and_saturation():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.75, float("nan"), 0.26])
    assert e2m1_encode(x).tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 8 | 2, 0, 1]


def test_v32_bytes_by_hand():
    # tile 0: 3.5 then 1.0 -> scale 2^-7, codes 448 (0x7E) and 128 (0x70); tile 1 zero -> scale 2^-13;
    # tile 2: bf16(0.1) = 0.10009765625, scale 2^-12, 410.0 rounds to 416 = 0x7D; tile 3: -2.0 -> 0xF8.
    x = _token(576, {(0, 1): 3.5, (1, 128): 1.0, (256, 384): 0.1, (384, 512): -2.0, (512, 576): 1.5})
    rec = _one_token_cache(x, KVCacheFormat.V32_FP8).view(torch.uint8).reshape(-1)
    assert rec.numel() == 656
    assert rec[:2].tolist() == [0x7E, 0x70] and set(rec[1:128].tolist()) == {0x70}
    assert set(rec[128:256].tolist()) == {0} and set(rec[256:384].tolist()) == {0x7D}
    assert set(rec[384:512].tolist()) == {0xF8}
    assert rec[512:528].tolist() == [0, 0, 0, 0x3C, 0, 0, 0, 0x39, 0, 0, 0x80, 0x39, 0, 0, 0, 0x3C]
    assert rec[528:530].tolist() == BF16_1_5 and rec[528:656].reshape(64, 2).unique(dim=0).tolist() == [BF16_1_5]
    back = flash_mla.dequantize_k_cache(rec.view(1, 1, 1, 656)).float().reshape(-1)
    assert back[0] == 3.5 and back[1] == 1.0 and back[200] == 0 and back[300] == 416 / 4096
    assert back[400] == -2.0 and back[560] == 1.5


def test_model1_bytes_by_hand_block_split():
    # page of 2 tokens, token in slot 1: data row at 576, scale row at 2*576 + 8.
    x = _token(512, {(0, 1): 3.5, (1, 64): 1.0, (448, 512): 1.5})
    raw = _one_token_cache(x, KVCacheFormat.MODEL1_FP8, page=2, slot=1).view(torch.uint8)
    flat = raw.reshape(-1)
    assert raw.shape == (1, 2, 1, 584) and flat.numel() == 2 * 584
    data, scales = flat[576:1152], flat[1160:1168]
    assert data[:2].tolist() == [0x7E, 0x70] and set(data[64:448].tolist()) == {0}
    assert data[448:576].reshape(64, 2).unique(dim=0).tolist() == [BF16_1_5]
    assert scales.tolist() == [120, 114, 114, 114, 114, 114, 114, 0]   # e8m0: 2^-7 and 2^-13, then the pad byte
    assert flat[:576].count_nonzero() == 0 and flat[1152:1160].tolist() == [114] * 7 + [0]  # slot 0 is all zero
    back = flash_mla.dequantize_k_cache(raw).float()[0, 1, 0]
    assert back[0] == 3.5 and back[63] == 1.0 and back[500] == 1.5


@pytest.mark.parametrize("placement", ["interleaved", "block_split"])
def test_v41_fp8_bytes_by_hand(placement):
    x = _token(512, {(0, 1): 3.5, (1, 32): 1.0, (480, 512): -2.0})
    flat = _one_token_cache(x, KVCacheFormat.V41_FP8, placement, page=2, slot=1).view(torch.uint8).reshape(-1)
    data, scales = (flat[528:1040], flat[1040:1056]) if placement == "interleaved" else (flat[512:1024], flat[1040:1056])
    assert data[:2].tolist() == [0x7E, 0x70] and set(data[32:480].tolist()) == {0}
    assert set(data[480:].tolist()) == {0xF8}
    assert scales.tolist() == [120] + [114] * 14 + [120]


@pytest.mark.parametrize("placement", ["interleaved", "block_split"])
def test_v41_fp4_bytes_by_hand(placement):
    # tile 0: amax 6 -> scale e4m3(1.0) = 0x38; codes 6->7, 1->2, -0.75->-1 (tie to even, 0xA),
    # 0.25 -> 0 (tie), 2.5 -> 2 (tie, code 4). Tile 1 zero -> scale clamps to 2^-9 = 0x01.
    # tile 2: bf16(0.3) = 0.30078125, scale e4m3(0.0501) = 0.05078125 (0x15), 5.92 -> code 7.
    x = _token(512, {(0, 1): 6.0, (1, 2): 1.0, (2, 3): -0.75, (3, 4): 0.25, (4, 5): 2.5, (32, 33): 0.3})
    flat = _one_token_cache(x, KVCacheFormat.V41_FP4, placement, page=2, slot=1).view(torch.uint8).reshape(-1)
    data, scales = (flat[288:544], flat[544:576]) if placement == "interleaved" else (flat[256:512], flat[544:576])
    assert data[:3].tolist() == [0x27, 0x0A, 0x04] and data[16].item() == 0x07
    assert data.count_nonzero() == 4
    assert scales[:3].tolist() == [0x38, 0x01, 0x15] and set(scales[3:].tolist()) == {0x01}
    back = flash_mla.dequantize_k_cache(flat.view(1, 2, 1, 288), placement=placement).float()[0, 1, 0]
    assert back[:5].tolist() == [6.0, 1.0, -1.0, 0.0, 2.0] and back[32] == 6 * 0.05078125


@pytest.mark.parametrize("fmt,placement", [(KVCacheFormat.V32_FP8, None), (KVCacheFormat.MODEL1_FP8, None),
                                           (KVCacheFormat.V41_FP8, "interleaved"), (KVCacheFormat.V41_FP8, "block_split"),
                                           (KVCacheFormat.V41_FP4, "interleaved"), (KVCacheFormat.V41_FP4, "block_split")])
def test_round_trip_error_and_padded_blocks(fmt, placement):
    k = (torch.randn(3, 5, 1, fmt.d_qk, generator=torch.Generator().manual_seed(1)) / 10).bfloat16()
    cache = flash_mla.quantize_k_cache(k, fmt, placement, block_stride=5 * fmt.bytes_per_token + 48)
    assert cache.shape == (3, 5, 1, fmt.bytes_per_token) and cache.stride(0) == 5 * fmt.bytes_per_token + 48
    back = flash_mla.dequantize_k_cache(cache, fmt, placement).float()
    err = (back - k.float()).abs()
    # per-tile relative step: e4m3 keeps 3 mantissa bits (2^-4 relative), e2m1 about 1/4 of the amax
    bound = 0.25 * k.float().abs().amax() if fmt is KVCacheFormat.V41_FP4 else 2 ** -4 * k.float().abs().amax()
    assert err.max() <= bound
    if fmt is not KVCacheFormat.V41_FP4:
        # FP8 grids with power-of-two scales are a fixed point: re-quantising the dequantised values
        # may pick a smaller scale but must reproduce every value exactly
        again = flash_mla.quantize_k_cache(back.bfloat16(), fmt, placement)
        assert torch.equal(flash_mla.dequantize_k_cache(again, fmt, placement), back.bfloat16())


@pytest.mark.parametrize("block_stride", [None, 3 * 600])
@pytest.mark.parametrize("fmt", [KVCacheFormat.V41_FP8, KVCacheFormat.V41_FP4])
def test_layout_conversion(backend, block_stride, fmt):
    """Both placements from quantize_k_cache, padded blocks too; the converted cache is compact."""
    k = (torch.randn(2, 3, 1, 512) / 10).bfloat16()
    inter, split = (flash_mla.quantize_k_cache(k, fmt, p) for p in ("interleaved", "block_split"))
    if block_stride is not None:  # padded input blocks, compact output
        padded = {p: flash_mla.quantize_k_cache(k, fmt, p, block_stride) for p in ("interleaved", "block_split")}
        assert torch.equal(flash_mla.convert_kv_layout(padded["interleaved"], "block_split").view(torch.uint8),
                           split.view(torch.uint8))
        assert torch.equal(flash_mla.convert_kv_layout(padded["block_split"], "interleaved").view(torch.uint8),
                           inter.view(torch.uint8))
    assert not torch.equal(inter.view(torch.uint8), split.view(torch.uint8))
    assert torch.equal(flash_mla.convert_kv_layout(inter, "block_split").view(torch.uint8), split.view(torch.uint8))
    assert torch.equal(flash_mla.convert_kv_layout(split, "interleaved").view(torch.uint8), inter.view(torch.uint8))
    with pytest.raises(ValueError, match="fixed placement"):
        flash_mla.convert_kv_layout(flash_mla.quantize_k_cache(k, KVCacheFormat.MODEL1_FP8), "interleaved")
    with pytest.raises(ValueError, match=r"quant_k_cache: expected \[num_blocks, page_block_size, 1, "):
        flash_mla.convert_kv_layout(inter[:, ::2], "block_split", fmt)
    with pytest.raises(TypeError, match="k_cache: expected dtype"):
        flash_mla.convert_kv_layout(inter.view(torch.uint8).float(), "block_split", fmt)
    assert backend != "ascend" or set(backend.served) == {"convert_kv_layout"}


def test_layout_conversion_of_an_empty_cache(backend):
    cache = torch.empty(0, 4, 1, KVCacheFormat.V41_FP8.bytes_per_token, dtype=torch.float8_e4m3fn)
    assert flash_mla.convert_kv_layout(cache, "block_split").shape == (0, 4, 1, 528)


def test_abs_indices_through_block_table():
    block_table = torch.tensor([[3, 1], [0, 2]], dtype=torch.int32)
    abs_idx = torch.tensor([[[0, 5, -1]], [[4, 7, 3]]], dtype=torch.int32)
    got = flash_mla.abs_indices_to_indices_in_kvcache(abs_idx, block_table, 4)
    assert got.tolist() == [[[12, 5, -1]], [[8, 11, 3]]]


def test_format_errors():
    with pytest.raises(ValueError, match="bytes_per_token .* got 600"):
        flash_mla.dequantize_k_cache(torch.zeros(1, 2, 1, 600, dtype=torch.uint8))
    with pytest.raises(ValueError, match="kv_layout: expected 'block_split'"):
        flash_mla.quantize_k_cache(torch.zeros(1, 2, 1, 512).bfloat16(), KVCacheFormat.MODEL1_FP8, "interleaved")
    with pytest.raises(ValueError, match="expected \\[num_blocks"):
        flash_mla.quantize_k_cache(torch.zeros(1, 2, 1, 576).bfloat16(), KVCacheFormat.V41_FP8)
