"""deep_gemm.reference's MQA logits on out-of-range ranges, lengths and page ids (what the Ascend path hands
it for the forms its kernels refuse, without host checks): clamped as the Ascend kernels clamp -- ranges to
[0, S_kv), lengths to [0, min(table capacity, width)], a page id outside the cache scores 0 -- with no
host read of the index tensors (``DeviceOnly``). The oracle: the same reference on in-range inputs built
by hand (clamped ranges / lengths, each bad page id pointed at an all-zero page)."""
import torch

from deep_gemm import reference
from deep_gemm.attention import PagedKV, Quantised
from deep_gemm.utils import per_custom_dims_cast_to_fp8
from tests.testkit.host_reads import DeviceOnly, mark

from ._paged import fused_fp8_cache

SENTINEL = 2.0 ** 100


def _contiguous(s, s_kv, heads, head_dim):
    q = Quantised(torch.randn(s, heads, head_dim).to(torch.float8_e4m3fn), None, False, False)
    kv, sf = per_custom_dims_cast_to_fp8(torch.randn(s_kv, head_dim), (0,), False)
    return q, Quantised(kv, sf, False, True), torch.randn(s, heads)


def test_contiguous_ranges_clamped_without_host_reads():
    s, s_kv = 4, 40
    q, kv, weights = _contiguous(s, s_kv, 2, 32)
    ks = torch.tensor([-7, 3, 30, 10], dtype=torch.int32)
    ke = torch.tensor([5, 60, 20, 25], dtype=torch.int32)  # ke past S_kv, a start past its end
    clamped_ks, clamped_ke = ks.clamp_min(0), ke.clamp_max(s_kv)
    for compressed, clean, width in ((False, True, s_kv), (False, False, s_kv), (True, False, 45)):
        got = torch.full((s, width), SENTINEL)
        want = got.clone()
        with DeviceOnly():
            reference.mqa_logits(q, kv, weights, *mark(ks.clone(), ke.clone()), got, compressed, clean)
        reference.mqa_logits(q, kv, weights, clamped_ks, clamped_ke, want, compressed, clean)
        assert torch.equal(got, want), (compressed, clean)
        assert (got != SENTINEL).any() and (got == SENTINEL).any() != clean


def test_paged_lengths_clamped_and_bad_pages_score_zero_without_host_reads():
    batch, next_n, heads, head_dim, block_kv, num_pages, width = 3, 2, 2, 32, 32, 5, 100
    cache = fused_fp8_cache(num_pages + 1, block_kv, head_dim)
    cache[num_pages].zero_()  # the oracle's stand-in for a page outside the cache: scores exactly 0
    q = Quantised(torch.randn(batch, next_n, heads, head_dim).to(torch.float8_e4m3fn), None, False, False)
    weights = torch.randn(batch * next_n, heads)
    table = torch.tensor([[0, 7, 2], [-1, 1, 3], [4, 2, num_pages]], dtype=torch.int32)  # 7, -1, 5: bad
    lens = torch.tensor([[-3, 80], [500, 40], [96, 0]], dtype=torch.int32)  # capacity min(3 * 32, 100) = 96
    oracle_table = torch.where((table < 0) | (table >= num_pages), num_pages, table)
    for clean in (True, False):
        got = torch.full((batch * next_n, width), SENTINEL)
        want = got.clone()
        with DeviceOnly():
            reference.paged_mqa_logits(q, PagedKV(cache[:num_pages], False, head_dim), weights,
                                       *mark(lens.clone(), table.clone()), got, clean)
        reference.paged_mqa_logits(q, PagedKV(cache, False, head_dim), weights, lens.clamp(0, 96), oracle_table,
                                   want, clean)
        assert torch.equal(got, want), clean
        assert torch.all(got[2, :32] == 0) and torch.all(got[1, 32:64] == 0), "pages -1 and 7 score 0"
        assert torch.all(got[2:4, 96:] == (float("-inf") if clean else SENTINEL)), "past the table's capacity"
