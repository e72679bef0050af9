// Low-latency dispatch in one call (V1 ``low_latency_dispatch`` over shared memory): routing plan
// and id checks, staging of this rank's tokens (the FP8 cast fused in), one handshake round
// (signature + count rows), then every rank pulls the rows of its local experts straight from the
// sources' staging areas into its packed outputs. A token is written once by its source and its
// copies are read from there (in cache) by every destination: one pass over the packed output.
//
// phase 1 = plan, stage, handshake; phase 2 = pull (hook mode runs it in the hook).
//
// Each rank's area (see ll_common.hpp) holds, after the control block, its staging rows
// [M][x image row] and [M][scale bytes] and a route table: for each destination d, the entries
// t * K + k of the copies bound for d, grouped by local expert in token order (at d * route_cap).
// Received rows of local expert le from source s go to recv_x[le, begin_s[le] + j] (the packed
// [E_local, R * M, H] layout, sources in rank order).
//
// recv_sf is [E_local, packs, R * M] (the caller sees a transposed view). Further outputs:
// src_info[le, row] = source token (-1 past the count),
// layout_range[le, s] = begin << 32 | count, recv_count[le], stats[le] += count (optional),
// row_tk[le, row] = t * K + k (combine sends row back to that slot of its source), and on the
// sending side send_row[t, k] = the packed row the copy lands in at its destination (-1 if none).
//
// mask (shrink mode, optional): ranks with mask[r] != 0 are skipped (no copies to or from them); a
// peer that times out or dies during the handshake is masked and the operation goes on without it.
//
// status: [0..2] the symm wait status, [3] 0 done, 1 handshake wait failed, 2 signatures
// disagree or a rank reported an error (sigs_out holds every row).
#include <deep_ep/host/fp8_row.hpp>
#include <deep_ep/host/ll_args.hpp>
#include <deep_ep/host/ll_common.hpp>

