// dj_twin/runtime.h — the Ascend twin's core runtime: the current core's context, its guarded
// on-chip memories, the bounds checks every intrinsic makes, launch errors, counters and the
// pipe-flag / mutex / cross-core flag state.
//
// Interface used by the other twin headers (keep backward compatible; changes are noted here):
//   dj_twin::Mem::{UB, L1, L0A, L0B, L0C}          on-chip memories of a core
//   dj_twin::onchip_base(Mem)                      base address of the current core's memory
//   dj_twin::check(Mem, const void* p, size_t bytes, const char* op)   on-chip range check
//   dj_twin::check_gm(const void* p, size_t bytes, const char* op)     global-memory range check
//   dj_twin::fail(const char* fmt, ...)            stops the launch with a message (never returns)
//   dj_twin::count_bytes(pipe_t, size_t), count_cube_macs(uint64_t), count_vector_ops(uint64_t)
//   dj_twin::core()                                the current core (block, kind, sub_block, ...)
//   dj_twin::onchip_offset(Mem, const void*)       byte offset of p in the current core's memory
//   dj_twin::count_cube_macs(uint64_t, int input_bits, uint64_t charged, CubeMode)  MACs also counted by
//                                                  operand width, the timeline charged `charged` (c_api/cube.h)
//   dj_twin::count_move(Route, size_t)             bytes by source -> destination (added; also counts the pipe)
//   dj_twin::count_simt_ops(uint64_t)              SIMT lane operations (added)
//   dj_twin::count_simt_work(alu, ub_ld, ub_st)    a lane's declared plain work, timeline only (added)
//   dj_twin::touch_gm(p, bytes, write, GmAccess)   GM lines for the L2 model (added; next to check_gm)
//   dj_twin::begin_gm_move()                       a data mover's instruction starts (added; L2 model)
//   check_gm also accepts the live symmetric windows, accessed in place (added; dj_twin/symm.h, dj_symm/device.h)
//
// Notes for the headers built on this one:
//   - run_on_twin maps tensors to the lowered kernel's parameters by name and returns a
//     LaunchCounters (backends/ascend_twin/kernel.py): .counters is the dict
//     {"bytes": {"PIPE_MTE2": n, ...}, "cube_macs": n, "cube_macs_by_input": {"b16": n, ...},
//     "vector_ops": n, "wait_ns": n, "routes": {"gm_to_ub": n, ...}, "simt_ops": n}; .cores has the
//     per-core values. Routes (Route below) say where the bytes went: only those with a GM end are HBM traffic.
//   - simt_api/asc_simt.h has the 1-wide structs (uint1, float1, ...) and the SIMT warp reductions
//     asc_reduce_add/max/min(float | int32_t | uint32_t) (lanes run as fibers when a kernel names them).
//   - Hand-written kernels include twin headers with <...> (the include tracker rejects quotes).
//   - Environment: DJ_TWIN_WAIT_TIMEOUT (seconds a cross-core wait may block, default 10),
//     DJ_TWIN_POISON=1 (on-chip memories start as 0xFF bytes instead of zeros), <PREFIX>_JIT_TWIN_OPT_LEVEL
//     (default 1), <PREFIX>_JIT_TWIN_CPP_STANDARD (default 20); AscendLaunchOptions.num_launch_timeout_secs
//     (default <PREFIX>_JIT_LAUNCH_TIMEOUT = 300) bounds a whole launch.
//   - Cross-block sync (asc_sync_block_* / asc_sync_inter_* / asc_sync_subblock_*) is not implemented:
//     its grouping semantics are not pinned down by the docs; a kernel using it does not compile.
//
// Model: every core (AIC or AIV) of every block is one OS thread that executes its instructions in
// program order, so a pipe is never ahead of another one: flags and locks are checked for
// discipline (a wait whose set never happened can never be satisfied and is reported at once), and
// cross-core flags really block. Errors are recorded once per launch; every other core stops at its
// next intrinsic or wait. On-chip pointers are real host pointers into mmap'd regions surrounded by
// PROT_NONE guard pages (see launch.h for the SIGSEGV handler that turns a stray dereference into a
// launch error).
#pragma once

