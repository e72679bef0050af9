// Low-latency combine in one call (V1 ``low_latency_combine`` over shared memory): every received
// row that came from a peer goes back to that source's area, at row t * K + k (its token and top-k
// slot); one round (signature + arrival) then lets each rank reduce its own tokens:
//   out[t] = bf16(sum over valid k, in slot order, of weights[t, k] * row(t, k))   (FP32, from 0)
// where row(t, k) is the received copy, or, for experts of this rank, the input row itself
// (send_row[t, k] from the dispatch), which therefore never travels.
//
// logfmt: every row, this rank's own included (upstream encodes every message), is written in the
// LogFMT-10 layout of logfmt.hpp (only its data bytes are copied) and decoded while reducing:
//   out[t] = bf16(sum over valid k, in slot order, of weights[t, k] * decoded(t, k))
//
// mask (shrink mode): as in ll_dispatch.cpp; slots whose expert lives on a masked rank add nothing.
//
// status: as ll_dispatch.cpp ([3]: 3 wait failed, 2 signatures disagree / a rank reported an error).
#include <deep_ep/host/ll_args.hpp>
#include <deep_ep/host/ll_common.hpp>
#include <deep_ep/host/logfmt.hpp>

DJ_KERNEL(ep_ll_combine, "ptr,i64")
void ep_ll_combine(const ep_ll::LlCombineArgs* args, int64_t threads) {
    const ep_ll::LlCombineArgs& a = *args;
    const auto x = a.x; const auto x_row_stride = a.x_row_stride; const auto topk_idx = a.topk_idx;
    const auto weights = a.weights; const auto T = a.T; const auto K = a.K; const auto R = a.R;
    const auto E_local = a.E_local; const auto M = a.M; const auto H = a.H; const auto rank = a.rank;
    const auto layout_range = a.layout_range; const auto row_tk = a.row_tk; const auto send_row = a.send_row;
    const auto peer_area = a.peer_area; const auto rows_off = a.rows_off; const auto sig = a.sig;
    const auto sigs_out = a.sigs_out; const auto notify_fn = a.notify_fn; const auto wait_fn = a.wait_fn;
    const auto abort_word = a.abort_word; const auto pidfds = a.pidfds; const auto data_notify = a.data_notify;
    const auto data_wait = a.data_wait; const auto timeout_ns = a.timeout_ns; const auto seq = a.seq;
    const auto status = a.status; const auto out = a.out; const auto mask = a.mask;
    using namespace ep_ll;
    const Signals signals{reinterpret_cast<NotifyFn>(const_cast<void*>(notify_fn)),
                          reinterpret_cast<WaitFn>(const_cast<void*>(wait_fn)), abort_word, pidfds, R, timeout_ns,
                          status, mask};
    const bool logfmt = a.logfmt != 0;
    const int64_t RM = R * M, row_bytes = logfmt ? ep_logfmt::row_bytes(H) : 2 * H;
    status[3] = 0;
    if (sig[kSigErr] == 0) {
        std::vector<int64_t> rows;  // packed row << 8 | source
        for (int64_t le = 0; le < E_local; ++le)
            for (int64_t s = 0; s < R; ++s) {
                if ((s == rank && !logfmt) || !signals.live(s)) continue;
                const int64_t begin = layout_range[le * R + s] >> 32, n = layout_range[le * R + s] & 0xFFFFFFFF;
                for (int64_t j = 0; j < n; ++j) rows.push_back((le * RM + begin + j) << 8 | s);
            }
        dj::parallel_for(static_cast<int64_t>(rows.size()), threads, [&](int64_t i) {
            const int64_t row = rows[i] >> 8, s = rows[i] & 0xFF;
            uint8_t* dst = reinterpret_cast<uint8_t*>(peer_area[s]) + rows_off + row_tk[row] * row_bytes;
            if (logfmt) {
                alignas(64) uint8_t encoded[ep_logfmt::kBlockBytes * 64 + 4 * 64];
                if (row_bytes <= static_cast<int64_t>(sizeof(encoded))) {   // encode here, one copy out
                    ep::copy_row(dst, encoded, ep_logfmt::encode_row(encoded, x + row * x_row_stride, H));
                } else {
                    ep_logfmt::encode_row(dst, x + row * x_row_stride, H);
                }
                return;
            }
            ep::copy_row(dst, reinterpret_cast<const uint8_t*>(x + row * x_row_stride), row_bytes);
        });
        ep::store_fence();
    }
    post_signature(peer_area, R, rank, sig);
    if (!signals.round(data_notify, data_wait, seq)) { status[3] = 3; return; }
    uint8_t* own = reinterpret_cast<uint8_t*>(peer_area[rank]);
    if (!signatures_agree(own, R, rank, sigs_out, signals)) { status[3] = 2; return; }

    if (logfmt) {
        dj::parallel_for(T, threads, [&](int64_t t) {
            std::vector<float> acc(H, 0.0f);
            for (int64_t k = 0; k < K; ++k) {
                const int64_t e = topk_idx[t * K + k];
                if (e < 0 || !signals.live(e / E_local)) continue;
                ep_logfmt::accumulate_row(acc.data(), own + rows_off + (t * K + k) * row_bytes, H,
                                          weights[t * K + k]);
            }
            for (int64_t h = 0; h < H; ++h) out[t * H + h] = dj::f32_to_bf16(acc[h]);
        });
        return;
    }
    dj::parallel_for(T, threads, [&](int64_t t) {
        const uint16_t* src[64];
        float w[64];
        int64_t n = 0;
        for (int64_t k = 0; k < K; ++k) {
            const int64_t e = topk_idx[t * K + k];
            if (e < 0 || !signals.live(e / E_local)) continue;  // masked ranks contribute nothing
            src[n] = e / E_local == rank ? x + send_row[t * K + k] * x_row_stride
                                         : reinterpret_cast<const uint16_t*>(own + rows_off + (t * K + k) * row_bytes);
            w[n++] = weights[t * K + k];
        }
        ep::reduce_rows(out + t * H, H, src, w, n, nullptr, nullptr, false);
    });
}
