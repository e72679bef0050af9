// Low-latency dispatch in one call (V1 ``low_latency_dispatch`` over shared memory): routing plan
// and id checks, the handshake round (signature + count rows), the FP8 cast fused into the send,
// direct writes into the destinations' areas, the arrival round and the receive-side packing.
//
// phase 1 = plan, handshake, send; phase 2 = wait for the data and pack it (hook mode splits them).
//
// A destination's area holds its received rows compacted: local expert le's rows from source s
// start at cbase[le] + begin_s[le] (experts back to back, sources in rank order within one), each
// row [x image row][scale bytes] plus an int32 info word t * K + k (source token and top-k slot).
// Packing copies them to recv_x[le, begin_s[le] + j] (the packed [E_local, R * M, H] layout).
//
// recv_sf is [E_local, packs, R * M] (the caller sees a transposed view). Further outputs:
// src_info[le, row] = source token (-1 past the count),
// layout_range[le, s] = begin << 32 | count, recv_count[le], stats[le] += count (optional),
// row_tk[le, row] = t * K + k (combine sends row back to that slot of its source), and on the
// sending side send_row[t, k] = the packed row the copy landed in at its destination (-1 if none).
//
// status: [0..2] the symm wait status, [3] 0 done, 1 handshake wait failed, 2 signatures
// disagree or a rank reported an error (sigs_out holds every row), 3 data wait failed.
#include <deep_ep/host/fp8_row.hpp>
#include <deep_ep/host/ll_common.hpp>

DJ_KERNEL(ep_ll_dispatch,
          "ptr,i64,i64,i64,ptr,i64,i64,i64,i64,i64,i64,i64,i64,ptr,i64,i64,i64,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,"
          "ptr,ptr,i64,i64,ptr,i64,ptr,ptr,ptr,ptr,ptr,ptr,ptr,ptr,i64")
