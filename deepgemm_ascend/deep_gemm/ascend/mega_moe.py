"""Mega MoE on Ascend: ``fp8_fp4_mega_moe`` / ``bf16_mega_moe`` with a ``SymmBuffer`` made under the Ascend
backend (NPU groups, or ``DG_BACKEND=ascend`` on CPU tensors: the twin), whose window is a
``deepjit.symm.DeviceWindow``: every rank's inputs and combine slots sit in symmetric memory that the
kernels of every rank read and write directly.

One call is one launch of the persistent mixed kernel ``mega_moe.asc`` on every cube core and its two vector
cores, on the rank's stream; the host neither waits on it nor reads anything back, and no other op runs around
it. Its steps, each on the cores it needs, all cores meeting between steps:

1. dispatch (``mega_moe_comm.h``) on the vector cores: each rank copies its inputs from the SymmBuffer's input
   tensors (its own device tensors, not window views: an NPU window, CANN SHMEM's heap, has no torch views) into
   its window, meets its dispatch cores on a window flag, publishes its token count and sets its arrival flag on
   every rank; once all have arrived, the (token, slot) pairs of every rank routed to each local expert
   are counted by chunks of each rank's tokens spread over the vector cores, and (after a grid barrier on a
   window flag) those of the first wave (below) pulled from the peers' windows into the psum layout (expert e's
   rows from ``align(end of e - 1, mk alignment)``, ordered by source rank, token, slot: the host path's order),
   with their top-k weights and sources; the psum ends and the receive stats are written;
2. the L1 M-grouped GEMM (``m_grouped.h``; FP8 x FP4 with the FP4 weights widened into L1 by each block's
   vector cores, ``m_grouped_fp4.h``: the 950's MX mmad takes no FP8 x FP4 pair) over the gate/up-interleaved
   weights as ``transform_weights_for_mega_moe`` leaves them;
3. SwiGLU (``mega_swiglu.h``) on the vector cores: clamp and top-k weight, de-interleaved, then FP8 with per-32
   UE8M0 scales (FP8 x FP4) or BF16, into the workspace;
4. the L2 M-grouped GEMM;
   both GEMMs without zero padding and SwiGLU over the experts' rows alone: no step reads or writes a row
   outside them. Zeroing them (the psum layout's padding runs to the wave's end after the last expert) wrote more
   bytes than the L2 weights at decode sizes, and a few tokens a rank left the SwiGLU step mostly gaps. The
   GEMMs read every operand where the step before left it (``_gemm_fields``): the activations' packed UE8M0 rows
   as K-major scale pairs, DeepGEMM-Ascend's weight scales in their 256-row blocks with their +6 bias (the FP4
   values widened to value / 64), upstream's in their UTCCP row order;
5. the sends (``mega_moe_comm.h``) on COMBINE_GRID vector cores: every L2 row goes straight into its source rank's
   combine slot ``[k, t]``.

Waves (upstream's ``num_ring_tokens``): the workspaces hold ``ring`` rows (``Workspace.m``: the buffer's
``num_ring_tokens`` rounded up to the alignment), the psum layout up to ``capacity`` rows. Wave w runs steps
1 (its pull) to 5 on the layout's rows ``[w * ring, (w + 1) * ring)``, with the end rows relative to it (an expert
whose rows cross a wave's border is split there: its rows are independent); the number of waves follows the
routing (the last expert's end row), one unless the rows outgrow the ring, and the host never learns it. After
the last wave each combine core adds 1 to its sent flag on every rank, and once every rank's cores have sent,
``y[t] = bf16(sum over valid k of float(slot[k, t]))``. A buffer sized for decode (``num_ring_tokens`` one expert's
worst case, upstream's default below 6144 tokens a rank) thus keeps workspaces of ring rows, not of every
(token, slot) pair of every rank.

Flags (int32): ``p`` = the last call rank p arrived at; ``R + p`` = COMBINE_GRID x the calls whose rows rank p
has sent; ``2R`` = the dispatch grid x (2 x the calls - 1 once this rank's cores have copied their inputs, 2 x the
calls once they have written their counts) (these three
monotonic); ``2R + 1`` = the launch's cores x the meetings of the call so far (``mega_moe.asc``'s meetings
between steps: ``meetings(waves)`` a call; set back to 0 at its end). A rank reaches call n + 1 only after its combine of call n, which waited for every peer's sends of call n, which come
after their pulls: no rank's inputs or slots are overwritten while a peer still reads them. A peer that never
arrives or never sends fails every waiting rank's kernel after the window's timeout, naming the rank and the
flag. The steps on their own (``mega_moe_comm.asc``, ``mega_swiglu.asc``, the M-grouped kernels) run the same
code; ``_comm`` launches the dispatch or combine of a one-wave call alone (the tests' peer that stops between
them).

Not yet as DeepGEMM-Ascend does it: the steps run one after another, meeting in between, rather than overlapping
the pulls and sends with the cube's work tile by tile; the inputs are copied into the window rather than written
there by the caller (DeepGEMM-Ascend registers an ``aclrtMalloc`` buffer with HCCL, reaches its peers' copies over
UB-memory channels and gives the caller ``torch::from_blob`` views of it). On an NPU the path runs the same kernel
over a CANN SHMEM window (``deepjit.symm.DeviceWindow``); it has never run on one here.
"""
from __future__ import annotations