#include <algorithm>
#include <atomic>
#include <cassert>
#include <condition_variable>
#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "dj_twin/timeline.h"
#include "dj_twin/types.h"

// The address-space and kernel qualifiers of the AscendC dialect mean nothing on the host.
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ssbuf__
#define __ca__
#define __cb__
#define __cc__
#define __fbuf__
#define __sbuf__
#define __global__
#define __aicore__
#define __vector__
#define __cube__
#define __mix__(...)
#define __schedmode__(...)
#define __simt_vf__
#define __simt_callee__
#define __simd_vf__
#define __simd_callee__
#define __launch_bounds__(...)
#define __grid_constant__
#define __SIMT_DEVICE_FUNCTIONS_DECL__
#ifndef __NPU_ARCH__
#define __NPU_ARCH__ 3510
#endif

// The hardware pipes (the compiler's built-in pipe_t, values as the CCE compiler numbers them).
enum pipe_t : int {
  PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL, PIPE_MTE4, PIPE_MTE5, PIPE_V2,
  PIPE_FIX, VIRTUAL_PIPE_MTE2_L1A, VIRTUAL_PIPE_MTE2_L1B, PIPE_NUM
};
enum event_t : int {
  EVENT_ID0 = 0, EVENT_ID1, EVENT_ID2, EVENT_ID3, EVENT_ID4, EVENT_ID5, EVENT_ID6, EVENT_ID7
};

