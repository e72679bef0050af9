"""Argument checks without processes: fuzzed bad dispatch/combine arguments raise ValueError or
TypeError naming the argument, and the host plan kernel rejects bad expert ids without touching
anything out of bounds."""
import re

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from deep_ep.engine.checks import check_dispatch, check_low_latency_dispatch

R = 2


def _good(T=4, H=128, K=2, E=8):
    x = torch.zeros(T, H, dtype=torch.bfloat16)
    idx = torch.tensor([[i % E, (i + 1) % E] for i in range(T)], dtype=torch.int64)[:, :K]
    return dict(x=x, topk_idx=idx, topk_weights=torch.ones(T, K), stats=None, num_experts=E,
                num_max_tokens_per_rank=T, expert_alignment=1, handle=None, do_cpu_sync=None, do_expand=False,
                do_zero_padding=False, col_major_sf=False)


def test_good_arguments_pass():
    a = check_dispatch(R, **_good())
    assert a.num_tokens == 4 and a.num_topk == 2 and a.do_cpu_sync


MUTATIONS = {
    "x dtype": (lambda a: a.update(x=torch.zeros(4, 128)), TypeError, "x: expected dtype"),
    "x 3-D": (lambda a: a.update(x=torch.zeros(1, 4, 128, dtype=torch.bfloat16)), ValueError, "x: expected a 2-D tensor"),
    "x row bytes": (lambda a: a.update(x=torch.zeros(4, 4, dtype=torch.bfloat16)), ValueError,
                    "x: expected row bytes that are a multiple of 16, got hidden 4 x 2 bytes"),
    "x strided": (lambda a: a.update(x=torch.zeros(4, 256, dtype=torch.bfloat16)[:, ::2]), ValueError,
                  "x: expected contiguous rows (stride 1 along hidden), got strides (256, 2)"),
    "topk dtype": (lambda a: a.update(topk_idx=a["topk_idx"].int()), TypeError, "topk_idx: expected dtype"),
    "topk rows": (lambda a: a.update(topk_idx=a["topk_idx"][:3]), ValueError,
                  "topk_idx: expected one row per token (4), got shape (3, 2)"),
    "topk wide": (lambda a: a.update(topk_idx=torch.zeros(4, 65, dtype=torch.int64)), ValueError,
                  "topk_idx: expected num_topk (dim 1) in [1, 64], got shape (4, 65)"),
    "weights shape": (lambda a: a.update(topk_weights=torch.ones(4, 3)), ValueError,
                      "topk_weights: expected shape (4, 2) like topk_idx, got (4, 3)"),
    "weights dtype": (lambda a: a.update(topk_weights=torch.ones(4, 2, dtype=torch.float64)), TypeError,
                      "topk_weights: expected dtype"),
    "experts uneven": (lambda a: a.update(num_experts=7), ValueError,
                       "num_experts: expected a multiple of the number of ranks (2): experts are split evenly, got 7"),
    "experts type": (lambda a: a.update(num_experts=8.0), TypeError, "num_experts: expected an int"),
    "capacity": (lambda a: a.update(num_max_tokens_per_rank=3), ValueError,
                 "x: expected at most num_max_tokens_per_rank (3) tokens, the capacity every rank agreed on, got 4 tokens"),
    "alignment": (lambda a: a.update(expert_alignment=0), ValueError, "expert_alignment: expected a value >= 1"),
    "padding": (lambda a: a.update(do_zero_padding=True), ValueError,
                "do_zero_padding: expected False unless do_expand=True, got True with do_expand=False"),
    "stats": (lambda a: a.update(stats=torch.zeros(3, dtype=torch.int32)), ValueError,
              "cumulative_local_expert_recv_stats: expected shape (4,), got (3,)"),
    "no experts": (lambda a: a.update(num_experts=None), ValueError,
                   "num_experts: expected an int without a cached handle, got None"),
    "fp8 scales rows": (lambda a: a.update(x=(torch.zeros(4, 128, dtype=torch.float8_e4m3fn), torch.ones(3, 1))),
                        ValueError, "x[1] (scales): expected 4 rows like x[0], got shape (3, 1)"),
    "fp8 scales dtype": (lambda a: a.update(x=(torch.zeros(4, 128, dtype=torch.float8_e4m3fn),
                                               torch.ones(4, 1, dtype=torch.float64))), TypeError, "x[1] (scales)"),
}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=1, max_size=3, unique=True))
@example(["topk wide", "topk rows"])   # the rows check reports the wide tensor's shape
def test_fuzzed_bad_arguments_raise_named_errors(names):
    args = _good()
    for name in names:
        MUTATIONS[name][0](args)
    with pytest.raises((ValueError, TypeError)) as info:
        check_dispatch(R, **args)
    message = str(info.value)
    if len(names) == 1:   # alone, a mutation gives its whole message
        assert MUTATIONS[names[0]][2] in message, (names, message)
    else:                 # combined, the reported value may carry another mutation's shape: name and expectation
        assert any(MUTATIONS[n][2].split(", got ")[0] in message for n in names), (names, message)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8), st.sampled_from([2, 4]), st.integers(-5, 40), st.data())