import torch

from .. import runtime
from .._lib import LIB
from ._launch import args, cube_block_m, kernel, num_cube_cores

COMBINE_GRID = 32    # blocks of the combine step, the same on every rank: the sent flags count to seq * 32
# (int32 flags: a buffer refuses the call that would take seq * grid, or the dispatch's 2 * seq * grid, past 2^31)
MAX_TOPK = 32        # mega_moe_comm.asc stages top-k rows of at most 32 slots
MAX_COUNTS = 4096    # and [units, E_l] counts in UB (units >= R, and R x E_l = num_experts)
ASCEND_SF_BIAS = 6   # DeepGEMM-Ascend's weight scales carry +6 (deep_gemm.mega's layout transform)
CORES_PER_BLOCK = 3  # mega_moe.asc's blocks: a cube core and its two vector cores


def meet_flag(num_ranks: int) -> int:
    """The window flag mega_moe.asc's cores meet on between steps (after the comm steps' 2R + 1)."""
    return 2 * num_ranks + 1


def meetings(waves: int) -> int:
    """mega_moe.asc's meetings in a call of ``waves`` waves: after the first pull, after each wave's L1, SwiGLU and
    L2 steps, and after each wave's sends but the last."""
    return 5 * waves - 1


def create_window(group, num_bytes: int, device: torch.device, num_experts: int, num_topk: int,
                  max_tokens: int, intermediate_hidden: int, bf16: bool):
    """The SymmBuffer's window on the Ascend path (a twin window on CPU, CANN SHMEM on an NPU: see the module
    docstring), after the Ascend limits are checked."""
    from deepjit.symm import DeviceWindow

    from .. import _validate as v
    from .mega_swiglu import tile_rows_that_fit
    if num_topk > MAX_TOPK:
        raise v.fail("num_topk", f"at most {MAX_TOPK} on Ascend", num_topk)
    if num_experts > MAX_COUNTS:
        raise v.fail("num_experts", f"at most {MAX_COUNTS} on Ascend", num_experts)
    tile_rows_that_fit(intermediate_hidden, not bf16, "intermediate_hidden")
    if 2 * LIB.num_cube_cores(device) < COMBINE_GRID:   # mega_moe.asc's vector cores: two a cube core
        raise v.fail("device", f"at least {COMBINE_GRID} vector cores beside the cube cores (the combine step's "
                     f"fixed grid)", f"{LIB.num_cube_cores(device)} cube cores")
    num_ranks = group.size()
    if num_ranks * max_tokens * num_topk >= 2 ** 31:
        raise v.fail("num_max_tokens_per_rank", "ranks x tokens x topk < 2^31 (int32 sources)",
                     f"{num_ranks} x {max_tokens} x {num_topk}")
    return DeviceWindow.create(group, num_bytes, num_flags=meet_flag(num_ranks) + 1, name_hint="mega_moe",
                               device=device)


