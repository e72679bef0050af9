// Dispatch routing plan of one rank (sequential; integer work only), with the argument checks
// that need the index values: ids in [-1, num_experts) and no expert twice in one token.
//
// dst_slot[t, d]  : slot of token t in this rank's block at rank d, or -1 (slots follow token order)
// send_count[d]   : tokens sent to rank d;   expert_count[d, e]: of those, tokens selecting local expert e
// within[t, k]    : index of token t among this rank's tokens for expert topk_idx[t, k] (or -1)
// exp_pos[t, k]   : index of (t, k) among this rank's (token, slot) pairs bound for the same rank
// err             : [code, token, slot, value]; code 1 = id out of range, 2 = duplicate id
#include <deep_ep/host/common.hpp>
#include <deep_ep/host/dispatch_args.hpp>

DJ_KERNEL(ep_dispatch_plan, "ptr")
void ep_dispatch_plan(const ep::DispatchPlanArgs* args) {
    const ep::DispatchPlanArgs a = *args;
    const int64_t* topk_idx = a.topk_idx;
    const int64_t T = a.T, K = a.K, R = a.R, E_local = a.E_local;
    int32_t *dst_slot = a.dst_slot, *send_count = a.send_count, *expert_count = a.expert_count, *within = a.within,
            *exp_pos = a.exp_pos;
    int64_t* err = a.err;
    const int64_t E = R * E_local;
    err[0] = 0;
    std::memset(send_count, 0, sizeof(int32_t) * R);
    std::memset(expert_count, 0, sizeof(int32_t) * R * E_local);
    int32_t* pair_count = new int32_t[R]();
    for (int64_t t = 0; t < T; ++t) {
        const int64_t* row = topk_idx + t * K;
        int32_t* slots = dst_slot + t * R;
        for (int64_t d = 0; d < R; ++d) slots[d] = -1;
        for (int64_t k = 0; k < K; ++k) {
            const int64_t e = row[k];
            within[t * K + k] = -1;
            exp_pos[t * K + k] = -1;
            if (e == -1) continue;
            if (e < -1 || e >= E) { err[0] = 1; err[1] = t; err[2] = k; err[3] = e; delete[] pair_count; return; }
            for (int64_t j = 0; j < k; ++j)
                if (row[j] == e) { err[0] = 2; err[1] = t; err[2] = k; err[3] = e; delete[] pair_count; return; }
            const int64_t d = e / E_local;
            if (slots[d] < 0) slots[d] = send_count[d]++;
            within[t * K + k] = expert_count[d * E_local + e % E_local]++;
            exp_pos[t * K + k] = pair_count[d]++;
        }
    }
    delete[] pair_count;
}
