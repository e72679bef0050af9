// dj_twin/timeline.h — the event stream the timeline estimate is computed from (deepjit's
// backends/ascend_twin/timeline.py schedules it; the cost table lives there, in Python, so it can be
// tested and tuned without recompiling kernels).
//
// On only when a launch asks for it (dj_twin_timeline_enable(1) before dj_twin_launch, or
// DJ_TWIN_TIMELINE=1): each core then appends, in program order, one event per data-mover instruction,
// cube mmad, flag set/wait, barrier and cross-core arrive/wait; consecutive vector register instructions
// (and consecutive SIMT work) merge into one event counting them by class, so a vector function costs
// one entry per run between two other events. Off, every hook is one predictable branch on a null pointer.
#pragma once

#include <cstdint>
#include <vector>

namespace dj_twin {

// Python: backends/ascend_twin/timeline.py EVENT_TYPES (same order).
enum class Ev : uint8_t {
  Move = 0,        // pipe = the route's pipe, a = Route, b = MoveVariant, n = bytes, m = the row width in
                   // bytes of a Strided or Dual move (0 otherwise)
  Cube,            // pipe = PIPE_M, a = input width class (0 fp32, 1 16-bit, 2 8-bit, 3 4-bit), b = CubeMode,
                   // n = MACs, m = the MACs the cube is charged (padded geometry, c_api/cube.h)
  Vector,          // pipe = PIPE_V; instructions by class: n = simple | special << 32, m = load | store << 32,
                   // id = divide; depth = the longest chain of dependent instructions in the run
  Simt,            // pipe = PIPE_V, n = lane ALU ops, m = GM bytes the lanes moved (through L2), depth = lane
                   // memory instructions (UB loads | UB stores << 20 | GM accesses << 40)
  Set,             // a = src pipe, b = dst pipe, id = event id (asc_sync_notify)
  Wait,            // a = src pipe, b = dst pipe, id = event id (asc_sync_wait)
  Barrier,         // pipe = the barrier's pipe (PIPE_ALL: every pipe and the scalar unit)
  IntraArrive,     // pipe, a = target core of the block (0 AIC, 1 AIV0, 2 AIV1), id = its counter
  IntraWait,       // pipe, id = this core's counter
  InterArrive,     // pipe, a = core kind (0 AIC, 1 AIV), id = flag
  InterWait,       // pipe, a = core kind, id = flag
};

// Python: timeline.py CUBE_MODES / MOVE_VARIANTS (same order). An FP32 mmad runs at the HF32 rate when the
// CTRL HF32 bit is set (asc_enable_hf32); an MX mmad (asc_mmad_mx) has its own completion latency. A move is
// Strided when its rows are not one contiguous run at both ends (TileLang 0.1.15's N geometry: either end
// strided): its rate then depends on the row width (costs.py). Dual: one L0C -> UB copy into both AIVs' UB
// (asc_dual_dst_mode SPLIT_M / SPLIT_N), m = each AIV's ND row width in bytes (0: NZ output).
enum class CubeMode : uint8_t { Plain = 0, Hf32, Mx };
enum class MoveVariant : uint8_t { Plain = 0, MxScales, Strided, Dual };

// How a vector register instruction is costed (timeline.py): ALU (simple), divide, transcendental, and
// the register loads / stores between UB and the register file.
enum class VecClass : uint8_t { Simple = 0, Divide, Special, Load, Store, Count };

struct TimelineEvent {
  uint8_t type;
  uint8_t pipe;
  uint8_t a, b;
  uint32_t id;
  uint64_t n;
  uint64_t m;
  uint64_t depth;  // Vector: its register dataflow's critical path, in instructions; Simt: its packed
                   // memory-instruction counts (above); 0 for other events
};
static_assert(sizeof(TimelineEvent) == 32, "timeline.py reads 32-byte events");

using Timeline = std::vector<TimelineEvent>;

// Appends an event to the core's timeline (t: the core's Core::timeline, never null here).
inline void timeline_push(Timeline& t, Ev type, int pipe, int a = 0, int b = 0, uint32_t id = 0, uint64_t n = 0,
                          uint64_t m = 0) {
  t.push_back({uint8_t(type), uint8_t(pipe), uint8_t(a), uint8_t(b), id, n, m, 0});
}

// Register dataflow of a core's vector instructions: every register value carries the step at which it
// is ready (c_api/reg_types.h `step`); an instruction's result is ready one step after the latest of its
// sources (and after the run began), so a run's depth is its longest chain of dependent instructions,
// which timeline.py charges at the vector latency (costs.py) beside the pipe's throughput.
struct VecDataflow {
  uint64_t reached = 0;  // the latest step any value of this core reached
  uint64_t base = 0;     // the step the current run began at: older values count as ready
};

// Vector and SIMT work merges into the previous event when it is the same kind of work. src_step: the
// latest step of the instruction's source registers (masks included); returns its result's step.
inline uint64_t timeline_vector(Timeline& t, VecDataflow& flow, VecClass cls, uint64_t src_step) {
  if (t.empty() || t.back().type != uint8_t(Ev::Vector)) {
    t.push_back({uint8_t(Ev::Vector), 1 /* PIPE_V */, 0, 0, 0, 0, 0, 0});
    flow.base = flow.reached;
  }
  TimelineEvent& e = t.back();
  const uint64_t step = (src_step > flow.base ? src_step : flow.base) + 1;
  if (step > flow.reached) flow.reached = step;
  if (step - flow.base > e.depth) e.depth = step - flow.base;
  switch (cls) {
    case VecClass::Simple: e.n += 1; break;
    case VecClass::Special: e.n += uint64_t(1) << 32; break;
    case VecClass::Load: e.m += 1; break;
    case VecClass::Store: e.m += uint64_t(1) << 32; break;
    default: e.id += 1; break;
  }
  return step;
}

// SIMT work of one lane: `ops` ALU operations, `gm_bytes` through L2 and `mem` memory instructions, already
// packed as Ev::Simt's depth (UB loads, UB stores << 20, GM accesses << 40). A run whose count of any kind
// reached half its field (2^19, 2^19, 2^23) goes on in a new event, so no field overflows (one call adds
// far less than the other half).
inline constexpr uint64_t kSimtUbLoad = 1, kSimtUbStore = uint64_t(1) << 20, kSimtGmAccess = uint64_t(1) << 40;
inline constexpr uint64_t kSimtHalfFull = (uint64_t(1) << 19) | (uint64_t(1) << 39) | (uint64_t(1) << 63);
inline void timeline_simt(Timeline& t, uint64_t ops, uint64_t gm_bytes, uint64_t mem = 0) {
  if (!t.empty() && t.back().type == uint8_t(Ev::Simt) && !(t.back().depth & kSimtHalfFull)) {
    TimelineEvent& e = t.back();
    e.n += ops;
    e.m += gm_bytes;
    e.depth += mem;
    return;
  }
  t.push_back({uint8_t(Ev::Simt), 1 /* PIPE_V */, 0, 0, 0, ops, gm_bytes, mem});
}

}  // namespace dj_twin