def capacity(buf, alignment: int) -> int:
    """Rows of the psum layout: every (token, slot) of every rank in one expert's share, plus each
    expert's start alignment -- no routing can overflow it (the kernels clamp to it regardless)."""
    e_local = buf.num_experts // buf.num_ranks
    rows = buf.num_ranks * buf.num_max_tokens_per_rank * buf.num_topk + e_local * alignment
    return -(-rows // alignment) * alignment


class Workspace:
    """The per-call tensors of the Ascend path, sized by the buffer alone (made once per device): ``ring`` rows
    of pulled activations and of each step's outputs, whatever the routing (the waves of mega_moe.asc)."""

    def __init__(self, buf, device, alignment: int):
        self.m_cap = capacity(buf, alignment)
        # a wave's rows: the ring rounded up to the alignment (a wave's layout rows start at a multiple of it, so
        # its groups keep their alignment), at most the layout's capacity
        m = min(-(-buf.num_ring_tokens // alignment) * alignment, self.m_cap)
        h, inter = buf.hidden, buf.intermediate_hidden
        e_local = buf.num_experts // buf.num_ranks
        act = torch.bfloat16 if buf.bf16 else torch.float8_e4m3fn
        self.alignment, self.m = alignment, m
        self.max_waves = -(-self.m_cap // m)
        if meetings(self.max_waves) * CORES_PER_BLOCK * LIB.num_cube_cores(device) >= 2 ** 31:
            from .. import _validate as v
            raise v.fail("num_ring_tokens", f"a ring whose waves' meetings fit the int32 meeting flag (up to "
                         f"{self.max_waves} waves a call)", buf.num_ring_tokens)
        self.a = torch.empty(m, h, dtype=act, device=device)
        self.a_sf = None if buf.bf16 else torch.empty(m, h // 128, dtype=torch.int32, device=device)
        self.weights = torch.empty(m, dtype=torch.float32, device=device)
        self.src = torch.empty(m, dtype=torch.int32, device=device)
        self.units_per_rank = units_per_rank(buf, device)
        self.counts = torch.empty(buf.num_ranks * self.units_per_rank, e_local, dtype=torch.int32, device=device)
        self.ends = torch.empty(e_local, dtype=torch.int32, device=device)
        self.wave_ends = torch.empty(self.max_waves, e_local, dtype=torch.int32, device=device)
        self.l1_out = torch.empty(m, 2 * inter, dtype=torch.bfloat16, device=device)
        self.act = torch.empty(m, inter, dtype=act, device=device)
        self.act_sf = None if buf.bf16 else torch.empty(m, inter // 128, dtype=torch.int32, device=device)
        self.l2_out = torch.empty(m, h, dtype=torch.bfloat16, device=device)
        self.dummy = torch.zeros(8, dtype=torch.int32, device=device)


def units_per_rank(buf, device) -> int:
    """Token chunks per source rank in the dispatch step: enough units to give every vector core one, as far as
    their counts fit the kernel's UB."""
    cores, e_local = LIB.num_vector_cores(device), buf.num_experts // buf.num_ranks
    return max(1, min(cores // buf.num_ranks, MAX_COUNTS // (buf.num_ranks * e_local)))


def dispatch_grid(buf, device) -> int:
    """A block per unit, at most every vector core (the blocks then take several units each)."""
    return min(buf.num_ranks * units_per_rank(buf, device), LIB.num_vector_cores(device))


def _comm(buf, ws: Workspace, op: int, grid: int, y: torch.Tensor, stats: torch.Tensor | None) -> None:
    """One step of the call on its own (``mega_moe_comm.asc``: op 0 dispatch, 1 combine): what a rank that stops
    between steps leaves its peers (the tests' silent peer); a call runs them inside ``mega_moe.asc``."""
    kernel("dg_mega_moe_comm", "ascend/mega_moe_comm.asc", {})(
        grid, args("DgMegaMoeCommArgs", **_comm_fields(buf, ws, op, y, stats)))


def _comm_fields(buf, ws: Workspace, op: int, y: torch.Tensor, stats: torch.Tensor | None) -> dict:
    offsets = {name: buf._views[name][0] for name in ("num_tokens", "x", "topk_idx", "topk_weights", "combine")}
    offsets["x_sf"] = buf._views["x_sf"][0] if not buf.bf16 else 0
    inputs = dict(in_x=buf.x.view(torch.uint8), in_x_sf=(ws.dummy if buf.bf16 else buf.x_sf).view(torch.uint8),
                  in_topk_idx=buf.topk_idx.view(torch.uint8), in_topk_weights=buf.topk_weights.view(torch.uint8))
    return dict(**inputs, a=ws.a.view(torch.uint8), a_sf=ws.dummy if ws.a_sf is None else ws.a_sf,
                weights=ws.weights, src=ws.src, counts=ws.counts, ends=ws.ends, wave_ends=ws.wave_ends,
                stats=ws.dummy if stats is None else stats, l2_out=ws.l2_out.view(torch.uint8),
                y=(y if y.numel() else ws.dummy).view(torch.uint8).reshape(-1), **buf.window.kernel_fields(),
                **{f"off_{name}": off for name, off in offsets.items()},
                num_tokens=y.size(0), max_tokens=buf.num_max_tokens_per_rank, m_cap=ws.m_cap, ring=ws.m,
                hidden=buf.hidden, row_bytes=buf.hidden * ws.a.element_size(),
                sf_words=0 if buf.bf16 else buf.hidden // 128, topk=buf.num_topk, num_experts=buf.num_experts,
                alignment=ws.alignment, seq=buf.seq, op=op, has_stats=int(stats is not None),
                units_per_rank=ws.units_per_rank)


def run(y: torch.Tensor, l1, l2, buf, stats: torch.Tensor | None, activation_clamp: float | None, gran: int) -> None:
    """One Mega MoE call on the Ascend path: L1 gate / up rows interleaved in blocks of ``gran`` (8 upstream, 128
    DeepGEMM-Ascend), scales in weight-row order."""
    if buf.failed is not None:
        raise RuntimeError(f"this Mega MoE SymmBuffer is broken: an earlier call failed ({buf.failed}); its window's "
                           f"flags no longer agree across ranks -- destroy it and make a new one")
    _check_inputs(buf, y)
    alignment = runtime.mk_alignment_for(y.device)
    ws = buf.workspaces.get((y.device, alignment))
    if ws is None:
        ws = buf.workspaces[(y.device, alignment)] = Workspace(buf, y.device, alignment)
    if (buf.seq + 1) * max(COMBINE_GRID, 2 * dispatch_grid(buf, y.device)) >= 2 ** 31:
        raise RuntimeError(f"this Mega MoE SymmBuffer has made {buf.seq} calls: its int32 window flags (calls x "
                           f"blocks, twice for the dispatch's) would wrap -- destroy it and make a new one")
    buf.seq += 1
    try:
        _launch(y, l1, l2, buf, ws, stats, activation_clamp, gran)
    except BaseException as exc:
        buf.failed = f"{type(exc).__name__}: {exc}"
        raise


def _check_inputs(buf, y: torch.Tensor) -> None:
    """The SymmBuffer's input tensors as the kernel copies them (their pointers go to it unread): the buffer's own
    dense [max_tokens, ...] tensors on ``y``'s device, unless the caller replaced one."""
    from .. import _validate as v
    for name in ("x", "x_sf", "topk_idx", "topk_weights"):
        if name in buf._views:
            _, dtype, shape = buf._views[name]
            v.tensor(f"sym_buffer.{name}", getattr(buf, name), (dtype,), len(shape), shape, contiguous=True,
                     device=y.device, like="y")


def _launch(y, l1, l2, buf, ws: Workspace, stats, activation_clamp, gran: int) -> None:
    """The call as one launch of ``mega_moe.asc`` on every cube core (and its two vector cores)."""
    from .mega_swiglu import fields as swiglu_fields
    from .mega_swiglu import tile_rows_that_fit
    cores = num_cube_cores(y)
    l1_fields, defines = _gemm_fields(ws, ws.a, ws.a_sf, l1, ws.l1_out)
    l2_fields, _ = _gemm_fields(ws, ws.act, ws.act_sf, l2, ws.l2_out)
    inter = buf.intermediate_hidden
    block_m = cube_block_m(ws.m, min(2 * inter, buf.hidden), cores)
    kernel("dg_mega_moe", "ascend/mega_moe.asc", {**defines, "DG_BLOCK_M": block_m})(
        cores, args("DgMegaMoeArgs", comm=_comm_fields(buf, ws, 0, y, stats), l1=l1_fields, l2=l2_fields,
                    swiglu=swiglu_fields(ws.l1_out, ws.weights, ws.ends, activation_clamp, ws.act, ws.act_sf, gran,
                                         ws.alignment, tile_rows_that_fit(inter, not buf.bf16)),
                    dispatch_grid=min(dispatch_grid(buf, y.device), 2 * cores), swiglu_grid=min(ws.m, 2 * cores),
                    combine_grid=COMBINE_GRID, meet_flag=meet_flag(buf.num_ranks), pad=0))


def _gemm_fields(ws: Workspace, a: torch.Tensor, a_sf: torch.Tensor | None, weights, d: torch.Tensor):
    """(``DgMGroupedGemmArgs`` fields, kernel defines) of one grouped GEMM of the call over the experts' rows (no
    zero padding; the kernel sets the layout to each wave's end rows, M is the ring's rows), on the operands as they
    lie: ``a`` [M, K] with ``a_sf`` the packed UE8M0
    rows the dispatch or SwiGLU step wrote (K-major pairs); BF16 ``weights`` [G, N, K], or FP4 ``(w, sf)`` in
    DeepGEMM-Ascend's layout (``w`` [G, N / 256, 256, K / 2], ``sf`` int16 [G, N / 256, K / 64, 256] carrying +6,
    taken by widening each value to value / 64) or upstream's ([G, N, K / 2], packed UE8M0 rows in UTCCP order: N a
    multiple of 128). The defines are those of both layers (their shapes are read at run time)."""
    from .fp8_mx_gemm import k_major_pairs
    from .m_grouped_bf16_gemm import fields
    m, k = a.shape
    strides = {"lda": a.stride(0), "ldd": d.stride(0)}
    defines = {"DG_D_FP32": 0, "DG_ZERO_PADDING": 0}
    if a_sf is None:
        b, sfa, sfb = weights, None, None
        strides.update(ldb=b.stride(1), b_group=b.stride(0))
    else:
        w, sf = weights
        b, sfa, sfb = w.view(torch.uint8), k_major_pairs(a_sf), k_major_pairs(sf)   # contiguous: never None
        if w.dim() == 4:
            b = b.flatten(1, 2)
            defines.update(DG_SFB_ROW_BLOCK=sf.size(-1), DG_FP4_SCALE_BIAS=ASCEND_SF_BIAS)
            ld_sfb = sf.size(-1)
        else:
            defines.update(DG_SFB_K_MAJOR=1, DG_SFB_UTCCP=1)
            ld_sfb = sfb.stride(1)
        defines.update(DG_MX=1, DG_SFA_K_MAJOR=1)
        strides.update(ldb=b.stride(1), b_group=b.stride(0), ld_sfa=sfa.stride(0), ld_sfb=ld_sfb,
                       sfb_group=sfb.stride(0))
    g, n = b.size(0), d.size(1)
    return fields(a, b, d, ws.ends, m, n, k, g, ws.alignment, strides, sfa, sfb), defines


def on_ascend(device) -> bool:
    return LIB.backend_for(device, has_ascend=True, op="deep_gemm.fp8_fp4_mega_moe") == "ascend"
