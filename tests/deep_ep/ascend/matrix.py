"""The dispatch/combine checks of tests/deep_ep/cases.py run under ``EP_BACKEND=ascend`` inside spawned
ranks: the Ascend engine over gloo, its TileLang kernels on the Ascend twin. Each distinct kernel
shape costs a lowering per process (and a twin compile on a cold cache), so the case list is the
smallest that covers every path: BF16 token-major with weights and one bias; FP8 with FP32 scales,
expanded, alignment 128 with zero padding, two biases, a cached dispatch; packed UE8M0 scales
expanded without CPU sync; and expanded rows reduced once at the source (no multiple reduction)."""
from __future__ import annotations

import torch.distributed as dist

from ..cases import CASES, Case, check_by_hand, check_case

ASCEND_CASES = (CASES[0], CASES[1], CASES[2])


def run_matrix(rank, world, hidden, num_experts, M, topk, cases=None, group=None, device="cpu"):
    """``group`` (gloo's WORLD by default) and its ``device``: an HCCL group takes NPU tensors."""
    import deep_ep
    from deep_ep.ascend.engine import AscendEngine
    group = group or dist.group.WORLD
    if device == "cpu":   # the hand-worked 2-rank case on ranks 0 and 1 (every rank makes the group)
        pair = dist.new_group([0, 1]) if world > 2 else group
        if rank < 2:
            check_by_hand(rank, pair)
    buf = deep_ep.EPBuffer(group, num_max_tokens_per_rank=M, hidden=hidden, num_topk=topk,
                           explicitly_destroy=True, num_cpu_timeout_secs=60)
    assert isinstance(buf._engine, AscendEngine) and buf.transport == "dist"
    done = []
    for i, case in enumerate(ASCEND_CASES):
        if cases is not None and i not in cases:
            continue
        try:
            check_case(buf, case, rank, world, hidden, num_experts, M, topk, seed=i + 1, device=device)
        except AssertionError as exc:
            raise AssertionError(f"{case}: {exc}") from exc
        done.append(i)
    buf.destroy()
    if cases is not None:
        return done
    buf = deep_ep.EPBuffer(group, num_max_tokens_per_rank=M, hidden=hidden, num_topk=topk,
                           allow_multiple_reduction=False, explicitly_destroy=True, num_cpu_timeout_secs=60)
    check_case(buf, Case(None, False, True, 128, num_bias=2), rank, world, hidden, num_experts, M, topk, seed=99,
               multiple_reduction=False, device=device)
    buf.destroy()
    return done
