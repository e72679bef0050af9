"""The Ascend 950 (dav-3510) cost table the timeline estimate (``timeline.py``) charges each recorded
instruction from. Every number carries its source; where no public source gives one, the comment says so
and how it was chosen. All figures are per core and in cycles at ``clock_hz`` unless named otherwise.

Sources:
  [TL]  TileLang's own A5 latency parameters: tile-ai/tilelang src/ascend/transform/estimate_latency.h
        (``AscendLatencyParams``, commit 0e4ad53c6fa1d122cbbb7054592a8a7e9c3d5d0c and the 0.1.15 revision,
        which adds the per-descriptor issue floors ``*_min_ii`` / ``*_issue_overhead`` that
        estimate_latency.cc charges as max(min_ii, bytes / rate) or issue_overhead + bytes / rate), fitted by its authors
        on Ascend950DT SYS_CNT sweeps and cannsim; AIV MTE bandwidths there are the aggregate of the two
        AIVs of one AI core (so one AIV streaming alone is modelled at the same port rate, shared).
  [TL15] The same file as the installed tilelang 0.1.15 wheel ships it (tilelang/src/ascend/transform/
        estimate_latency.h / .cc): the cube's FP32 / HF32 / MX FP4 throughputs, FP32 and MX completion
        latencies, the MX minimum M / N extent and the MX scale-factor path (l1_to_l0_sf_*).
  [CANN] CANN platform_config Ascend950PR_957bx.ini [AICoreMemoryRates] (l2_rate=100 B/cycle per AI core,
        l2_size=117440512), as ascend_check.Rates cites it; [SoCInfo] cube_core_cnt=32, vector_core_cnt=64
        (950PR platform_config, as the CANN samples' 950PR READMEs quote it).
  [DEVKIT] asc-devkit tests/perf/{fixpipe,mmad}_perf/generate_roofline.py: dav-3510 at 1650 MHz.
  [DS]  DeepSeek's published 950 peaks (BF16 432, FP8 865, FP4 1730 TFLOP/s; issue 26).
  [950PR] Ascend 950PR HBM (HiBL 1.0) 1.6 TB/s, as ascend_check.Rates.hbm_bytes_per_s.
  [TLFA] tile-ai/tilelang examples/ascend/flash_attention/core.py (commit 0e4ad53c): the measured per-VF
        cycle counts its authors annotate (``T.SimdVF(latency=...)``) for the MHA kernel whose 950 time
        (26.8 us) its README publishes.
  [SIMT] Huawei CANN 9.0.0 Ascend C programming guide, SIMT "Thread Architecture"
        (hiascend.com .../programug/Ascendcopdevg/atlas_ascendc_10_10065.html): a thread block runs on one
        AIV, split into warps of 32 threads that execute the same instruction; each AIV has four warp
        schedulers (warp id % 4). No public source gives a SIMT instruction's issue rate, ALU width or
        UB access throughput.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Mover:
    """A data path: ``bytes_per_cycle`` while streaming (the pipe is busy ``issue + bytes / rate`` cycles
    a recorded instruction, at least ``min_ii``), and ``latency`` cycles more until its data is usable (a
    flag set after it fires then)."""
    bytes_per_cycle: float
    latency: float
    min_ii: float = 0.0
    issue: float = 0.0


def _movers() -> dict:
    return {
        # AIV MTE2 GM -> UB: 100 B/cycle, base 90, II floor 13 per descriptor [TL mte2_gm_to_ub_bandwidth,
        # _base_latency, _min_ii].
        "gm_to_ub": Mover(100, 90, 13),
        # AIC MTE2 GM -> L1 (ND -> NZ included): 100 B/cycle, base 190, II floor 64 per descriptor
        # [TL aic_mte2_to_l1_bandwidth, mte2_gm_to_l1_base_latency, mte2_gm_to_l1_min_ii].
        "gm_to_l1": Mover(100, 190, 64),
        # AIV MTE3 UB -> GM: 115 B/cycle, base 180, II floor 10 per descriptor [TL mte3_ub_to_gm_bandwidth,
        # _base_latency, _min_ii].
        "ub_to_gm": Mover(115, 180, 10),
        # FixPipe L0C -> GM: 128 B/cycle single destination, base 200, 2 issue cycles a descriptor
        # [TL fixpipe_bandwidth, fixpipe_l0c_to_gm_base_latency, fixpipe_issue_overhead].
        "l0c_to_gm": Mover(128, 200, issue=2),
        # FixPipe L0C -> UB: 128 B/cycle, base 58, 2 issue cycles a descriptor [TL fixpipe_bandwidth,
        # fixpipe_base_latency, fixpipe_issue_overhead].
        "l0c_to_ub": Mover(128, 58, issue=2),
        # MTE3 UB -> L1: 256 B/cycle, base 43 [TL mte3_ub_to_l1_bandwidth / _base_latency].
        "ub_to_l1": Mover(256, 43),
        # MTE1 L1 -> L0A / L0B: 256 B/cycle, base 5, 3 issue cycles a descriptor [TL l1_to_l0a_bandwidth,
        # mte1_base_latency, mte1_issue_overhead].
        "l1_to_l0": Mover(256, 5, issue=3),
        # MTE1 L1 -> L0A / L0B MX scales (asc_copy_l12l0a_mx / _l0b_mx): 32 B/cycle, base 28, 1 issue cycle
        # [TL15 l1_to_l0_sf_bandwidth, mte1_sf_base_latency, mte1_sf_issue_overhead].
        "l1_to_l0_sf": Mover(32, 28, issue=1),
        # MTE1 L1 -> UB: no published figure; taken as the L1 -> L0 path (estimate).
        "l1_to_ub": Mover(256, 5),
        # asc_fill_*: no published figure; one 256-byte write a cycle, as MTE1 (estimate).
        "fill": Mover(256, 5),
    }


@dataclass(frozen=True)
class StridedRows:
    """A strided move's rate by its contiguous row width (TileLang 0.1.15's N-geometry fit, the aggregate of
    an AI core's two AIVs: timeline.path_share makes the core's port carry it so): rows
    narrower than one ``transaction`` at ``plateau`` B/cycle; from one transaction, ``peak`` scaled by the
    share of whole transactions the row fills; from ``wide_from`` transactions ``wide``, from ``full_from``
    the mover's own rate; ``latency`` (and below one transaction ``narrow_latency``) replaces the mover's."""
    transaction: int
    plateau: float
    peak: float
    wide: float
    wide_from: int
    latency: float
    narrow_latency: float
    full_from: int = 0   # 0: never above `wide` [TL15 BandwidthForCopy]

    def rate(self, width: int, full: float) -> float:
        if width < self.transaction:
            return self.plateau
        if self.full_from and width >= self.full_from * self.transaction:
            return full
        if width >= self.wide_from * self.transaction:
            return min(full, self.wide)
        transactions = -(-width // self.transaction)
        return min(full, self.peak * width / (self.transaction * transactions))

    def latency_at(self, width: int) -> float:
        return self.narrow_latency if width < self.transaction else self.latency


def _strided() -> dict:
    return {
        # GM -> UB rows apart in GM: 128-byte transactions, 50 B/cycle below one, 102 at whole ones, 100 from
        # two; base 75 [TL15 mte2_gm_to_ub_n_transaction_bytes, _n_plateau_bandwidth, _n_peak_bandwidth,
        # _n_wide_bandwidth, mte2_gm_to_ub_n_base_latency].
        "gm_to_ub": StridedRows(128, 50, 102, 100, 2, 75, 75),
        # UB -> GM rows apart in GM: 40 B/cycle below one transaction, 86 at whole ones, 110 from two, the
        # port's 115 from four; base 180, 440 below one transaction [TL15 mte3_ub_to_gm_n_*,
        # mte3_ub_to_gm_narrow_base_latency].
        "ub_to_gm": StridedRows(128, 40, 86, 110, 2, 180, 440, full_from=4),
    }


@dataclass(frozen=True)
class CostTable:
    # dav-3510 runs at 1650 MHz [DEVKIT]; 8192 BF16 FLOP/cycle x 32 AIC x 1.65 GHz = 432.5 TFLOP/s [DS].
    clock_hz: float = 1.65e9
    # Core counts, as dj_twin/runtime.h kNumAic / kNumAiv: CANN platform_config 950PR [SoCInfo]
    # cube_core_cnt=32 [CANN]
    aic_cores: int = 32
    aiv_cores: int = 64   # [CANN] platform_config 950PR [SoCInfo] vector_core_cnt=64 (two AIV an AIC)
    movers: dict = field(default_factory=_movers)
    strided: dict = field(default_factory=_strided)  # by route: the movers' strided-row rates [TL15]
    # UB -> L1 rows apart (a raw N-split copy): 3/4 of the row width in B/cycle below 160-byte rows, the
    # row width from there (at most the mover's 256) [TL15 mte3_ub_to_l1_raw_n_full_width_bytes,
    # _raw_n_width_numerator / _denominator].
    ub_to_l1_full_width: int = 160
    ub_to_l1_narrow_share: float = 0.75  # [TL15 mte3_ub_to_l1_raw_n_width_numerator / _denominator]
    ub_to_l1_unknown: float = 48         # a row width of 0 [TL15 mte3_ub_to_l1_raw_n_unknown_bandwidth]
    # FixPipe L0C -> both AIVs' UB in one copy (dual destination): both halves through the endpoint at
    # min(256, 2 x each AIV's row width) B/cycle (128 for NZ output, whose row the twin does not take), 2
    # issue cycles, usable 55 cycles after [TL15 fixpipe_dual_bandwidth, _width_scale,
    # _unknown_width_bandwidth, fixpipe_dual_base_latency; EstimateAscend: a dual copy's II and completion
    # both count both AIVs' payloads].
    fixpipe_dual_cap: float = 256         # [TL15 fixpipe_dual_bandwidth]
    fixpipe_dual_width_scale: float = 2   # [TL15 fixpipe_dual_width_scale]
    fixpipe_dual_unknown: float = 128     # [TL15 fixpipe_dual_unknown_width_bandwidth]
    fixpipe_dual_latency: float = 55      # [TL15 fixpipe_dual_base_latency]
    # Cube FLOP (2 x MAC) per cycle by operand width class (the twin's cube_macs_by_input) and mode, charged
    # on the mmad's padded geometry (c_api/cube.h: M, N to 16, K to the operand's K group, an MX mmad's
    # larger of M and N at least 48 [TL15 CubeOperations, cube_mx_min_mn]):
    # 16-bit 8192 = 16x16x16x2 [TL cube_throughput_fp16/bf16]; 8-bit 16384 [TL cube_throughput_fp8];
    # 4-bit 32768 [TL15 cube_throughput_mxfp4; DS: twice FP8]; FP32 operands 512, or 4096 with the CTRL
    # HF32 bit set (asc_enable_hf32) [TL15 cube_throughput_fp32 / _hf32].
    cube_flops_per_cycle: dict = field(default_factory=lambda: {"fp32": 512, "hf32": 4096, "b16": 8192,
                                                                "b8": 16384, "b4": 32768})
    # Completion (an mmad's end to its result usable):
    cube_latency: float = 8          # [TL cube_base_latency]
    cube_latency_mx: float = 25      # an MX mmad [TL15 cube_mx_base_latency]
    cube_latency_fp32: float = 67    # FP32 / HF32 operands [TL15 cube_fp32_base_latency]
    # Vector register instructions (one 256-byte register each), cycles an instruction. A run of them (a
    # vector function) takes max(ALU cycles, loads, stores): the register file's UB loads and stores move
    # 256 B a cycle [TL valu_bandwidth] on their own path beside the ALU. The ALU rates are fitted to the
    # per-VF cycle counts TileLang's authors annotate on the 950 in examples/ascend/flash_attention/core.py
    # [TLFA]: softmax ``SimdVF(latency=735)`` runs ~708 ALU instructions (128 of them exp) beside ~324
    # register loads and stores -> 1 cycle an ALU instruction, exp included; accumulate_output
    # (latency=318) is 320 loads beside 256 ALU ops and 128 stores -> the paths overlap; finalize
    # (latency=1780) is 128 vdiv -> 13.9 cycles a divide. (TileLang's estimator's own constants, 51 fp32
    # lane-ops a cycle [TL add_throughput], would give ~2.6x the annotated softmax time: not used.)
    # A 16-bit (128-lane) instruction costs the same as a 32-bit one (same register; estimate).
    vector_cycles: dict = field(default_factory=lambda: {"simple": 1.0, "special": 1.0, "divide": 1780 / 128,
                                                         "load": 1.0, "store": 1.0})
    # Latency of a vector register instruction (issue to result usable by the next): a run of them takes at
    # least its longest chain of dependent instructions x this (dj_twin/timeline.h VecDataflow). No public
    # source gives dav-3510's per-instruction latencies (TileLang's AscendLatencyParams has throughputs
    # only; the AscendC Reg docs none), so one figure for every class, fitted (estimate) to the one
    # published latency-bound 950 measurement: TileLang's top-k gate at 4096 tokens, 256 experts / top-8
    # (22.4 us, examples/ascend/example_simdvf_topk_gate.py docstring); its 128/6 and 160/8 figures are
    # the check (deepjit README's validation table). Its VFs' critical path is 97 dependent instructions a
    # token (~12 per selected expert); 5.9 cycles each reproduces 22.4 us, rounded to whole cycles: 6.
    vector_latency: float = 6.0
    # One recorded instruction costs the scalar unit one issue cycle [TL "Scalar -> one cycle per atomic task"].
    scalar_issue: float = 1.0
    # SIMT: lane instructions a cycle per AIV. The timeline charges a SIMT run its warp instructions, each
    # lane's ALU operations and memory instructions (UB loads / stores, asc_ldcg / ldca / stcg / stwt) alike,
    # counted per lane and divided by the warp size: 32 threads a warp [SIMT]. One warp instruction a cycle
    # per AIV is an estimate (no public source gives the issue rate; [SIMT]'s four warp schedulers would allow
    # up to four a cycle if each had its own 32-wide ALU and UB port, which nothing published says), as
    # ascend_check.Rates assumed. A warp's UB access (32 lanes x <= 8 bytes) fits the 256 B/cycle UB <->
    # register path of the vector core [TL valu_bandwidth], so UB bandwidth never binds beyond this issue
    # rate (estimate: bank conflicts are not modelled).
    simt_lane_ops_per_cycle: float = 32
    # SIMT lanes' GM bytes: no public source; estimate: one 128-byte line a cycle.
    simt_gm_bytes_per_cycle: float = 128
    # Shared paths: L2 100 B/cycle per AI core [CANN l2_rate] (x 32 for the chip).
    l2_bytes_per_cycle_per_core: float = 100
    # One AI core's port to L2, shared by its two AIVs [TL: "aggregate payload across the two normally
    # active AIVs"] and, as an estimate, by its AIC: 115 B/cycle, the fastest rate TileLang measured through
    # it (UB -> GM [TL mte3_ub_to_gm_bandwidth]); CANN's l2_rate (100) would make that measurement unreachable.
    port_bytes_per_cycle: float = 115
    hbm_bytes_per_s: float = 1.6e12  # [950PR]
    # A cross-core flag (asc_sync_intra/inter_*) travels this long: no published figure (estimate: 0,
    # i.e. the set's pipe completion is the wait's earliest start).
    cross_core_flag_latency: float = 0.0
    # The bandwidth ledger's time bins (model resolution, not a hardware figure).
    bin_cycles: int = 256

    @property
    def hbm_bytes_per_cycle(self) -> float:
        return self.hbm_bytes_per_s / self.clock_hz

    @property
    def l2_bytes_per_cycle(self) -> float:
        return self.l2_bytes_per_cycle_per_core * self.aic_cores


COSTS_950 = CostTable()
