// Flag signalling inside a symmetric shared-memory window (see deepjit/symm/window.py).
//
// Every rank's segment starts with a header of 64-byte lines: line 0 holds the magic and the
// owner's pid, line 1 the abort word, then one line per signal slot. A signal is a monotonically
// increasing int64: a writer publishes with a release store after its data, a reader waits until
// the value reaches a target with acquire loads. Lines are separate so writers never share one.
#pragma once

#include <cstdint>

namespace dj_symm {

constexpr int64_t kLineBytes = 64;
constexpr int64_t kAbortLine = 1;
constexpr int64_t kFirstSignalLine = 2;

inline int64_t load_acquire(const int64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void store_release(int64_t* p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// Wait outcomes written to status[0]; status[1] names the slot or peer, status[2] the value seen.
enum WaitStatus : int64_t { kOk = 0, kTimeout = 1, kAborted = 2, kPeerDied = 3 };

}  // namespace dj_symm
