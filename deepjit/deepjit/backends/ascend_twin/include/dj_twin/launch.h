// dj_twin/launch.h — running one kernel launch on the twin, and the C entry points the Python side calls.
//
// Compiled once per prelude, into the prelude's launch.o, which every kernel's shared object links: the
// generated launcher (kernel.twin.cpp) defines DJ_TWIN_LAUNCH_EXTERNAL, which leaves launch() declared and
// the C entry points out. Compiling this machinery into every kernel was three quarters of a twin build.
// Both objects are compiled from the same precompiled prelude and flags, and the launcher includes this
// header before the kernel source, so no kernel macro can change it: their inline functions agree. The
// runtime's globals (g_launch_mu, g_timelines, tls_core, ...) are inline variables, which g++ makes
// process-wide (STB_GNU_UNIQUE) even across libraries loaded RTLD_LOCAL: all twin kernels of a process share
// them, as they did before launch.o.
//
// A launch: map every tensor argument into its own guarded region (copy in), read the packed
// argument buffer exactly as the device would (backends/args.py pack_ascend_args), then run the
// blocks in waves of at most the chip's core count (32 AIC / 64 AIV; a mixed block takes one AIC and
// two AIV). Each core is a thread with private guarded on-chip memories and its own signal stack;
// a fault in a guard page, a failed check or a sync error records one message (kernel, block, core,
// buffer, offset, op) and makes every core stop. Only a successful launch copies the tensors back.
#pragma once

#include "dj_twin/launch_deps.h"

