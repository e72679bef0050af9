"""``EPHandle``: what a dispatch leaves behind for combine and for cached dispatches."""
from __future__ import annotations

import torch

from deepjit import validation as V


class EPHandle:
    """Public fields follow upstream (see the spec, section 3.4); fields starting with ``_`` hold
    this implementation's routing plan (where each token went) and the receive block bounds."""

    def __init__(self, do_expand: bool, num_experts: int, expert_alignment: int, num_max_tokens_per_rank: int,
                 num_sms: int, topk_idx: torch.Tensor, num_recv_tokens: int, num_expanded_tokens: int,
                 num_recv_tokens_per_expert_list: list, psum_num_recv_tokens_per_scaleup_rank: torch.Tensor,
                 psum_num_recv_tokens_per_expert: torch.Tensor,
                 num_unaligned_recv_tokens_per_expert: torch.Tensor | None, recv_src_metadata: torch.Tensor,
                 dst_buffer_slot_idx: torch.Tensor, token_metadata_at_forward=None, channel_linked_list=None):
        self.do_expand = do_expand
        self.num_experts = num_experts
        self.expert_alignment = expert_alignment
        self.num_max_tokens_per_rank = num_max_tokens_per_rank
        self.num_sms = num_sms
        self.num_recv_tokens = num_recv_tokens
        self.num_expanded_tokens = num_expanded_tokens
        self.num_recv_tokens_per_expert_list = num_recv_tokens_per_expert_list
        self.psum_num_recv_tokens_per_scaleup_rank = psum_num_recv_tokens_per_scaleup_rank
        self.psum_num_recv_tokens_per_expert = psum_num_recv_tokens_per_expert
        self.num_unaligned_recv_tokens_per_expert = num_unaligned_recv_tokens_per_expert
        self.recv_src_metadata = recv_src_metadata
        self.dst_buffer_slot_idx = dst_buffer_slot_idx
        self.token_metadata_at_forward = token_metadata_at_forward
        self.channel_linked_list = channel_linked_list
        self._topk_idx = topk_idx
        self._topk_idx_version = None if topk_idx.is_inference() else topk_idx._version
        self._owner = None          # the buffer that made it
        self._plan = None           # engine-private routing plan
        self._valid_rows = 0        # received tokens actually present (<= num_recv_tokens)

    @property
    def topk_idx(self) -> torch.Tensor:
        self.check_topk_idx()
        return self._topk_idx

    def check_topk_idx(self) -> None:
        if self._topk_idx_version is not None and self._topk_idx._version != self._topk_idx_version:
            raise V.fail("handle", "a handle whose topk_idx is unchanged since its dispatch (a handle replays one "
                         "routing only: dispatch again for a new one)", "topk_idx modified in place")

    @property
    def num_topk(self) -> int:
        return self._topk_idx.shape[1]

    def _valid_rows_for_combine(self) -> int:
        return self._plan.num_expanded if self.do_expand else self._plan.num_rows
