"""flash_mla's Ascend dense varlen attention forward (flash_mla/ascend/dense_attn.asc, packed form) on
deepjit's Ascend twin (CPU tensors, FMLA_BACKEND=ascend) through flash_attn_varlen_func, against the
FP32 reference at upstream's varlen tolerances at DeepSeek's MHA-prefill head dims (d_qk 192, d_v 128,
one compiled kernel): an MHA class and a GQA class (4 query heads per kv head), causal (bottom-right) and not, sequences off the
64-key step, an empty sequence and a query row with no visible key (s_q > s_k under the causal mask:
out 0, lse +inf as the reference); lse stored head-major as upstream. Also FP16 inputs, logits that move the
softmax's reference max every step, and a NaN value row left in UB by an earlier item."""
import math

import pytest
import torch

import flash_mla
from flash_mla import _dispatch, reference
from flash_mla._lib import LIB
from tests.testkit.npu import DEVICE

from ..compare import assert_close

VARLEN_OUT = (1e-3, 8.01 / 128, 7e-6)
VARLEN_LSE = (1e-6, 2.01 / 65536, None)


def _case(lens_q, lens_k, h_q, h_kv, d_qk, d_v, seed):
    g = torch.Generator().manual_seed(seed)
    cu_q = torch.tensor([0] + lens_q).cumsum(0).int()
    cu_k = torch.tensor([0] + lens_k).cumsum(0).int()
    q = (torch.randn(int(cu_q[-1]), h_q, d_qk, generator=g) / 10).bfloat16()
    k = (torch.randn(int(cu_k[-1]), h_kv, d_qk, generator=g) / 10).bfloat16()
    v = (torch.randn(int(cu_k[-1]), h_kv, d_v, generator=g) / 10).bfloat16()
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("lens_q,lens_k,h_q,h_kv,d_qk,d_v,causal", [
    ([5, 0, 19], [3, 4, 70], 2, 2, 192, 128, True),    # MHA; row 0..1 of sequence 0 see no key
    ([1, 7], [65, 9], 8, 2, 192, 128, False),           # GQA 4:1, 28 rows of one kv head
])
def test_served_by_ascend_and_matches_reference(monkeypatch, lens_q, lens_k, h_q, h_kv, d_qk, d_v, causal):
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    q, k, v, cu_q, cu_k = _case(lens_q, lens_k, h_q, h_kv, d_qk, d_v, seed=h_q)
    scale = d_qk ** -0.5
    assert _dispatch.TABLE.serves("varlen_attention", q.device, q, k, v, cu_q, cu_k, scale, causal) == "ascend"
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, scale, causal)
    assert out.dtype == torch.bfloat16 and lse.stride(0) == 1
    assert_close(out, ref_out, VARLEN_OUT, "out")
    assert_close(lse, ref_lse, VARLEN_LSE, "lse")
    if causal:  # s_q 5 over s_k 3: the first two rows see nothing
        assert out[:2].abs().max() == 0 and bool((lse[:2] == math.inf).all())


def test_a_d_v_of_partial_registers_runs_the_reference(monkeypatch):
    # the kernel's rescale and output passes take whole 64-column registers: d_v 80 is not its form
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    q, k, v, cu_q, cu_k = _case([3, 4], [5, 9], 2, 2, 96, 80, seed=3)
    scale = 96 ** -0.5
    assert _dispatch.TABLE.serves("varlen_attention", q.device, q, k, v, cu_q, cu_k, scale, False) != "ascend"
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 9, causal=False)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, scale, False)
    assert_close(out, ref_out, VARLEN_OUT, "out")
    assert_close(lse, ref_lse, VARLEN_LSE, "lse")


def test_more_items_than_cube_cores_and_reference_dtypes(monkeypatch):
    # 40 short sequences (some empty) of 4 heads over one kv head: 160 work items on the twin's 32 cube
    # cores, most ending at once (rows past their sequence), several full ones per block (flags and
    # credits carry over); FP32 inputs keep the reference
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    g = torch.Generator().manual_seed(3)
    lens_q = torch.randint(0, 4, (40,), generator=g).tolist()
    lens_k = torch.randint(1, 70, (40,), generator=g).tolist()
    q, k, v, cu_q, cu_k = _case(lens_q, lens_k, 4, 1, 192, 128, seed=3)
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, 192 ** -0.5, True)
    assert_close(out, ref_out, VARLEN_OUT, "out")
    assert_close(lse, ref_lse, VARLEN_LSE, "lse")
    f = (q.float(), k.float(), v.float(), cu_q, cu_k, 0.125, True)
    assert _dispatch.TABLE.serves("varlen_attention", q.device, *f) == "reference"


def test_fp16_inputs(monkeypatch):
    """FP16 q / k / v run the FP16 kernel (P and out rounded to FP16)."""
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    q, k, v, cu_q, cu_k = (t.half() if t.is_floating_point() else t
                           for t in _case([3, 9], [70, 12], 4, 2, 192, 128, seed=11))
    assert _dispatch.TABLE.serves("varlen_attention", q.device, q, k, v, cu_q, cu_k, 0.1, True) == "ascend"
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 70, causal=True)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, 192 ** -0.5, True)
    assert out.dtype == torch.float16
    assert_close(out, ref_out, VARLEN_OUT, "out")
    assert_close(lse, ref_lse, VARLEN_LSE, "lse")