namespace dj_twin {

inline constexpr size_t kGuard = 64 * 1024;  // PROT_NONE on each side of every region
inline constexpr int kAbiVersion = 5;
// block, kind, sub, bytes[pipes], macs, vops, wait_ns, macs by input width[4], bytes[routes], simt ops,
// L2 model: modelled (0/1), HBM read bytes, HBM write bytes, L2 bytes
inline constexpr int kCounterWords = 3 + PIPE_NUM + 3 + 4 + kNumRoutes + 1 + 4;

constexpr uint8_t kSlackByte = 0xA5;  // fills the bytes between a ragged tensor end and the guard
// A tensor's start is aligned to the L2 model's line, so its lines are counted as a device allocation's
// (whose alignment is coarser) would be.
inline constexpr size_t kGmAlign = kL2LineBytes;
inline size_t gm_round(size_t bytes) { return (bytes + kGmAlign - 1) / kGmAlign * kGmAlign; }

struct GmRegion {
  uint8_t* map = nullptr;   // whole mapping, guards included
  size_t map_len = 0;
  uint8_t* data = nullptr;  // the tensor's bytes (end placed against the upper guard, kGmAlign-aligned)
  size_t bytes = 0;
  uint64_t host = 0;        // the caller's address
  char name[64] = {};
};

struct LaunchState {
  Launch launch;
  std::vector<GmRegion> gm;
};

inline LaunchState* g_state = nullptr;  // the launch in progress (launches are serialised)
inline std::mutex g_launch_mu;
// The timeline (dj_twin/timeline.h): whether the next launches record one, and the last launch's
// events by core (all_cores' order), read back through dj_twin_timeline_* below.
inline bool g_timeline_on = false;
inline std::vector<Timeline> g_timelines;

inline size_t page_round(size_t n) {
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

inline void record_failure(Launch& l, const char* text) {
  std::lock_guard<std::mutex> guard(l.mu);
  if (!l.failed.load()) {
    std::snprintf(l.message, sizeof l.message, "%s", text);
    l.failed.store(true);
  }
}

inline void check_gm(const void* p, size_t bytes, const char* op) {
  Core& c = core();
  if (c.launch->failed.load(std::memory_order_relaxed)) siglongjmp(c.exit_jmp, 2);
  auto addr = reinterpret_cast<uintptr_t>(p);
  for (const GmRegion& r : g_state->gm) {
    auto lo = reinterpret_cast<uintptr_t>(r.map), hi = lo + r.map_len;
    if (addr < lo || addr >= hi) continue;
    auto data = reinterpret_cast<uintptr_t>(r.data);
    long long off = (long long)(addr - data);
    if (addr < data || addr + bytes > data + r.bytes)
      fail("%s: global tensor %s offset %lld, %zu bytes, is outside [0, %zu)", op, r.name, off, bytes, r.bytes);
    return;
  }
  // Peers' symmetric windows (dj_twin/symm.h) are accessed in place, checked against their data range.
  if (const SymmRegion* w = symm_region_of(addr, bytes)) {
    long long off = (long long)(addr - w->data);
    if (addr < w->data || addr + bytes > w->data + w->bytes)
      fail("%s: %s offset %lld, %zu bytes, is outside [0, %zu)", op, w->name, off, bytes, w->bytes);
    return;
  }
  fail("%s: global address %p (%zu bytes) is not inside any tensor argument or symm window", op, p, bytes);
}

// ---- faults ------------------------------------------------------------------------------------------

inline struct sigaction g_old_actions[32];
inline bool g_handler_installed = false;

// Names the buffer a faulting address belongs to (guards around the core's memories or the tensors).
inline void describe_fault(const Core& c, uintptr_t addr, char* out, size_t n) {
  for (int m = 0; m < int(Mem::Count); ++m) {
    auto base = reinterpret_cast<uintptr_t>(c.mem[m]);
    if (addr + kGuard >= base && addr < base + kMemSize[m] + kGuard) {
      long long off = (long long)(addr - base);
      if (!c.has_mem[m])
        std::snprintf(out, n, "buffer %s offset %lld: the %s core has no %s", kMemName[m], off, c.core_name(),
                      kMemName[m]);
      else
        std::snprintf(out, n, "buffer %s offset %lld is outside [0, %zu)", kMemName[m], off, kMemSize[m]);
      return;
    }
  }
  if (g_state)
    for (const GmRegion& r : g_state->gm) {
      auto lo = reinterpret_cast<uintptr_t>(r.map);
      if (addr >= lo && addr < lo + r.map_len) {
        std::snprintf(out, n, "global tensor %s offset %lld is outside [0, %zu)", r.name,
                      (long long)(addr - reinterpret_cast<uintptr_t>(r.data)), r.bytes);
        return;
      }
    }
  std::snprintf(out, n, "address %p is not in any memory of this core or tensor of the launch (a SIMT lane stack "
                "overflow or a wild pointer)", reinterpret_cast<void*>(addr));
}

inline void fault_handler(int sig, siginfo_t* info, void* uctx) {
  Core* c = tls_core;
  if (!c) {  // not a twin core: give the signal to whoever handled it before (reinstalled next launch)
    sigaction(sig, &g_old_actions[sig], nullptr);
    g_handler_installed = false;
    (void)uctx;
    return;  // the instruction re-faults under the previous handler
  }
  char where[512];
  describe_fault(*c, reinterpret_cast<uintptr_t>(info->si_addr), where, sizeof where);
  char text[1200];
  std::snprintf(text, sizeof text, "kernel %s, block %d, core %s: %s during a direct access (%s)", c->launch->kernel,
                c->block_idx, c->core_name(), sig == SIGFPE ? "arithmetic fault" : where,
                sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGFPE");
  Launch& l = *c->launch;
  if (l.mu.try_lock()) {
    if (!l.failed.load()) {
      std::snprintf(l.message, sizeof l.message, "%s", text);
      l.failed.store(true);
    }
    l.mu.unlock();
  } else {
    l.failed.store(true);
  }
  siglongjmp(c->exit_jmp, 3);
}

inline void install_handler() {
  if (g_handler_installed) return;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = fault_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE}) sigaction(sig, &sa, &g_old_actions[sig]);
  g_handler_installed = true;
}

// ---- memories ----------------------------------------------------------------------------------------

struct CoreMemory {
  uint8_t* map = nullptr;
  size_t len = 0;
  ~CoreMemory() {
    if (map) munmap(map, len);
  }
};

// One mapping per core: [guard | UB | guard | L1 | guard | ...]; absent memories stay PROT_NONE.
// DJ_TWIN_POISON=1 fills the memories with 0xFF bytes (NaN in every float type) instead of zeros, so
// a kernel that reads on-chip memory it never wrote shows it.
inline bool map_core_memory(Core& c, CoreMemory& cm) {
  const bool poison = env_flag("DJ_TWIN_POISON");
  size_t len = kGuard;
  for (size_t s : kMemSize) len += s + kGuard;
  void* map = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return false;
  cm.map = static_cast<uint8_t*>(map);
  cm.len = len;
  uint8_t* p = cm.map + kGuard;
  for (int m = 0; m < int(Mem::Count); ++m) {
    c.mem[m] = p;
    if (c.has_mem[m] && mprotect(p, kMemSize[m], PROT_READ | PROT_WRITE) != 0) return false;
    if (c.has_mem[m] && poison) std::memset(p, 0xFF, kMemSize[m]);
    p += kMemSize[m] + kGuard;
  }
  return true;
}

// ---- arguments -----------------------------------------------------------------------------------------

// Reads the packed launch arguments like the device: each at an offset aligned to max(4, alignof).
struct ArgReader {
  const uint8_t* buf;
  size_t len, off = 0;
  std::vector<GmRegion>* gm;
  std::string error;