def test_plan_kernel_rejects_bad_ids(T, K, ranks, bad_value, data):
    from deep_ep.engine.checks import DispatchArgs
    from deep_ep.host.engine import HostEngine
    E = 4 * ranks
    g = torch.Generator().manual_seed(T * 100 + K)
    idx = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)])  # K <= 8 <= E: distinct ids
    t, k = data.draw(st.integers(0, T - 1)), data.draw(st.integers(0, K - 1))
    idx[t, k] = bad_value
    a = DispatchArgs(torch.zeros(T, 128, dtype=torch.bfloat16), None, idx.contiguous(), None, None, E, T, 1, None,
                     True, False, False, False)
    engine = HostEngine(None, 0, ranks, 1 << 30, 1)
    row = idx[t].tolist()
    duplicate = bad_value >= 0 and row.count(bad_value) > 1
    if bad_value < -1 or bad_value >= E:
        with pytest.raises(ValueError, match=re.escape(f"topk_idx: expected expert ids in [-1, {E}), got "
                                                       f"topk_idx[{t}, {k}] = {bad_value}")):
            engine.plan(a)
    elif duplicate:
        with pytest.raises(ValueError, match=re.escape(f"topk_idx: expected each expert at most once per token, got "
                                                       f"expert {bad_value} twice in topk_idx[{t}] (slot ")):
            engine.plan(a)
    else:
        plan = engine.plan(a)
        sent = (idx >= 0).sum()
        assert int(plan.send_counts[:, 1:].sum()) == int(sent)


@pytest.mark.parametrize("change, fragment", [
    (dict(x=torch.zeros(2, 32768 + 128, dtype=torch.bfloat16)),
     "x: expected a hidden size that is a multiple of 128 and at most 32768, got hidden 32896"),
    (dict(x=torch.zeros(2, 192, dtype=torch.bfloat16)),
     "x: expected a hidden size that is a multiple of 128 and at most 32768, got hidden 192"),
    (dict(idx=torch.zeros(2, 65, dtype=torch.int64)),
     "topk_idx: expected int64 of shape (2, num_topk <= 64) on cpu, got torch.int64 (2, 65)"),
    (dict(M=1), "x: expected at most num_max_dispatch_tokens_per_rank (1) tokens, got 2 tokens"),
    (dict(M=0), "num_max_dispatch_tokens_per_rank: expected a positive int, got 0"),
    (dict(E=7), "num_experts: expected a positive multiple of the number of ranks (2), got 7"),
    (dict(stats=torch.zeros(8, dtype=torch.int32)[::2]), "cumulative_local_expert_recv_stats: expected a contiguous "
     "int32 tensor of shape (4,) on cpu, got torch.int32 (4,) strides (2,)"),
])
def test_low_latency_dispatch_checks_shared_by_both_engines(change, fragment):
    """One check for the host and the Ascend low-latency dispatch (engine/checks.py)."""
    a = dict(x=torch.zeros(2, 256, dtype=torch.bfloat16), idx=torch.zeros(2, 2, dtype=torch.int64), M=4, E=8,
             stats=torch.zeros(4, dtype=torch.int32))
    check_low_latency_dispatch(R, a["x"], a["idx"], a["M"], a["E"], a["stats"])
    a.update(change)
    if "x" in change:
        a["idx"] = torch.zeros(a["x"].shape[0], 2, dtype=torch.int64)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        check_low_latency_dispatch(R, a["x"], a["idx"], a["M"], a["E"], a["stats"])
