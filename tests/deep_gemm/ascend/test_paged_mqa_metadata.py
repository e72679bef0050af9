"""get_paged_mqa_logits_metadata on the Ascend vector kernel (deep_gemm/ascend/paged_mqa_metadata.*, on
deepjit's twin with DG_BACKEND=ascend): the schedule matches the reference exactly for [B, next_n], 1-D
and varlen (indices) lengths, lengths off the 256-token grid and totals num_sms does not divide, more
workers than work, no rows; served by the Ascend column without a host read; negative lengths count as 0."""
import pytest
import torch

import deep_gemm
from deep_gemm import _dispatch, reference
from tests.testkit.host_reads import guarding


def _ascend(monkeypatch, *args):
    with monkeypatch.context() as m:
        m.setenv("DG_BACKEND", "ascend")
        with guarding(args):
            return deep_gemm.get_paged_mqa_logits_metadata(*args)


VARLEN = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 4], dtype=torch.int32)


@pytest.mark.parametrize(("shape", "indices", "num_sms"), [((7, 2), None, 5), ((9,), None, 40), ((11, 1), VARLEN, 6),
                                                           ((0, 2), None, 3)])
def test_schedule_matches_the_reference(monkeypatch, shape, indices, num_sms):
    lens = torch.randint(-300, 3000, shape, dtype=torch.int32)
    monkeypatch.setenv("DG_BACKEND", "ascend")
    assert _dispatch.TABLE.serves("paged_mqa_logits_metadata", lens.device, lens, indices, num_sms) == "ascend"
    got = _ascend(monkeypatch, lens, 64, num_sms, indices)
    assert torch.equal(got, reference.paged_mqa_logits_metadata(lens, indices, num_sms))
    if lens.numel():   # the host path (non-negative lengths) agrees
        monkeypatch.setenv("DG_BACKEND", "host")
        assert torch.equal(got, deep_gemm.get_paged_mqa_logits_metadata(lens.clamp_min(0), 64, num_sms, indices))
