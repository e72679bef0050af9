"""flash_mla's Ascend convert_kv_layout (flash_mla/ascend/kv_relayout.asc) on deepjit's Ascend twin,
through flash_mla.convert_kv_layout with FMLA_BACKEND=ascend: byte-exact against the reference
(records gathered by _operands.gather_records) in both directions, for the FP8 and FP4 V4.1 formats,
pages past one 128-token work item with a tail, more items than vector cores (a core walks two, through
both UB buffers), padded input blocks. The public contract (both placements, padded blocks, an empty cache,
bad input) runs on every backend in tests/flash_mla/test_kv_cache.py."""
import pytest
import torch

import flash_mla
from flash_mla import _dispatch, reference
from flash_mla.kv_cache import KVCacheFormat as F


def _cache(fmt: F, num_blocks: int, page: int, block_stride: int, seed: int) -> torch.Tensor:
    """Random bytes (any byte is a valid record byte here), blocks block_stride apart."""
    g = torch.Generator().manual_seed(seed)
    buf = torch.randint(0, 256, (num_blocks, block_stride), generator=g, dtype=torch.uint8)
    bpt = fmt.bytes_per_token
    return buf.as_strided((num_blocks, page, 1, bpt), (block_stride, bpt, bpt, 1)).view(torch.float8_e4m3fn)


@pytest.mark.parametrize("fmt,num_blocks,page,pad", [
    (F.V41_FP8, 3, 130, 96),   # two work items per block, the second of 2 tokens; padded input blocks
    (F.V41_FP4, 70, 3, 0),     # one short item per block, compact; more items than the twin's 64 vector cores
])
@pytest.mark.parametrize("to", ["block_split", "interleaved"])
def test_matches_reference(monkeypatch, fmt, num_blocks, page, pad, to):
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    cache = _cache(fmt, num_blocks, page, page * fmt.bytes_per_token + pad, seed=page)
    assert _dispatch.TABLE.serves("convert_kv_layout", cache.device, cache, fmt, to) == "ascend"
    got = flash_mla.convert_kv_layout(cache, to)
    want = reference.relayout_reference(cache, fmt, to)
    assert got.dtype == cache.dtype and got.shape == cache.shape and got.is_contiguous()
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    back = flash_mla.convert_kv_layout(got, "interleaved" if to == "block_split" else "block_split")
    assert torch.equal(back.view(torch.uint8), cache.view(torch.uint8).contiguous())
