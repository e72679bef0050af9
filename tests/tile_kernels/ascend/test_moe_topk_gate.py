"""tile_kernels.ascend.moe_topk_gate on the Ascend twin, what is particular to the kernel: the forms the
table leaves to the reference (expert counts past a UB row, physical maps past a UB tile) and the clamping
of fixed ids and replica counts the public op cannot check on device tensors (the kernel's entry point,
against the reference on the clamped values). The router's contract (every option, tiles, strided outputs,
no tokens, NaN/Inf) runs on every backend in tests/tile_kernels/moe/test_moe_topk_gate_forward.py."""
import torch

from tile_kernels import _dispatch
from tile_kernels.ascend import moe_topk_gate as gate
from tile_kernels.reference import moe_topk_gate as ref

from ..moe.test_moe_topk_gate_forward import ALL_OPTIONS, REF_ARGS, _seeded_inputs


def _inputs(tokens, experts, k, shared, seed):
    """The main file's seeded router inputs (every option), with a contiguous ``unmapped_topk_idx`` (same values)."""
    logits, kw = _seeded_inputs(tokens, experts, k, shared, seed)
    kw["unmapped_topk_idx"] = kw["unmapped_topk_idx"].contiguous()
    return logits, kw


def _run(fn, logits, k, shared, scale, ep_rank, kw, out_strided=False):
    """(ids, weights, unmapped, scores) written by ``fn`` (the kernel's entry point or the reference)."""
    t, e = logits.shape
    width = k + shared
    if out_strided:
        idx = torch.full((t, width + 2), 5, dtype=torch.int64)[:, 1:-1]
        w = torch.full((t, width + 2), 5.0)[:, 1:-1]
    else:
        idx, w = torch.full((t, width), 5, dtype=torch.int64), torch.full((t, width), 5.0)
    scores = torch.full((t, e), 7.0)
    un = kw.get("unmapped_topk_idx")
    if un is not None:  # a column slice of a wider buffer, as upstream allows
        un = torch.cat([un, torch.full((t, 2), 9, dtype=torch.int64)], 1)[:, :k]
    a = {n: kw.get(n) for n in REF_ARGS} | {"unmapped_topk_idx": un}
    fn(logits, k, shared, scale, ep_rank, a["mask"], a["bias"], a["image_bias"], a["image_token_mask"],
       a["fix_routing_mask"], a["to_physical_map"], a["logical_count"], a["unmapped_topk_idx"], a["force_random"],
       idx, w, scores)
    return idx, w, un, scores


def _check(got, want):
    ids, w, un, sc = got
    ids_r, w_r, un_r, sc_r = want
    assert torch.equal(ids, ids_r)
    assert torch.allclose(w, w_r, equal_nan=True)
    if un_r is not None:
        assert torch.equal(un, un_r)
    assert torch.allclose(sc, sc_r, equal_nan=True)


def test_forms_left_to_the_reference(monkeypatch):
    """More experts than a UB row holds, or a to_physical_map past its UB tile: the reference serves them."""
    monkeypatch.setenv("TK_BACKEND", "ascend")

    def served(experts, map_cols):
        logits = torch.empty(1, experts)
        phys = None if map_cols is None else torch.zeros(experts, map_cols, dtype=torch.int32)
        count = None if map_cols is None else torch.ones(experts, dtype=torch.int32)
        return _dispatch.TABLE.serves("moe_topk_gate_forward", logits.device, logits, 2, 0, 1.0, 0, None, None, None,
                                 None, None, phys, count, None, None, torch.empty(1, 2, dtype=torch.int64),
                                 torch.empty(1, 2), None)

    assert served(gate.MAX_EXPERTS, None) == "ascend" and served(gate.MAX_EXPERTS + 1, None) == "reference"
    assert served(256, 32) == "ascend" and served(256, 33) == "reference"  # 33 columns pad to 40 in UB
    assert served(1024, 8) == "ascend" and served(1024, 3) == "ascend" and served(1025, 3) == "reference"


def test_out_of_range_values_are_clamped_in_the_kernel():
    """The public op checks fixed ids and replica counts on CPU tensors only (no host read of device tensors);
    the kernel clamps them (ids into [0, E), counts into [1, map columns]), so it never reads past a tile:
    the result is the reference's on the clamped values."""
    experts, k, shared = ALL_OPTIONS
    logits, kw = _inputs(37, experts, k, shared, 5)
    kw["fix_routing_mask"][:] = True
    kw["unmapped_topk_idx"][0, 0], kw["unmapped_topk_idx"][1, 1] = 1 << 40, -5
    kw["logical_count"][0], kw["logical_count"][3] = 0, 99
    clamped = dict(kw, unmapped_topk_idx=kw["unmapped_topk_idx"].clamp(0, experts - 1),
                   logical_count=kw["logical_count"].clamp(1, kw["to_physical_map"].shape[1]))
    _check(_run(gate.moe_topk_gate_forward, logits, k, shared, 1.0, 0, kw),
           _run(ref.moe_topk_gate_forward, logits, k, shared, 1.0, 0, clamped))