  template <typename T>
  T arg(const char* name) {
    T value{};
    if (!error.empty()) return value;
    if constexpr (std::is_pointer_v<T>) {
      off = (off + 7) / 8 * 8;
      if (off + 8 > len) {
        error = std::string("argument ") + name + ": the packed arguments end before it (too few arguments?)";
        return value;
      }
      uint64_t host;
      std::memcpy(&host, buf + off, 8);
      off += 8;
      if (host == 0) return nullptr;
      for (GmRegion& r : *gm)
        if (host >= r.host && host < r.host + r.bytes + (r.bytes == 0)) {
          if (!r.name[0]) std::snprintf(r.name, sizeof r.name, "%s", name);
          return reinterpret_cast<T>(r.data + (host - r.host));
        }
      char text[256];
      std::snprintf(text, sizeof text, "argument %s: address 0x%llx is not inside any tensor argument", name,
                    (unsigned long long)host);
      error = text;
      return value;
    } else {
      static_assert(std::is_trivially_copyable_v<T>, "kernel scalar arguments are plain values");
      size_t align = alignof(T) < 4 ? 4 : alignof(T);
      off = (off + align - 1) / align * align;
      if (off + sizeof(T) > len) {
        error = std::string("argument ") + name + ": the packed arguments end before it (too few arguments?)";
        return value;
      }
      std::memcpy(&value, buf + off, sizeof(T));
      off += sizeof(T);
      return value;
    }
  }

  // A pointer field of the argument struct (deepjit.kernel_args): the caller's address in the struct's
  // guarded copy becomes the same byte of its tensor's guarded copy, so accesses through it are checked
  // like a tensor argument's (null stays null). Runs once per launch, before any core.
  void relocate(const volatile void* args_struct, size_t offset, const char* name) {
    if (!error.empty()) return;
    if (args_struct == nullptr) {
      error = std::string("argument ") + name + ": the argument struct pointer is null";
      return;
    }
    auto* field = const_cast<uint8_t*>(reinterpret_cast<const volatile uint8_t*>(args_struct)) + offset;
    uint64_t host;
    std::memcpy(&host, field, 8);
    if (host == 0) return;
    for (GmRegion& r : *gm)
      if (host >= r.host && host < r.host + r.bytes + (r.bytes == 0)) {
        if (!r.name[0]) std::snprintf(r.name, sizeof r.name, "%s", name);
        uint64_t mapped = reinterpret_cast<uint64_t>(r.data + (host - r.host));
        std::memcpy(field, &mapped, 8);
        return;
      }
    char text[256];
    std::snprintf(text, sizeof text, "argument %s: address 0x%llx is not inside any tensor of the launch", name,
                  (unsigned long long)host);
    error = text;
  }
};

// ---- the launch ------------------------------------------------------------------------------------------

inline void run_core(Core* c, const std::function<void()>* body) {
  tls_core = c;
  block_idx = c->block_idx;
  block_num = c->num_blocks;
  stack_t ss;
  std::memset(&ss, 0, sizeof ss);
  std::vector<uint8_t> alt(64 * 1024);
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  if (sigsetjmp(c->exit_jmp, 1) == 0) {
    (*body)();
    check_sync_at_exit();
  }
  inter_exit(*c);
  c->order.reset();  // ~76 KiB a core; the launch keeps its cores (counters) until every wave has run
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, nullptr);
  tls_core = nullptr;
}