def test_growing_logits_rescale_the_accumulator(monkeypatch):
    """Logits that grow by more than the rescale skip (8) from one 64-key step to the next: the reference max
    moves every step and the accumulator is rescaled by exp(m_old - m_new) each time."""
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    q, k, v, cu_q, cu_k = _case([4], [250], 2, 1, 192, 128, seed=12)
    q[:] = 0.05
    k[:] = (torch.arange(250).float() * 0.3).view(250, 1, 1).bfloat16()  # logit p: 0.05 * 192 * 0.3p / sqrt(192)
    assert _dispatch.TABLE.serves("varlen_attention", q.device, q, k, v, cu_q, cu_k, 0.1, False) == "ascend"
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 250, causal=False)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, 192 ** -0.5, False)
    assert float(ref_lse.max()) > 40  # about 13 nats a step
    assert_close(out, ref_out, VARLEN_OUT, "out")
    assert_close(lse, ref_lse, VARLEN_LSE, "lse")


@pytest.mark.parametrize("max_drops_nan", ["0", "1"])
def test_nan_logit_gives_a_nan_row(monkeypatch, max_drops_nan):
    """A NaN query element makes its row's logits NaN: out and lse NaN there, as the reference's, with the
    twin's register max propagating NaN and dropping it (DJ_TWIN_MAX_DROPS_NAN: the docs leave it open);
    the other rows are untouched."""
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    monkeypatch.setenv("DJ_TWIN_MAX_DROPS_NAN", max_drops_nan)
    q, k, v, cu_q, cu_k = _case([3, 2], [70, 9], 4, 2, 192, 128, seed=14)
    q[1, 2, 5] = float("nan")
    assert _dispatch.TABLE.serves("varlen_attention", q.device, q, k, v, cu_q, cu_k, 0.1, False) == "ascend"
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 3, 70, causal=False)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, 192 ** -0.5, False)
    assert bool(ref_out[1, 2].isnan().all()) and int(ref_out.isnan().sum()) == 128
    assert torch.equal(out.isnan(), ref_out.isnan()) and torch.equal(lse.isnan(), ref_lse.isnan())
    assert int(lse.isnan().sum()) == 1
    assert_close(out, ref_out, VARLEN_OUT, "out")
    assert_close(lse, ref_lse, VARLEN_LSE, "lse")


def test_stale_nan_value_rows_stay_out_of_later_items(monkeypatch):
    """Sequence 0's value row 20 is NaN (its rows' outputs are NaN, as the reference's). Sequence 32 runs next
    on the same block (33 items over 32 cube cores) with 5 keys: its tile's rows past them still hold sequence
    0's rows in UB and must be zeroed (0 x NaN would poison P . V) -- its output stays finite."""
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    lens_k = [40] + [3] * 31 + [5]
    q, k, v, cu_q, cu_k = _case([1] * 33, lens_k, 1, 1, 192, 128, seed=13)
    assert LIB.num_cube_cores(q.device) == 32  # items 0 and 32 share block 0
    v[20] = float("nan")
    assert _dispatch.TABLE.serves("varlen_attention", q.device, q, k, v, cu_q, cu_k, 0.1, False) == "ascend"
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 1, 40, causal=False)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, 192 ** -0.5, False)
    assert bool(out[0].isnan().all()) and not out[1:].isnan().any()
    assert_close(out[1:], ref_out[1:], VARLEN_OUT, "out")
    assert_close(lse, ref_lse, VARLEN_LSE, "lse")


def test_kernel_clamps_cu_seqlens():
    # cu_seqlens past the token counts (not checked on the host for device tensors) are clamped in the kernel
    from flash_mla.ascend import dense_attn
    q, k, v, cu_q, cu_k = _case([2, 3], [4, 5], 4, 1, 192, 128, seed=6)
    bad_q, bad_k = torch.tensor([0, 2, 99], dtype=torch.int32), torch.tensor([-3, 4, 10 ** 6], dtype=torch.int32)
    out, lse = dense_attn.varlen_attention(q, k, v, bad_q, bad_k, 0.125, False)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q.clamp(0, 5), bad_k.clamp(0, 9), 0.125, False)
    assert_close(out, ref_out, VARLEN_OUT, "out")
    assert_close(lse, ref_lse, VARLEN_LSE, "lse")


@pytest.mark.npu
def test_on_the_npu():
    q, k, v, cu_q, cu_k = _case([100, 37], [120, 300], 16, 16, 192, 128, seed=4)
    dev = torch.device(DEVICE)
    out, lse = flash_mla.flash_attn_varlen_func(*(t.to(dev) for t in (q, k, v, cu_q, cu_k)), 100, 300, causal=True)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, 192 ** -0.5, True)
    assert_close(out.cpu(), ref_out, VARLEN_OUT, "out")
    assert_close(lse.cpu(), ref_lse, VARLEN_LSE, "lse")


def test_negative_scale(monkeypatch):
    """The softmax's step max is taken before scaling (online_softmax.h): with a negative scale it is taken
    over the negated logits (scaled logits of about +-200: exp(x - m) from the wrong side overflows)."""
    monkeypatch.setenv("FMLA_BACKEND", "ascend")
    q, k, v, cu_q, cu_k = _case([6, 9], [40, 70], 2, 2, 192, 128, seed=11)
    out, lse = flash_mla.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 70, softmax_scale=-600.0)
    ref_out, ref_lse = reference.varlen_attention(q, k, v, cu_q, cu_k, -600.0, False)
    assert_close(out, ref_out, VARLEN_OUT, "out")
    assert_close(lse, ref_lse, VARLEN_LSE, "lse")
