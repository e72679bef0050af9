"""Sizes from a caller's integer are checked before anything is allocated: an impossible one is a
ValueError naming the argument, not a 16 GiB allocation that gets the process OOM-killed."""
import pytest
import torch

import deep_gemm

E4M3 = torch.float8_e4m3fn


@pytest.mark.parametrize("num_sms", [2**31, 2**31 - 2, 2**40])
def test_paged_mqa_logits_metadata_num_sms(num_sms):
    lens = torch.ones(2, 1, dtype=torch.int32)
    with pytest.raises(ValueError, match="num_sms: expected"):
        deep_gemm.get_paged_mqa_logits_metadata(lens, 64, num_sms)


def test_paged_mqa_logits_metadata_num_sms_on_the_ascend_path(monkeypatch):
    monkeypatch.setenv("DG_BACKEND", "ascend")
    with pytest.raises(ValueError, match="num_sms: expected"):
        deep_gemm.get_paged_mqa_logits_metadata(torch.ones(2, 1, dtype=torch.int32), 64, 2**31 - 2)


def test_compressed_mqa_logits_max_seqlen_k():
    q = torch.zeros(4, 32, 128).to(E4M3)
    kv = (torch.zeros(8, 128).to(E4M3), torch.ones(8))
    ks, ke = torch.zeros(4, dtype=torch.int32), torch.full((4,), 8, dtype=torch.int32)
    with pytest.raises(ValueError, match="max_seqlen_k: expected a size whose logits"):
        deep_gemm.fp8_mqa_logits(q, kv, torch.ones(4, 32), ks, ke, clean_logits=False, max_seqlen_k=2**31 - 1)
    assert deep_gemm.fp8_mqa_logits(q, kv, torch.ones(4, 32), ks, ke, clean_logits=False,
                                    max_seqlen_k=8).shape == (4, 8)