namespace dj_twin {

// dav-3510 (Ascend 950) per-core memory sizes, from asc-devkit
// impl/basic_api/utils/kernel_utils_constants.h (the __NPU_ARCH__ == 3510 branch: TOTAL_UB_SIZE
// 248 KiB, TOTAL_L1_SIZE 512 KiB, TOTAL_L0C_SIZE 256 KiB; TOTAL_L0A_SIZE / TOTAL_L0B_SIZE 64 KiB for
// every arch). Core counts: 32 AIC + 64 AIV (asc-devkit examples, data_copy.asc ARCH_3510).
enum class Mem : uint8_t { UB = 0, L1, L0A, L0B, L0C, Count };
inline constexpr size_t kMemSize[] = {248 * 1024, 512 * 1024, 64 * 1024, 64 * 1024, 256 * 1024};
inline constexpr const char* kMemName[] = {"UB", "L1", "L0A", "L0B", "L0C"};
inline constexpr int kNumAic = 32, kNumAiv = 64;
inline constexpr int kNumPipes = PIPE_NUM;
inline constexpr const char* kPipeName[] = {"PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3",
                                            "PIPE_ALL", "PIPE_MTE4", "PIPE_MTE5", "PIPE_V2", "PIPE_FIX",
                                            "VIRTUAL_PIPE_MTE2_L1A", "VIRTUAL_PIPE_MTE2_L1B"};
inline const char* pipe_name(int p) { return p >= 0 && p < kNumPipes ? kPipeName[p] : "PIPE_?"; }

enum class CoreKind : uint8_t { AIC = 0, AIV = 1 };
enum class KernelKind : uint8_t { Vector, Cube, Mix };

inline constexpr int kNumEvents = 8;      // flag ids per (src pipe, dst pipe): event_t EVENT_ID0-7 (asc_sync_notify.md)
inline constexpr int kNumMutexes = 32;    // asc_lock ids [0, 31]
inline constexpr int kNumIntraIds = 32;   // cross-core flag counters per core
inline constexpr int kIntraMax = 15;      // 4-bit counters

// What a data move reads and writes: the roofline counts GM (HBM) bytes only on routes with a GM end,
// and each on-chip route on the unit that moves it. Python names: backends/ascend_twin/kernel.py ROUTES.
enum class Route : uint8_t {
  GM_TO_UB = 0,   // MTE2
  GM_TO_L1,       // MTE2 (ND/DN -> NZ)
  UB_TO_GM,       // MTE3
  L0C_TO_GM,      // FixPipe
  L0C_TO_UB,      // FixPipe, on chip
  UB_TO_L1,       // MTE3, on chip
  L1_TO_L0,       // MTE1 (L0A / L0B and their MX scales)
  L1_TO_UB,       // MTE1, on chip
  FILL,           // asc_fill_l1 / l0a / l0b: writes on-chip memory, reads nothing
  SIMT_GM_LOAD,   // a SIMT lane's GM load through asc_ldcg / asc_ldca
  SIMT_GM_STORE,  // a SIMT lane's GM store through asc_stcg / asc_stwt
  Count
};
inline constexpr pipe_t kRoutePipe[] = {PIPE_MTE2, PIPE_MTE2, PIPE_MTE3, PIPE_FIX, PIPE_FIX, PIPE_MTE3,
                                        PIPE_MTE1, PIPE_MTE1, PIPE_MTE2, PIPE_S,   PIPE_S};
inline constexpr int kNumRoutes = int(Route::Count);

struct Counters {
  uint64_t bytes[PIPE_NUM];   // bytes moved by each pipe's data mover
  uint64_t route_bytes[kNumRoutes];  // the same by route (SIMT GM accesses have no pipe: only here)
  uint64_t simt_ops;          // SIMT lane operations (see simt_api/asc_simt.h for what is counted)
  uint64_t cube_macs;         // multiply-accumulates issued to the cube unit
  uint64_t cube_macs_by_input[4];  // the same by input width: FP32, 16-bit, 8-bit, 4-bit (rates differ)
  uint64_t vector_ops;        // vector element-operations
  uint64_t wait_ns;           // time blocked in cross-core waits
};

// A run of consecutive GM lines one core read or wrote (the L2 model's trace: l2_model.h).
inline constexpr uint64_t kL2LineBytes = 128;
struct GmRun {
  uint64_t first_line;
  uint32_t lines;
  bool write;
};

struct Block;
struct Launch;

// What each pipe of a core is ordered after, as vector clocks over the pipes' flag waits (c_api/sync.h):
// seen[p][q] is how many of pipe q's waits pipe p's next instruction follows. Program order alone cannot
// show whether a notify may run ahead of the wait that took the flag's previous notify; these can.
struct PipeOrder {
  uint32_t seen[PIPE_NUM][PIPE_NUM] = {};
  uint32_t at_notify[PIPE_NUM][PIPE_NUM][kNumEvents][PIPE_NUM] = {};  // the source's clock at a pending notify
  uint32_t taken_at[PIPE_NUM][PIPE_NUM][kNumEvents] = {};  // the destination's count at the wait that took it last
  uint32_t at_unlock[kNumMutexes][PIPE_NUM] = {};          // the unlocking pipe's clock
};

struct Core {
  Launch* launch = nullptr;
  Block* block = nullptr;
  int block_idx = 0, num_blocks = 0;
  CoreKind kind = CoreKind::AIV;
  int sub_block = 0;                     // AIV 0/1 within a mixed block; 0 for the AIC
  uint8_t* mem[int(Mem::Count)] = {};    // base of each memory (PROT_NONE when the core lacks it)
  bool has_mem[int(Mem::Count)] = {};
  Counters counters{};
  uint8_t flags[PIPE_NUM][PIPE_NUM][kNumEvents] = {};   // 1: set by asc_sync_notify, not yet waited on
  int8_t mutex_mode[kNumMutexes];        // -1 free, else the lock mode held
  uint8_t mutex_pipe[kNumMutexes] = {};
  uint8_t intra[kNumIntraIds] = {};      // this core's cross-core flag counters (guarded by block->mu)
  std::unique_ptr<PipeOrder> order;      // allocated at the core's first flag or lock (c_api/sync.h)
  // Special registers the intrinsics read (set by asc_set_* in sys_var.h / datamove.h).
  uint64_t ctrl = 0;                     // CTRL (asc_set_ctrl); bit 60 = 0 enables saturation modes
  uint64_t gm2l1_nz_para = 0;            // MTE2_NZ_PARA (asc_set_gm2l1_nz_para)
  uint16_t l0c_nd_num = 1, l0c_src_nd_stride = 0, l0c_dst_nd_stride = 0;  // asc_set_l0c_copy_nz_para
  uint32_t pad_val = 0;                  // asc_set_copy_pad_val
  uint64_t l0c_quant_pre = 0;            // asc_set_l0c_copy_prequant (scalar quant scale)
  // Store-mode atomic of MTE3 / FixPipe stores to GM (asc_set_atomic_*, c_api/atomic.h).
  uint8_t store_atomic_op = 0, store_atomic_type = 0;
  // MX scales of L0A / L0B (E8M0 bytes): a data tile at L0x offset o has its scales at o / 16.
  uint8_t mx_scale[2][64 * 1024 / 16] = {};
  sigjmp_buf exit_jmp;                   // fail() and the fault handler jump here
  // The L2 model (touch_gm): the GM lines this core touched in program order, the bytes it moved to or
  // from L2, and the filters that decide which touches reach L2: the current data-mover instruction's
  // lines and, for SIMT accesses, recently touched lines (tags: (line + 1) << 1 | write, 0 = empty).
  std::vector<GmRun> gm_trace;
  uint64_t l2_bytes = 0;
  static constexpr size_t kMoveLines = 16384;  // open addressing: exact for an instruction's <= 8192 lines
  struct MoveLine {
    uint64_t tag;
    uint32_t move;                       // the instruction (move_id) the entry belongs to; older ones are free
  };
  std::vector<MoveLine> move_lines;      // kMoveLines entries once the model is on
  uint32_t move_id = 1;
  // SIMT lines, sets of 4 tags, most recent first: the data cache asc_ldca reads through, and the lines
  // streaming accesses (asc_ldcg / asc_stcg / asc_stwt, which bypass that cache) touched lately
  uint64_t dcache_lines[64][4] = {};
  uint64_t stream_lines[64][4] = {};
  Timeline* timeline = nullptr;          // the event stream when the launch records one (dj_twin/timeline.h)
  VecDataflow vec_flow;                  // its vector register dataflow (dj_twin/timeline.h)
  const char* core_name() const;
  Core() { std::memset(mutex_mode, -1, sizeof mutex_mode); }
};

// The cores of one block share the cross-core flag state.
struct Block {
  std::mutex mu;
  std::condition_variable cv;
  Core* aic = nullptr;
  Core* aiv[2] = {nullptr, nullptr};
  // SSBuffer (AscendC::GetSsbufBaseAddr): 3 KB the block's AIC and AIVs share in MIX mode (1 KB a core
  // otherwise: a block of a single-kind launch has one core). It holds stale data at start (the docs
  // promise no zeros), so the twin fills it with 0xA5 bytes.
  alignas(64) uint8_t ssbuf[3 * 1024];
  Block() { std::memset(ssbuf, 0xA5, sizeof ssbuf); }
};

// Cross-block (all-core, asc_sync_inter_*) flag state: per core kind (AIC / AIV) and flag id, how often
// each core of that kind arrived and waited (c_api/sync.h), and which cores' kernels returned.
struct InterSync {
  std::mutex mu;
  std::condition_variable cv;
  bool sized = false;
  std::vector<uint16_t> arrives[2][16], waits[2][16];
  std::vector<uint8_t> exited[2];
};

struct Launch {
  const char* kernel = "";
  KernelKind kind = KernelKind::Vector;
  int num_blocks = 0;
  double wait_timeout_s = 10.0;
  bool l2_model = false;                 // cores record their GM lines (touch_gm) for the L2 model
  // DJ_TWIN_ALLOW_UNPAIRED_FLAGS=1: a flag still set at kernel end (a pre-armed ping-pong flag never drained)
  // is let pass instead of failing the launch (AscendC: "SetFlag/WaitFlag必须成对出现").
  bool allow_unpaired_flags = false;
  std::atomic<bool> failed{false};
  InterSync inter;
  std::mutex mu;
  char message[2048] = {};
};

inline thread_local Core* tls_core = nullptr;

inline Core& core() {
  if (!tls_core) {
    std::fprintf(stderr, "dj_twin: an AscendC intrinsic ran outside a twin launch\n");
    std::abort();
  }
  return *tls_core;
}

// ---- order between a core's pipes (PipeOrder) --------------------------------------------------------
// The pipes run concurrently on the chip, each in program order. A pipe's instruction starts only once the
// scalar unit issued it, so after whatever the scalar waited for; a wait orders its pipe after the notify
// it takes; asc_sync() orders the scalar after every pipe. A notify of a flag whose previous notify was
// taken by a wait that nothing orders it after can run ahead of that wait and set the flag while it is still
// set, which asc_sync_notify.md leaves undefined: it fails whatever the timing.
inline PipeOrder& pipe_order() {
  Core& c = core();
  if (!c.order) c.order = std::make_unique<PipeOrder>();
  return *c.order;
}

inline void join_clock(uint32_t* into, const uint32_t* from) {
  for (int p = 0; p < kNumPipes; ++p) into[p] = std::max(into[p], from[p]);
}

// Pipe `pipe`'s clock at its next instruction: after what the scalar unit waited for before issuing it.
inline uint32_t* issue_clock(PipeOrder& o, int pipe) {
  join_clock(o.seen[pipe], o.seen[PIPE_S]);
  return o.seen[pipe];
}

// `pipe`'s next instruction follows everything this core's pipes did so far: asc_sync() for the scalar unit,
// and a wait on another core (cross-core flags, a window signal), whose own order is not recorded here, so
// it is taken to order that much (no false report).
inline void order_after_all_pipes(int pipe) {
  Core& c = core();
  if (!c.order || pipe < 0 || pipe >= kNumPipes || pipe == PIPE_ALL) return;
  for (int p = 0; p < kNumPipes; ++p) join_clock(c.order->seen[pipe], c.order->seen[p]);
}

inline const char* Core::core_name() const {
  if (kind == CoreKind::AIC) return "AIC";
  return sub_block ? "AIV1" : "AIV0";
}

// Records the first error of the launch (later ones are dropped) and wakes every waiting core.
void record_failure(Launch& l, const char* text);

[[noreturn]] inline void vfail(const char* fmt, va_list ap) {
  Core& c = core();
  char body[1400];
  std::vsnprintf(body, sizeof body, fmt, ap);
  char text[1800];
  std::snprintf(text, sizeof text, "kernel %s, block %d, core %s: %s", c.launch->kernel, c.block_idx, c.core_name(),
                body);
  record_failure(*c.launch, text);
  siglongjmp(c.exit_jmp, 1);
}

[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(fmt, ap);
}

// Stops this core when another core of the launch has failed.
inline void poll() {
  Core& c = core();
  if (c.launch->failed.load(std::memory_order_relaxed)) siglongjmp(c.exit_jmp, 2);
}

inline uint8_t* onchip_base(Mem m) { return core().mem[int(m)]; }

inline int64_t onchip_offset(Mem m, const void* p) {
  return int64_t(reinterpret_cast<uintptr_t>(p)) - int64_t(reinterpret_cast<uintptr_t>(core().mem[int(m)]));
}

inline void check(Mem m, const void* p, size_t bytes, const char* op) {
  Core& c = core();
  if (c.launch->failed.load(std::memory_order_relaxed)) siglongjmp(c.exit_jmp, 2);
  int64_t off = onchip_offset(m, p);
  if (!c.has_mem[int(m)]) fail("%s: %s is not a memory of the %s core (offset %lld)", op, kMemName[int(m)],
                               c.core_name(), (long long)off);
  if (off < 0 || uint64_t(off) + bytes > kMemSize[int(m)])
    fail("%s: buffer %s offset %lld, %zu bytes, is outside [0, %zu)", op, kMemName[int(m)], (long long)off, bytes,
         kMemSize[int(m)]);
}

// Global memory: the launch's guarded copies of the tensor arguments (defined in launch.h).
void check_gm(const void* p, size_t bytes, const char* op);

inline void count_bytes(pipe_t pipe, size_t bytes) { core().counters.bytes[int(pipe)] += bytes; }
inline void count_cube_macs(uint64_t macs) {
  Core& c = core();
  c.counters.cube_macs += macs;
  if (c.timeline) timeline_push(*c.timeline, Ev::Cube, PIPE_M, 1, 0, 0, macs);
}
// input_bits: 32, 16, 8 or 4 (the operands' element width). The timeline charges `charged` MACs (the
// cube's padded geometry, c_api/cube.h) at the rate of the width and mode; the counters count `macs`.
inline void count_cube_macs(uint64_t macs, int input_bits, uint64_t charged, CubeMode mode) {
  Core& c = core();
  Counters& k = c.counters;
  const int width = input_bits >= 32 ? 0 : input_bits >= 16 ? 1 : input_bits >= 8 ? 2 : 3;
  k.cube_macs += macs;
  k.cube_macs_by_input[width] += macs;
  if (c.timeline) timeline_push(*c.timeline, Ev::Cube, PIPE_M, width, int(mode), 0, macs, charged);
}
// cls: how the timeline costs the instruction (its ALU class, or a register load / store); src_step: the
// latest dataflow step of its source registers (vreg::step_of). Returns its result's step (0 when the
// launch records no timeline).
inline uint64_t count_vector_ops(uint64_t elements, VecClass cls = VecClass::Simple, uint64_t src_step = 0) {
  Core& c = core();
  c.counters.vector_ops += elements;
  return c.timeline ? timeline_vector(*c.timeline, c.vec_flow, cls, src_step) : 0;
}
// l2_bytes: for a SIMT access, the bytes the timeline puts through L2 (a cached load that hit the data
// cache: none; touch_gm's return); the counters count `bytes` either way.
// variant (Ev::Move's b) and width (its m) tell the timeline how to cost the move: MxScales for
// asc_copy_l12l0{a,b}_mx (the MX scale path), Strided for rows of `width` bytes that are not one contiguous
// run, Dual for a dual-destination FixPipe (`width`: each AIV's ND row). The counters count every variant of
// a route alike.
inline void count_move(Route route, size_t bytes, uint64_t l2_bytes, MoveVariant variant = MoveVariant::Plain,
                       uint64_t width = 0) {
  Core& c = core();
  Counters& k = c.counters;
  k.route_bytes[int(route)] += bytes;
  if (c.timeline) {
    if (route == Route::SIMT_GM_LOAD || route == Route::SIMT_GM_STORE)
      timeline_simt(*c.timeline, 0, l2_bytes, kSimtGmAccess);  // one lane's access: one memory instruction
    else timeline_push(*c.timeline, Ev::Move, kRoutePipe[int(route)], int(route), int(variant), 0, bytes, width);
  }
  if (route != Route::SIMT_GM_LOAD && route != Route::SIMT_GM_STORE) k.bytes[int(kRoutePipe[int(route)])] += bytes;
}
inline void count_move(Route route, size_t bytes) { count_move(route, bytes, bytes); }
// n rows of `width` bytes, `contiguous` when each starts where the previous ended: Strided unless they are
// one run (n == 1 or contiguous).
inline void count_rows_move(Route route, uint64_t n, uint64_t width, bool contiguous) {
  const size_t bytes = size_t(n * width);
  if (n > 1 && !contiguous) count_move(route, bytes, bytes, MoveVariant::Strided, width);
  else count_move(route, bytes);
}
// How a GM access reaches L2 (the L2 model's L2 bytes, l2_model.h): a data mover fetches each line of
// one instruction once; a streaming SIMT access (asc_ldcg / asc_stcg / asc_stwt) moves its bytes (the
// lanes of a warp coalesce into whole lines; the twin runs lanes one after another, so lines are not
// seen together, so a filter of recent lines drops the repeats a warp would coalesce); a cached SIMT load
// (asc_ldca) is served by the core's data cache when it hit the line shortly before (a 256-line, 4-way
// filter stands for that cache). Streaming accesses neither fill nor hit that cache: asc-devkit implements
// asc_ldcg as __ldg<L2_CACHE_HINT_NORMAL_FV, L1CacheType::NON_CACHEABLE> (device_functions.h), and asc_ldcg.md
// reads L2 ("从L2 Cache加载缓存的数据"); they keep a filter of their own.
enum class GmAccess : uint8_t { Mover, SimtStream, SimtCached };

// A data mover calls this once before its accesses: its lines count once per instruction.
inline void begin_gm_move() {
  Core& c = core();
  if (++c.move_id == 0) {  // wrapped: entries stamped with the new id would look current
    c.move_lines.assign(c.move_lines.size(), Core::MoveLine{0, 0});
    c.move_id = 1;
  }
}

// Appends a line to the core's trace, extending the last run where it continues it (a repeat is a new
// access: the filters in touch_gm already dropped the repeats that never reach L2).
inline void trace_line(Core& c, uint64_t line, bool write) {
  if (!c.gm_trace.empty()) {
    GmRun& prev = c.gm_trace.back();
    if (prev.write == write && line == prev.first_line + prev.lines && prev.lines < (1u << 31)) {
      ++prev.lines;
      return;
    }
  }
  c.gm_trace.push_back({line, 1, write});
}

// Whether the current data-mover instruction touches this line (tag) for the first time: a hash set of
// its lines, emptied by the next instruction (entries of older instructions count as free).
inline bool first_touch_in_move(Core& c, uint64_t tag) {
  if (c.move_lines.empty()) c.move_lines.assign(Core::kMoveLines, Core::MoveLine{0, 0});
  size_t at = size_t((tag * 0x9E3779B97F4A7C15ull) >> 50);  // 14 bits: kMoveLines slots
  for (size_t probe = 0; probe < Core::kMoveLines; ++probe, at = (at + 1) % Core::kMoveLines) {
    Core::MoveLine& e = c.move_lines[at];
    if (e.move != c.move_id) {
      e = {tag, c.move_id};
      return true;
    }
    if (e.tag == tag) return false;
  }
  return true;  // more lines than slots in one instruction: counted again (not reached by the kernels here)
}

// Records the GM bytes [p, p + bytes) a core accesses for the L2 model; call it next to check_gm.
// Returns the bytes the access takes from L2, which the timeline charges a SIMT access (count_move):
// `bytes`, except for a cached SIMT load (asc_ldca), whose data-cache hits take none and whose misses
// take a line each. asc-devkit's SIMT API docs (asc_ldca.md, "使能Cache Hints的Load/Store函数"): asc_ldca
// loads from the Data Cache first and tries L2 only on a miss (then caches the data in both); the
// DCache best practice (asc-devkit docs, "DCache访问优化") uses it so that hot data stays in the DCache
// and is not reloaded. A launch that records a timeline always runs the L2 model (launch.h).
inline uint64_t touch_gm(const void* p, size_t bytes, bool write, GmAccess how = GmAccess::Mover) {
  Core& c = core();
  if (bytes == 0 || !c.launch->l2_model) return bytes;
  const uint64_t addr = reinterpret_cast<uintptr_t>(p);
  const uint64_t first = addr / kL2LineBytes, last = (addr + bytes - 1) / kL2LineBytes;
  uint64_t cached_miss = 0;
  if (how == GmAccess::SimtStream) c.l2_bytes += bytes;
  for (uint64_t line = first; line <= last; ++line) {
    const uint64_t tag = (line + 1) << 1 | uint64_t(write);
    if (how == GmAccess::Mover) {
      if (!first_touch_in_move(c, tag)) continue;
      c.l2_bytes += kL2LineBytes;
    } else {
      uint64_t (&lines)[64][4] = how == GmAccess::SimtCached ? c.dcache_lines : c.stream_lines;
      uint64_t* set = lines[(line * 0x9E3779B97F4A7C15ull) >> 58];  // a hashed set: tensors' ends align
      int way = 0;
      while (way < 4 && set[way] != tag) ++way;
      for (int w = way < 4 ? way : 3; w > 0; --w) set[w] = set[w - 1];  // move to front (LRU within the set)
      set[0] = tag;
      if (way < 4) continue;
      if (how == GmAccess::SimtCached) {
        cached_miss += kL2LineBytes;
        c.l2_bytes += kL2LineBytes;
      }
    }
    trace_line(c, line, write);
  }
  return how == GmAccess::SimtCached ? cached_miss : bytes;
}

// Set while a core runs SIMT lanes (asc_vf_call): max / min / the vector structs used by scalar code
// outside a SIMT region are not SIMT work.
inline thread_local bool tls_in_simt = false;
inline void count_simt_ops(uint64_t ops) {
  if (!tls_in_simt) return;
  Core& c = core();
  c.counters.simt_ops += ops;
  if (c.timeline) timeline_simt(*c.timeline, ops, 0);
}
// A SIMT lane's plain work the twin cannot see (lanes are host code: built-in arithmetic and plain
// dereferences of __ubuf__ pointers run uncounted), declared by the kernel through asc_simt.h's
// DJ_SIMT_WORK: `alu` ALU instructions, `ub_loads` / `ub_stores` UB accesses of this lane. Timeline only
// (the counters' simt_ops stay the twin-implemented ops); one branch when no timeline is recorded.
inline void count_simt_work(uint64_t alu, uint64_t ub_loads, uint64_t ub_stores) {
  if (!tls_in_simt) return;
  Core& c = core();
  if (!c.timeline) return;
  // the packed 20-bit fields take far less than half their range a call (timeline_simt's overflow check)
  constexpr uint64_t kPart = uint64_t(1) << 16;
  do {
    const uint64_t loads = std::min(ub_loads, kPart), stores = std::min(ub_stores, kPart);
    timeline_simt(*c.timeline, alu, 0, loads * kSimtUbLoad + stores * kSimtUbStore);
    alu = 0, ub_loads -= loads, ub_stores -= stores;
  } while (ub_loads | ub_stores);
}

// An on/off environment switch: set, non-empty and not "0".
inline bool env_flag(const char* name) {
  const char* raw = std::getenv(name);
  return raw && *raw && std::strcmp(raw, "0") != 0;
}

// AscendC's reg docs leave the NaN result of asc_max / asc_min / asc_reduce_max / asc_reduce_min open. The twin
// propagates NaN; with DJ_TWIN_MAX_DROPS_NAN=1 (read at each launch) they return the other operand instead (as
// the chip's scalar max does), so a test can prove that a kernel's explicit NaN handling holds either way.
inline bool g_max_drops_nan = false;

inline bool is_aic() { return core().kind == CoreKind::AIC; }
inline bool is_aiv() { return core().kind == CoreKind::AIV; }

}  // namespace dj_twin

// The kernel-visible block index (a per-thread copy of the core's block index).
inline thread_local int32_t block_idx = 0;
inline thread_local int32_t block_num = 0;
