// Flag signalling inside a symmetric shared-memory window (see deepjit/symm/window.py).
//
// Every rank's segment starts with a header of 64-byte lines: line 0 holds the magic and the
// owner's pid, line 1 the abort word, then one line per signal slot. A signal is a monotonically
// increasing int64: a writer publishes with a release store after its data, a reader waits until
// the value reaches a target with acquire loads. Lines are separate so writers never share one.
//
// Waiters that have spun briefly sleep on the word's low 32 bits with a shared futex (the mapping
// is shared, so the kernel keys the futex by the underlying page); writers wake them after their
// store. Ranks usually outnumber or match the cores, so a sleeping waiter leaves its core to the
// rank it waits for instead of spinning or yielding on it.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdint>

namespace dj_symm {

constexpr int64_t kLineBytes = 64;
constexpr int64_t kAbortLine = 1;
constexpr int64_t kFirstSignalLine = 2;

inline int64_t load_acquire(const int64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void store_release(int64_t* p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// The low half of a little-endian int64 changes with every increment of the value.
inline uint32_t* futex_word(const int64_t* p) { return reinterpret_cast<uint32_t*>(const_cast<int64_t*>(p)); }

// Sleep while *p still holds `seen` (returns at once if it changed), at most `timeout_ns`.
inline void futex_sleep(const int64_t* p, int64_t seen, int64_t timeout_ns) {
    const timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
    syscall(SYS_futex, futex_word(p), FUTEX_WAIT, static_cast<uint32_t>(seen), &ts, nullptr, 0);
}

inline void futex_wake_all(const int64_t* p) {
    syscall(SYS_futex, futex_word(p), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Wait outcomes written to status[0]; status[1] names the slot or peer, status[2] the value seen.
enum WaitStatus : int64_t { kOk = 0, kTimeout = 1, kAborted = 2, kPeerDied = 3 };

}  // namespace dj_symm
