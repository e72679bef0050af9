"""The engine-private routing record of one dispatch, kept in the handle for combine and for
cached dispatches (the same for every transport)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RoutePlan:
    hidden: int
    num_ranks: int
    num_local_experts: int
    dst_slot: torch.Tensor        # [T, R] int32: slot of token t at rank d, -1 if not sent there
    within: torch.Tensor          # [T, K] int32: index of token t among this rank's tokens for that expert
    exp_pos: torch.Tensor         # [T, K] int32: index of (t, k) among this rank's pairs for that rank
    send_counts: torch.Tensor     # [R, 1 + E_local] int32: tokens, then tokens per local expert, per destination
    recv_counts: torch.Tensor | None = None   # [R, 1 + E_local] int32 from every source
    row_start: torch.Tensor | None = None     # [R + 1] int32: received rows of source s
    expert_base: torch.Tensor | None = None   # [R, E_local] int32: first expanded row of (source, expert)
    all_counts: torch.Tensor | None = None   # [R sources, R destinations, C]: every rank's count rows
    num_rows: int = 0
    num_expanded: int = 0
    layout_round: bool = False   # receivers publish where their outputs are (shared-memory transport)

    @property
    def send_tokens(self) -> torch.Tensor:
        return self.send_counts[:, 0]

    @property
    def recv_tokens(self) -> torch.Tensor:
        return self.recv_counts[:, 0]

    @property
    def send_pairs(self) -> torch.Tensor:
        return self.send_counts[:, 1:].sum(1)

    @property
    def recv_pairs(self) -> torch.Tensor:
        return self.recv_counts[:, 1:].sum(1)