int launch(const char* kernel, KernelKind kind, uint32_t num_blocks, const uint8_t* args, size_t args_len,
           const uint64_t* tensor_addr, const uint64_t* tensor_bytes, int n_tensors, double timeout_s,
           double launch_timeout_s, char* err, size_t err_len, uint64_t* counters,
           const std::function<std::function<void()>(ArgReader&)>& make_body)
#ifdef DJ_TWIN_LAUNCH_EXTERNAL
    ;  // the launchers: defined in the prelude's launch.o
#else
{
  std::lock_guard<std::mutex> serial(g_launch_mu);
  auto report = [&](const char* text) {
    std::snprintf(err, err_len, "%s", text);
    return 1;
  };
  if (num_blocks == 0) return report("num_blocks must be positive");
  install_handler();
  auto state = std::make_unique<LaunchState>();
  state->launch.kernel = kernel;
  state->launch.kind = kind;
  state->launch.num_blocks = int(num_blocks);
  state->launch.wait_timeout_s = timeout_s;
  // The timeline needs the L2 model's hit / miss split of each core's GM bytes.
  const bool timeline = g_timeline_on || env_flag("DJ_TWIN_TIMELINE");
  state->launch.l2_model = env_flag("DJ_TWIN_L2") || timeline;
  state->launch.allow_unpaired_flags = env_flag("DJ_TWIN_ALLOW_UNPAIRED_FLAGS");
  g_max_drops_nan = env_flag("DJ_TWIN_MAX_DROPS_NAN");
  // Tensors: each in its own guarded region, the data's kGmAlign-aligned end at the upper guard; the
  // up to kGmAlign - 1 bytes of slack after a ragged end hold a pattern checked after the launch, so a direct
  // store past the tensor is caught even where it does not reach the guard page.
  state->gm.resize(size_t(n_tensors));
  struct Unmap {
    std::vector<GmRegion>& gm;
    ~Unmap() {
      for (GmRegion& r : gm)
        if (r.map) munmap(r.map, r.map_len);
    }
  } unmap{state->gm};
  for (int i = 0; i < n_tensors; ++i) {
    GmRegion& r = state->gm[size_t(i)];
    r.bytes = size_t(tensor_bytes[i]);
    r.host = tensor_addr[i];
    size_t body = page_round(gm_round(r.bytes) + kGmAlign);
    r.map_len = body + 2 * kGuard;
    void* map = mmap(nullptr, r.map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return report("cannot map global memory for a tensor argument");
    r.map = static_cast<uint8_t*>(map);
    if (mprotect(r.map + kGuard, body, PROT_READ | PROT_WRITE) != 0)
      return report("cannot make global memory of a tensor argument writable");
    r.data = r.map + kGuard + body - gm_round(r.bytes);
    std::memcpy(r.data, reinterpret_cast<const void*>(r.host), r.bytes);
    std::memset(r.data + r.bytes, kSlackByte, gm_round(r.bytes) - r.bytes);
  }
  ArgReader reader{args, args_len, 0, &state->gm, {}};
  std::function<void()> body = make_body(reader);
  if (!reader.error.empty()) return report(reader.error.c_str());
  if (reader.off != args_len && (args_len + 7) / 8 * 8 != (reader.off + 7) / 8 * 8) {
    char text[256];
    std::snprintf(text, sizeof text, "the kernel's parameters take %zu bytes of arguments, the launch passed %zu "
                  "(wrong argument count or types)", reader.off, args_len);
    return report(text);
  }
  g_state = state.get();
  // The launch timeout (num_launch_timeout_secs, 0 = none) stops every core at its next intrinsic.
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;
  std::thread watchdog([&] {
    if (launch_timeout_s <= 0) return;
    std::unique_lock<std::mutex> lock(done_mu);
    if (!done_cv.wait_for(lock, std::chrono::duration<double>(launch_timeout_s), [&] { return done; })) {
      char text[256];
      std::snprintf(text, sizeof text, "kernel %s: the launch did not finish within %.0f s (num_launch_timeout_secs)",
                    kernel, launch_timeout_s);
      record_failure(state->launch, text);
    }
  });
  struct StopWatchdog {
    std::mutex& mu;
    std::condition_variable& cv;
    bool& done;
    std::thread& t;
    ~StopWatchdog() {
      {
        std::lock_guard<std::mutex> lock(mu);
        done = true;
      }
      cv.notify_all();
      t.join();
    }
  } stop_watchdog{done_mu, done_cv, done, watchdog};
  const int per_block = kind == KernelKind::Mix ? 3 : 1;
  const uint32_t wave = kind == KernelKind::Vector ? kNumAiv : kNumAic;
  std::vector<std::unique_ptr<Core>> all_cores;
  // The L2 model: one cache for the launch, each wave's traces replayed into it once the wave ends;
  // HBM bytes by core (all_cores' order).
  std::unique_ptr<L2Cache> l2;
  if (state->launch.l2_model) l2 = std::make_unique<L2Cache>(l2_bytes_from_env());
  std::vector<uint64_t> hbm_read, hbm_write;
  g_timelines.clear();
  if (timeline) g_timelines.resize(size_t(num_blocks) * size_t(per_block));
  for (uint32_t first = 0; first < num_blocks && !state->launch.failed.load(); first += wave) {
    uint32_t last = first + wave < num_blocks ? first + wave : num_blocks;
    std::vector<std::unique_ptr<Block>> blocks;
    std::vector<std::unique_ptr<CoreMemory>> memories;
    std::vector<Core*> cores;
    for (uint32_t b = first; b < last; ++b) {
      blocks.push_back(std::make_unique<Block>());
      Block* blk = blocks.back().get();
      for (int k = 0; k < per_block; ++k) {
        auto c = std::make_unique<Core>();
        c->launch = &state->launch;
        c->block = blk;
        c->block_idx = int(b);
        c->num_blocks = int(num_blocks);
        bool aic = kind == KernelKind::Cube || (kind == KernelKind::Mix && k == 0);
        c->kind = aic ? CoreKind::AIC : CoreKind::AIV;
        c->sub_block = kind == KernelKind::Mix && !aic ? k - 1 : 0;
        if (aic) {
          c->has_mem[int(Mem::L1)] = c->has_mem[int(Mem::L0A)] = c->has_mem[int(Mem::L0B)] =
              c->has_mem[int(Mem::L0C)] = true;
          blk->aic = c.get();
        } else {
          c->has_mem[int(Mem::UB)] = true;
          blk->aiv[c->sub_block] = c.get();
        }
        memories.push_back(std::make_unique<CoreMemory>());
        if (!map_core_memory(*c, *memories.back())) {
          g_state = nullptr;
          return report("cannot map the on-chip memories of a core");
        }
        if (timeline) c->timeline = &g_timelines[all_cores.size()];
        cores.push_back(c.get());
        all_cores.push_back(std::move(c));
      }
    }
    std::vector<std::thread> threads;
    threads.reserve(cores.size());
    for (Core* c : cores) threads.emplace_back(run_core, c, &body);
    for (std::thread& t : threads) t.join();
    if (l2 && !state->launch.failed.load()) replay_wave(*l2, cores, all_cores.size() - cores.size(), hbm_read, hbm_write);
    // Once every core of the wave has ended, a cross-core
    // flag counter still set was arrived on but never waited for (issue 11: reported at kernel end).
    for (Core* c : cores)
      for (int id = 0; id < kNumIntraIds && !state->launch.failed.load() && !state->launch.allow_unpaired_flags; ++id)
        if (c->intra[id]) {
          char text[512];
          std::snprintf(text, sizeof text, "kernel %s, block %d, core %s: kernel end: cross-core flag %d "
                        "(asc_sync_intra_arrive) was set %d time(s) more than it was waited on", kernel,
                        c->block_idx, c->core_name(), id, int(c->intra[id]));
          record_failure(state->launch, text);
        }
  }
  g_state = nullptr;
  hbm_read.resize(all_cores.size(), 0);
  hbm_write.resize(all_cores.size(), 0);
  if (l2) l2->flush(hbm_write);
  for (size_t i = 0; i < all_cores.size() && counters; ++i) {
    const Core& c = *all_cores[i];
    uint64_t* out = counters + i * kCounterWords;
    out[0] = uint64_t(c.block_idx);
    out[1] = uint64_t(c.kind);
    out[2] = uint64_t(c.sub_block);
    for (int p = 0; p < PIPE_NUM; ++p) out[3 + p] = c.counters.bytes[p];
    out[3 + PIPE_NUM] = c.counters.cube_macs;
    out[4 + PIPE_NUM] = c.counters.vector_ops;
    out[5 + PIPE_NUM] = c.counters.wait_ns;
    for (int w = 0; w < 4; ++w) out[6 + PIPE_NUM + w] = c.counters.cube_macs_by_input[w];
    for (int r = 0; r < kNumRoutes; ++r) out[10 + PIPE_NUM + r] = c.counters.route_bytes[r];
    out[10 + PIPE_NUM + kNumRoutes] = c.counters.simt_ops;
    out[11 + PIPE_NUM + kNumRoutes] = state->launch.l2_model ? 1 : 0;
    out[12 + PIPE_NUM + kNumRoutes] = hbm_read[i];
    out[13 + PIPE_NUM + kNumRoutes] = hbm_write[i];
    out[14 + PIPE_NUM + kNumRoutes] = c.l2_bytes;
  }
  if (state->launch.failed.load()) return report(state->launch.message);
  for (GmRegion& r : state->gm)
    for (size_t b = r.bytes; b < gm_round(r.bytes); ++b)
      if (r.data[b] != kSlackByte) {
        char text[256];
        std::snprintf(text, sizeof text, "%s: a store wrote past global tensor %s: byte %zu of a %zu-byte tensor",
                      kernel, r.name, b, r.bytes);
        return report(text);
      }
  for (GmRegion& r : state->gm) std::memcpy(reinterpret_cast<void*>(r.host), r.data, r.bytes);
  return 0;
}
#endif  // DJ_TWIN_LAUNCH_EXTERNAL

}  // namespace dj_twin

