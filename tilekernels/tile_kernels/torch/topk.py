from ..reference.topk import stable_topk, top2_sum_gate, topk_sum_and_topk_group_idx

__all__ = ["stable_topk", "topk_sum_and_topk_group_idx", "top2_sum_gate"]
