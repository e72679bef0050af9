// Bounded wait until every watched signal word reaches `target`.
//
// The loop spins briefly, yields for up to 200 us, then sleeps on the word (a shared futex the
// notifier wakes), because ranks usually share few cores: a long waiter must not take CPU time
// from the peer it waits for, and a futex wake-up is immediate where timed naps were not.
// Sleeps last at most a millisecond, so about once a millisecond it checks the abort word of this
// rank's header (abort does not wake sleepers) and whether a peer process has exited (pidfds
// become readable when the process terminates, even before it is reaped).
#include <deepjit/host/kernel.hpp>
#include <symm/signals.hpp>

#include <immintrin.h>
#include <poll.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <vector>

namespace {

constexpr int64_t kYieldNs = 200000;  // yield this long before sleeping on the futex

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Index of the first peer whose process has exited, or -1.
int64_t first_dead_peer(const int32_t* pidfds, int64_t count) {
    std::vector<pollfd> fds;
    std::vector<int64_t> owner;
    for (int64_t i = 0; i < count; ++i) {
        if (pidfds[i] < 0) continue;
        fds.push_back({pidfds[i], POLLIN, 0});
        owner.push_back(i);
    }
    if (fds.empty() || poll(fds.data(), fds.size(), 0) <= 0) return -1;
    for (size_t j = 0; j < fds.size(); ++j)
        if (fds[j].revents) return owner[j];
    return -1;
}

}  // namespace

DJ_KERNEL(symm_wait, "ptr,i64,i64,ptr,ptr,i64,i64,ptr")
void symm_wait(const uint64_t* addresses, int64_t count, int64_t target, const int64_t* abort_word,
               const int32_t* pidfds, int64_t num_pidfds, int64_t timeout_ns, int64_t* status) {
    using namespace dj_symm;
    const int64_t start = now_ns();
    int64_t next_check = start + 1000000, polls = 0, i = 0;
    status[0] = kOk;
    while (i < count) {
        const int64_t seen = load_acquire(reinterpret_cast<const int64_t*>(addresses[i]));
        if (seen >= target) { ++i; continue; }
        ++polls;
        if (polls < 256) { _mm_pause(); continue; }
        const int64_t now = now_ns();
        if (now >= next_check) {
            next_check = now + 1000000;
            const int64_t aborted = load_acquire(abort_word);
            if (aborted != 0) { status[0] = kAborted; status[1] = i; status[2] = aborted; return; }
            const int64_t dead = first_dead_peer(pidfds, num_pidfds);
            if (dead >= 0) { status[0] = kPeerDied; status[1] = dead; status[2] = seen; return; }
            if (now - start >= timeout_ns) { status[0] = kTimeout; status[1] = i; status[2] = seen; return; }
        }
        if (now - start < kYieldNs) {
            sched_yield();  // short waits: stay runnable, the answer is usually microseconds away
        } else {
            futex_sleep(reinterpret_cast<const int64_t*>(addresses[i]), seen, std::min<int64_t>(next_check - now, 1000000));
        }
    }
}