DJ_KERNEL(ep_ll_dispatch, "ptr,i64")
void ep_ll_dispatch(const ep_ll::LlDispatchArgs* args, int64_t threads) {
    const ep_ll::LlDispatchArgs& a = *args;
    const auto x = a.x; const auto x_stride = a.x_stride; const auto T = a.T; const auto H = a.H;
    const auto topk_idx = a.topk_idx; const auto K = a.K; const auto R = a.R; const auto E_local = a.E_local;
    const auto M = a.M; const auto rank = a.rank; const auto fp8 = a.fp8; const auto round_scale = a.round_scale;
    const auto ue8m0 = a.ue8m0; const auto peer_area = a.peer_area; const auto x_off = a.x_off;
    const auto sf_off = a.sf_off; const auto route_off = a.route_off; const auto route_cap = a.route_cap;
    const auto sig = a.sig; const auto sigs_out = a.sigs_out; const auto notify_fn = a.notify_fn;
    const auto wait_fn = a.wait_fn; const auto abort_word = a.abort_word; const auto pidfds = a.pidfds;
    const auto post_notify = a.post_notify; const auto post_wait = a.post_wait; const auto timeout_ns = a.timeout_ns;
    const auto seq = a.seq; const auto status = a.status; const auto phase = a.phase; const auto recv_x = a.recv_x;
    const auto recv_sf = a.recv_sf; const auto src_info = a.src_info; const auto layout_range = a.layout_range;
    const auto recv_count = a.recv_count; const auto stats = a.stats; const auto row_tk = a.row_tk;
    const auto send_row = a.send_row; const auto mask = a.mask;
    using namespace ep_ll;
    const Signals signals{reinterpret_cast<NotifyFn>(const_cast<void*>(notify_fn)),
                          reinterpret_cast<WaitFn>(const_cast<void*>(wait_fn)), abort_word, pidfds, R, timeout_ns,
                          status, mask};
    const int64_t blocks = H / 128, RM = R * M;
    const int64_t xb = fp8 ? H : 2 * H;
    const int64_t sfb = !fp8 ? 0 : ue8m0 ? (blocks + 3) / 4 * 4 : blocks * 4;
    uint8_t* own = reinterpret_cast<uint8_t*>(peer_area[rank]);
    // Copies from source s to destination d per local expert (none where either is masked).
    auto count = [&](int64_t s, int64_t d, int64_t le) -> int64_t {
        return signals.live(s) && signals.live(d) ? count_block(own, R)[(s * R + d) * E_local + le] : 0;
    };
    status[3] = 0;

    if (phase & 1) {
        // Plan: copies per (destination, local expert) and each copy's index among them.
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
        if (sig[kSigErr] == 0) {
            // Route table, then the staging rows (each token once, cast to FP8 here).
            std::vector<int64_t> first(R * E_local, 0);
            for (int64_t d = 0; d < R; ++d)
                for (int64_t le = 1; le < E_local; ++le)
                    first[d * E_local + le] = first[d * E_local + le - 1] + cnt[d * E_local + le - 1];
            int32_t* route = reinterpret_cast<int32_t*>(own + route_off);
            for (int64_t i = 0; i < T * K; ++i) {
                const int64_t e = topk_idx[i];
                if (e >= 0) route[(e / E_local) * route_cap + first[e] + within[i]] = static_cast<int32_t>(i);
            }
            dj::parallel_for(T, threads, [&](int64_t t) {
                bool used = false;
                for (int64_t k = 0; k < K; ++k) used |= topk_idx[t * K + k] >= 0;
                if (!used) return;
                uint8_t* dst = own + x_off + t * xb;
                if (!fp8) {
                    std::memcpy(dst, x + t * x_stride, xb);
                    return;
                }
                uint8_t* sf = own + sf_off + t * sfb;
                for (int64_t b = 0; b < blocks; ++b) {
                    const float s = ep::cast_block_fp8(x + t * x_stride + b * 128, dst + b * 128, round_scale != 0);
                    if (ue8m0) sf[b] = static_cast<uint8_t>((dj::f32_bits(s) >> 23) & 0xFF);
                    else std::memcpy(sf + 4 * b, &s, 4);
                }
                for (int64_t b = ue8m0 ? blocks : sfb; b < sfb; ++b) sf[b] = 0;
            });
        }
        // Handshake: count rows, then the signature, then the lane (its release store publishes
        // the staging rows too).
        for (int64_t p = 0; p < R; ++p)
            std::memcpy(count_block(reinterpret_cast<uint8_t*>(peer_area[p]), R) + rank * R * E_local, cnt.data(),
                        R * E_local * 4);
        post_signature(peer_area, R, rank, sig);
        if (!signals.round(post_notify, post_wait, seq)) { status[3] = 1; return; }
        if (!signatures_agree(own, R, rank, sigs_out, signals)) { status[3] = 2; return; }
        // The packed row each copy lands in at its destination (the combine reads local ones there).
        std::vector<int64_t> packed(R * E_local);
        for (int64_t d = 0; d < R; ++d)
            for (int64_t le = 0; le < E_local; ++le) {
                int64_t before = 0;
                for (int64_t s = 0; s < rank; ++s) before += count(s, d, le);
                packed[d * E_local + le] = le * RM + before;
            }
        for (int64_t i = 0; i < T * K; ++i) {
            const int64_t e = topk_idx[i];
            send_row[i] = e < 0 || !signals.live(e / E_local) ? -1 : static_cast<int32_t>(packed[e] + within[i]);
        }
    }

    if (phase & 2) {
        // Pull every source's rows for this rank's experts: [row] -> (source, staging token, entry).
        std::vector<int64_t> begin(E_local * R), route_first(R * E_local), total(E_local + 1, 0);
        for (int64_t s = 0; s < R; ++s) {
            int64_t r = 0;
            for (int64_t le = 0; le < E_local; ++le) {
                route_first[s * E_local + le] = r;
                r += count(s, rank, le);
            }
        }
        for (int64_t le = 0; le < E_local; ++le) {
            int64_t n = 0;
            for (int64_t s = 0; s < R; ++s) {
                const int64_t c = count(s, rank, le);
                begin[le * R + s] = n;
                layout_range[le * R + s] = (n << 32) | c;
                n += c;
            }
            recv_count[le] = static_cast<int32_t>(n);
            if (stats != nullptr) stats[le] += static_cast<int32_t>(n);
            total[le + 1] = total[le] + n;
        }
        std::vector<int32_t> owner(total[E_local] * 2);  // (le, source) of each received row
        for (int64_t le = 0, i = 0; le < E_local; ++le)
            for (int64_t s = 0; s < R; ++s)
                for (int64_t j = count(s, rank, le); j > 0; --j, ++i) {
                    owner[2 * i] = static_cast<int32_t>(le);
                    owner[2 * i + 1] = static_cast<int32_t>(s);
                }
        dj::parallel_for(total[E_local], threads, [&](int64_t i) {
            const int64_t le = owner[2 * i], s = owner[2 * i + 1];
            const int64_t j = i - total[le] - begin[le * R + s], out = le * RM + begin[le * R + s] + j;
            const uint8_t* src = reinterpret_cast<const uint8_t*>(peer_area[s]);
            const int32_t tk = reinterpret_cast<const int32_t*>(src + route_off)[rank * route_cap +
                                                                                 route_first[s * E_local + le] + j];
            const int64_t t = tk / K;
            ep::copy_row(recv_x + out * xb, src + x_off + t * xb, xb);
            // Scales are stored transposed, [le][pack][row] (token dimension contiguous, as upstream).
            const uint32_t* packs = reinterpret_cast<const uint32_t*>(src + sf_off + t * sfb);
            for (int64_t p = 0; p < sfb / 4; ++p) recv_sf[(le * (sfb / 4) + p) * RM + (out - le * RM)] = packs[p];
            row_tk[out] = tk;
            src_info[out] = static_cast<int32_t>(t);
        });
        for (int64_t le = 0; le < E_local; ++le)
            for (int64_t j = total[le + 1] - total[le]; j < RM; ++j) src_info[le * RM + j] = -1;
        ep::store_fence();
    }
}
