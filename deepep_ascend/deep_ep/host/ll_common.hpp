// Shared pieces of the low-latency kernels (ll_dispatch.cpp, ll_combine.cpp): the control block
// of a low-latency area and the calls into deepjit.symm's notify / bounded wait.
//
// Each rank's window holds two low-latency areas (alternate operations use alternate areas, so a
// rank one operation ahead never writes where a slower peer still reads). An area starts with a
// control block written by the peers:
//   sig[R][16] int64      each source's signature row: kSigWords below (argument summary + error)
//   counts[R][R][E_local] int32   each source's token counts per (destination, local expert)
// and then the operation's data (offsets passed by the caller).
#pragma once

#include <deep_ep/host/common.hpp>

#include <vector>

namespace ep_ll {

constexpr int64_t kSigWords = 16;
// Signature words: [0] operation, [1..7] arguments every rank must agree on, [8] error code
// (0 none, 1 expert id out of range, 2 expert twice in a token, 3 the caller's checks failed:
// message in the transport's message block), [9..11] token, slot, value of the bad id.
constexpr int kSigErr = 8;
// deepjit.symm's wait status codes (status[0]).
constexpr int64_t kTimedOut = 1, kAborted = 2, kPeerDied = 3;

using NotifyFn = void (*)(const uint64_t*, int64_t, int64_t);
using WaitFn = void (*)(const uint64_t*, int64_t, int64_t, const int64_t*, const int32_t*, int64_t, int64_t,
                        int64_t*);

struct Signals {
    NotifyFn notify;
    WaitFn wait;
    const int64_t* abort_word;
    const int32_t* pidfds;
    int64_t num_ranks;
    int64_t timeout_ns;
    int64_t* status;  // [code, index, seen] as symm_wait writes it
    int32_t* mask;    // shrink mode: masked[r] != 0 skips rank r; a peer that times out or dies is masked

    bool live(int64_t r) const { return mask == nullptr || mask[r] == 0; }

    // Publish `value` on a lane, then wait for every live peer's; false on timeout / abort / dead
    // peer (in shrink mode those peers are masked instead and the wait goes on without them).
    // A peer that gave up on this operation (timed out) may have posted before aborting: the abort
    // word is checked after the wait too, so every live rank fails the operation.
    bool round(const int64_t* notify_lane, const int64_t* wait_lane, int64_t value) const {
        notify(reinterpret_cast<const uint64_t*>(notify_lane), num_ranks, value);
        while (true) {
            std::vector<uint64_t> lanes;
            std::vector<int32_t> fds;
            std::vector<int64_t> peer_of;
            for (int64_t r = 0; r < num_ranks; ++r) {
                if (!live(r)) continue;
                lanes.push_back(static_cast<uint64_t>(wait_lane[r]));
                fds.push_back(pidfds[r]);
                peer_of.push_back(r);
            }
            wait(lanes.data(), static_cast<int64_t>(lanes.size()), value, abort_word, fds.data(),
                 static_cast<int64_t>(fds.size()), timeout_ns, status);
            if (mask != nullptr && (status[0] == kTimedOut || status[0] == kPeerDied)) {
                mask[peer_of[status[1]]] = 1;
                continue;
            }
            if (status[0] == kTimedOut || status[0] == kPeerDied) status[1] = peer_of[status[1]];
            break;
        }
        const int64_t aborted = __atomic_load_n(abort_word, __ATOMIC_ACQUIRE);
        if (status[0] == 0 && aborted != 0) { status[0] = kAborted; status[1] = 0; status[2] = aborted; }
        return status[0] == 0;
    }
};

DJ_INLINE int64_t* sig_row(uint8_t* area, int64_t src) { return reinterpret_cast<int64_t*>(area) + src * kSigWords; }

DJ_INLINE int32_t* count_block(uint8_t* area, int64_t R) {
    return reinterpret_cast<int32_t*>(area + R * kSigWords * 8);
}

// Writes this rank's signature row into every peer's area.
DJ_INLINE void post_signature(const int64_t* peer_area, int64_t R, int64_t rank, const int64_t* sig) {
    for (int64_t p = 0; p < R; ++p) std::memcpy(sig_row(reinterpret_cast<uint8_t*>(peer_area[p]), rank), sig, kSigWords * 8);
}

// After the round: copy every source's row out (for the caller's messages; masked ranks' rows
// are zeroed); true when all live rows agree on words [0, kSigErr) and report no error.
DJ_INLINE bool signatures_agree(uint8_t* own_area, int64_t R, int64_t rank, int64_t* sigs_out, const Signals& sg) {
    bool ok = true;
    std::memcpy(sigs_out, own_area, R * kSigWords * 8);
    for (int64_t s = 0; s < R; ++s) {
        int64_t* row = sigs_out + s * kSigWords;
        if (!sg.live(s)) {
            std::memcpy(row, sigs_out + rank * kSigWords, kSigWords * 8);
            continue;
        }
        ok &= row[kSigErr] == 0;
        for (int w = 0; w < kSigErr; ++w) ok &= row[w] == sigs_out[w];
    }
    return ok;
}

}  // namespace ep_ll