void ep_ll_dispatch(const uint16_t* x, int64_t x_stride, int64_t T, int64_t H, const int64_t* topk_idx, int64_t K,
                    int64_t R, int64_t E_local, int64_t M, int64_t rank, int64_t fp8, int64_t round_scale,
                    int64_t ue8m0, const int64_t* peer_area, int64_t x_off, int64_t sf_off, int64_t info_off,
                    int64_t* sig, int64_t* sigs_out, const void* notify_fn, const void* wait_fn,
                    const int64_t* abort_word, const int32_t* pidfds, const int64_t* post_notify,
                    const int64_t* post_wait, const int64_t* data_notify, const int64_t* data_wait,
                    int64_t timeout_ns, int64_t seq, int64_t* status, int64_t phase, uint8_t* recv_x,
                    uint32_t* recv_sf, int32_t* src_info, int64_t* layout_range, int32_t* recv_count, int32_t* stats,
                    int32_t* row_tk, int32_t* send_row, int64_t threads) {
    using namespace ep_ll;
    const Signals signals{reinterpret_cast<NotifyFn>(const_cast<void*>(notify_fn)),
                          reinterpret_cast<WaitFn>(const_cast<void*>(wait_fn)), abort_word, pidfds, R, timeout_ns,
                          status};
    const int64_t blocks = H / 128, RM = R * M;
    const int64_t xb = fp8 ? H : 2 * H;
    const int64_t sfb = !fp8 ? 0 : ue8m0 ? (blocks + 3) / 4 * 4 : blocks * 4;
    uint8_t* own = reinterpret_cast<uint8_t*>(peer_area[rank]);
    status[3] = 0;

    if (phase & 1) {
        // Plan: tokens per (destination, local expert) and each copy's index among them.
        std::vector<int32_t> cnt(R * E_local, 0), within(T * K, -1);
        for (int64_t t = 0; t < T && sig[kSigErr] == 0; ++t) {
            const int64_t* row = topk_idx + t * K;
            for (int64_t k = 0; k < K; ++k) {
                const int64_t e = row[k];
                if (e == -1) continue;
                int64_t code = (e < -1 || e >= R * E_local) ? 1 : 0;
                for (int64_t j = 0; j < k && code == 0; ++j) code = row[j] == e ? 2 : 0;
                if (code != 0) {
                    sig[kSigErr] = code; sig[kSigErr + 1] = t; sig[kSigErr + 2] = k; sig[kSigErr + 3] = e;
                    break;
                }
                within[t * K + k] = cnt[e]++;  // e = d * E_local + le indexes cnt[d][le]
            }
        }
        // Handshake: count rows first, then the signature, then the lane.
        for (int64_t p = 0; p < R; ++p)
            std::memcpy(count_block(reinterpret_cast<uint8_t*>(peer_area[p]), R) + rank * R * E_local, cnt.data(),
                        R * E_local * 4);
        post_signature(peer_area, R, rank, sig);
        if (!signals.round(post_notify, post_wait, seq)) { status[3] = 1; return; }
        if (!signatures_agree(own, R, sigs_out)) { status[3] = 2; return; }

        // Where this rank's copies land in each destination: compacted row and packed row bases.
        const int32_t* all = count_block(own, R);  // [source][destination][le]
        std::vector<int64_t> compact(R * E_local), packed(R * E_local);
        for (int64_t d = 0; d < R; ++d) {
            int64_t base = 0;
            for (int64_t le = 0; le < E_local; ++le) {
                int64_t before = 0, total = 0;
                for (int64_t s = 0; s < R; ++s) {
                    const int64_t c = all[(s * R + d) * E_local + le];
                    if (s < rank) before += c;
                    total += c;
                }
                compact[d * E_local + le] = base + before;
                packed[d * E_local + le] = le * RM + before;
                base += total;
            }
        }
        dj::parallel_for(T, threads, [&](int64_t t) {
            thread_local std::vector<uint8_t> q;
            const uint8_t* src = reinterpret_cast<const uint8_t*>(x + t * x_stride);
            uint8_t sf[4 * 64 * 4];  // scale bytes of one row (H <= 32768)
            bool cast = false;
            for (int64_t k = 0; k < K; ++k) {
                const int64_t e = topk_idx[t * K + k];
                if (e < 0) { send_row[t * K + k] = -1; continue; }
                if (fp8 && !cast) {
                    q.resize(H);
                    for (int64_t b = 0; b < blocks; ++b) {
                        const float s = ep::cast_block_fp8(x + t * x_stride + b * 128, q.data() + b * 128,
                                                           round_scale != 0);
                        if (ue8m0) sf[b] = static_cast<uint8_t>((dj::f32_bits(s) >> 23) & 0xFF);
                        else std::memcpy(sf + 4 * b, &s, 4);
                    }
                    for (int64_t b = ue8m0 ? blocks : sfb; b < sfb; ++b) sf[b] = 0;
                    src = q.data();
                    cast = true;
                }
                const int64_t d = e / E_local, slot = d * E_local + e % E_local, w = within[t * K + k];
                uint8_t* area = reinterpret_cast<uint8_t*>(peer_area[d]);
                const int64_t row = compact[slot] + w;
                ep::copy_row(area + x_off + row * xb, src, xb);
                if (sfb) std::memcpy(area + sf_off + row * sfb, sf, sfb);
                reinterpret_cast<int32_t*>(area + info_off)[row] = static_cast<int32_t>(t * K + k);
                send_row[t * K + k] = static_cast<int32_t>(packed[slot] + w);
            }
        });
        ep::store_fence();
        signals.notify(reinterpret_cast<const uint64_t*>(data_notify), R, seq);
    }

    if (phase & 2) {
        signals.wait(reinterpret_cast<const uint64_t*>(data_wait), R, seq, abort_word, pidfds, R, timeout_ns, status);
        if (status[0] != 0) { status[3] = 3; return; }
        const int32_t* all = count_block(own, R);
        std::vector<int64_t> cbase(E_local + 1, 0);
        for (int64_t le = 0; le < E_local; ++le) {
            int64_t total = 0;
            for (int64_t s = 0; s < R; ++s) {
                const int64_t c = all[(s * R + rank) * E_local + le];
                layout_range[le * R + s] = (total << 32) | c;
                total += c;
            }
            recv_count[le] = static_cast<int32_t>(total);
            if (stats != nullptr) stats[le] += static_cast<int32_t>(total);
            cbase[le + 1] = cbase[le] + total;
        }
        const int64_t N = cbase[E_local];
        std::vector<int32_t> expert_of(N);
        for (int64_t le = 0; le < E_local; ++le)
            for (int64_t i = cbase[le]; i < cbase[le + 1]; ++i) expert_of[i] = static_cast<int32_t>(le);
        const int32_t* info = reinterpret_cast<const int32_t*>(own + info_off);
        dj::parallel_for(N, threads, [&](int64_t i) {
            const int64_t le = expert_of[i], out = le * RM + (i - cbase[le]);
            ep::copy_row(recv_x + out * xb, own + x_off + i * xb, xb);
            // Scales are stored transposed, [le][pack][row] (token dimension contiguous, as upstream).
            const uint32_t* packs = reinterpret_cast<const uint32_t*>(own + sf_off + i * sfb);
            for (int64_t p = 0; p < sfb / 4; ++p) recv_sf[(le * (sfb / 4) + p) * RM + (out - le * RM)] = packs[p];
            row_tk[out] = info[i];
            src_info[out] = info[i] / static_cast<int32_t>(K);
        });
        for (int64_t le = 0; le < E_local; ++le)
            for (int64_t j = cbase[le + 1] - cbase[le]; j < RM; ++j) src_info[le * RM + j] = -1;
        ep::store_fence();
    }
}