#ifndef DJ_TWIN_LAUNCH_EXTERNAL

// The timeline's C entry points: switch recording on or off for the next launches; the number of events
// of a core of the last launch; copy them out. Each takes g_launch_mu, so it never sees a launch half done.
// Defined in launch.o alone, and exported from every kernel's library that links it.
#define DJ_TWIN_C_ENTRY extern "C" __attribute__((visibility("default")))
DJ_TWIN_C_ENTRY void dj_twin_timeline_enable(int on) {
  std::lock_guard<std::mutex> serial(::dj_twin::g_launch_mu);
  ::dj_twin::g_timeline_on = on != 0;
}
DJ_TWIN_C_ENTRY uint64_t dj_twin_timeline_size(uint64_t core) {
  std::lock_guard<std::mutex> serial(::dj_twin::g_launch_mu);
  return core < ::dj_twin::g_timelines.size() ? ::dj_twin::g_timelines[core].size() : 0;
}
DJ_TWIN_C_ENTRY uint64_t dj_twin_timeline_copy(uint64_t core, void* out, uint64_t max_events) {
  std::lock_guard<std::mutex> serial(::dj_twin::g_launch_mu);
  if (core >= ::dj_twin::g_timelines.size()) return 0;
  const auto& t = ::dj_twin::g_timelines[core];
  const uint64_t n = t.size() < max_events ? t.size() : max_events;
  if (n) std::memcpy(out, t.data(), n * sizeof(::dj_twin::TimelineEvent));
  return n;
}
// The symmetric windows the next launches may access in place (deepjit/symm/device.py): n data ranges
// and their names, '\n'-separated; n = 0 forgets them.
DJ_TWIN_C_ENTRY void dj_twin_set_symm_windows(const uint64_t* data, const uint64_t* bytes, const char* names, int n) {
  std::lock_guard<std::mutex> serial(::dj_twin::g_launch_mu);
  auto& regions = ::dj_twin::g_symm_regions;
  regions.assign(size_t(n > 0 ? n : 0), ::dj_twin::SymmRegion{});
  for (int i = 0; i < n; ++i) {
    regions[size_t(i)].data = uintptr_t(data[i]);
    regions[size_t(i)].bytes = size_t(bytes[i]);
    const char* end = std::strchr(names, '\n');
    const size_t len = end ? size_t(end - names) : std::strlen(names);
    std::snprintf(regions[size_t(i)].name, sizeof regions[size_t(i)].name, "%.*s", int(len), names);
    names += end ? len + 1 : len;
  }
}
#undef DJ_TWIN_C_ENTRY
#endif  // DJ_TWIN_LAUNCH_EXTERNAL
