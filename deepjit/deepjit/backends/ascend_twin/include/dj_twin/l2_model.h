// dj_twin/l2_model.h — the twin's model of the chip's shared L2 cache, for the roofline's HBM bytes.
//
// On (DJ_TWIN_L2=1), each core records the GM lines it touches, in its own program order, as runs of
// consecutive 128-byte lines (touch_gm, called by every data mover and SIMT GM access next to its
// check_gm). After each wave of the launch its cores' runs are replayed through one LRU cache of the
// chip's L2 size (kept across the launch's waves): round-robin, a few lines of each core in turn
// (they run concurrently on the chip, at about the same rate for the uniform tiles of a persistent
// kernel). A read that misses is an HBM read of its line; a written line is dirty and is an HBM
// write when it is evicted or at the end of the launch (write-allocate without a fill). Bytes are attributed to the
// core whose access missed (reads) or last wrote the line (writes). The L2 bytes each core moved are
// counted as it runs (touch_gm: a data mover's lines once per instruction, streaming SIMT bytes as
// they are, cached SIMT loads that miss the core's data cache as lines).
//
// Sizes: dav-3510's L2 is 112 MiB (CANN platform_config Ascend950PR_957bx.ini: l2_size=117440512);
// DJ_TWIN_L2_BYTES overrides it (tests). The 128-byte line is an assumption (no published figure
// for dav-3510); tensors start on a line (launch.h kGmAlign).
// The model is fully associative and knows nothing of timing, prefetch or the cache-mode hints.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "dj_twin/runtime.h"

namespace dj_twin {

inline constexpr uint64_t kL2DefaultBytes = 117440512;

inline uint64_t l2_bytes_from_env() {
  const char* raw = std::getenv("DJ_TWIN_L2_BYTES");
  if (!raw || !*raw) return kL2DefaultBytes;
  char* end = nullptr;
  unsigned long long v = std::strtoull(raw, &end, 10);
  return (end && *end == 0 && v >= kL2LineBytes) ? uint64_t(v) : kL2DefaultBytes;
}

// Fully associative LRU over line numbers; slots in a doubly linked list, most recent at head.
class L2Cache {
 public:
  // at least one line, below the slot indices' kNone
  explicit L2Cache(uint64_t bytes)
      : capacity_(std::min<uint64_t>(std::max<uint64_t>(bytes / kL2LineBytes, 1), kNone - 1)) {
    index_.reserve(size_t(capacity_ < (1u << 22) ? capacity_ : (1u << 22)));
  }

  // One access of `line` by core `who`: a read miss adds the line to hbm_read[who], the write-back of
  // an evicted dirty line to hbm_write[its owner].
  void access(uint64_t line, bool write, uint32_t who, std::vector<uint64_t>& hbm_read,
              std::vector<uint64_t>& hbm_write) {
    auto it = index_.find(line);
    uint32_t s;
    if (it != index_.end()) {
      s = it->second;
      unlink(s);
    } else {
      if (!write) hbm_read[who] += kL2LineBytes;
      if (slots_.size() < capacity_) {
        s = uint32_t(slots_.size());
        slots_.push_back({});
      } else {
        s = tail_;  // evict the least recently used line
        unlink(s);
        if (slots_[s].dirty) hbm_write[slots_[s].owner] += kL2LineBytes;
        index_.erase(slots_[s].line);
      }
      slots_[s] = Slot{line, kNone, kNone, who, false};
      index_.emplace(line, s);
    }
    if (write) {
      slots_[s].dirty = true;
      slots_[s].owner = who;
    }
    push_front(s);
  }

  // The dirty lines still held are written back at the end of the launch.
  void flush(std::vector<uint64_t>& hbm_write) {
    for (const Slot& slot : slots_)
      if (slot.dirty) hbm_write[slot.owner] += kL2LineBytes;
  }

 private:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  struct Slot {
    uint64_t line;
    uint32_t prev, next, owner;
    bool dirty;
  };
  void unlink(uint32_t s) {
    Slot& x = slots_[s];
    if (x.prev != kNone) slots_[x.prev].next = x.next; else head_ = x.next;
    if (x.next != kNone) slots_[x.next].prev = x.prev; else tail_ = x.prev;
    x.prev = x.next = kNone;
  }
  void push_front(uint32_t s) {
    slots_[s].prev = kNone;
    slots_[s].next = head_;
    if (head_ != kNone) slots_[head_].prev = s;
    head_ = s;
    if (tail_ == kNone) tail_ = s;
  }
  uint64_t capacity_;
  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, uint32_t> index_;
  uint32_t head_ = kNone, tail_ = kNone;
};

// Lines each core replays per turn of the round-robin: a core's long contiguous runs and another's
// single lines then advance at the same rate.
inline constexpr uint32_t kReplayLinesPerTurn = 16;

// Replays the traces of one wave's cores (which ran together) into `cache`, round-robin, and empties
// them; `first` is the index of cores[0] in the launch's per-core counters (grown to hold them).
inline void replay_wave(L2Cache& cache, const std::vector<Core*>& cores, size_t first, std::vector<uint64_t>& hbm_read,
                        std::vector<uint64_t>& hbm_write) {
  hbm_read.resize(first + cores.size(), 0);
  hbm_write.resize(first + cores.size(), 0);
  struct Cursor {
    size_t run = 0;
    uint32_t line = 0;  // offset inside the run
  };
  std::vector<Cursor> at(cores.size());
  for (bool any = true; any;) {
    any = false;
    for (size_t i = 0; i < cores.size(); ++i) {
      const std::vector<GmRun>& trace = cores[i]->gm_trace;
      Cursor& cur = at[i];
      for (uint32_t n = 0; n < kReplayLinesPerTurn && cur.run < trace.size(); ++n) {
        const GmRun& run = trace[cur.run];
        cache.access(run.first_line + cur.line, run.write, uint32_t(first + i), hbm_read, hbm_write);
        if (++cur.line == run.lines) {
          ++cur.run;
          cur.line = 0;
        }
      }
      any = any || cur.run < trace.size();
    }
  }
  for (Core* c : cores) std::vector<GmRun>().swap(c->gm_trace);
}

}  // namespace dj_twin
