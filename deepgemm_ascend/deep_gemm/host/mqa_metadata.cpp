// Paged MQA logits schedule (get_paged_mqa_logits_metadata): the (first query row, 256-token KV split)
// where each of num_sms workers starts, cutting the total work evenly (remainder to the first
// workers). A request is next_n rows of one batch entry, or a maximal run of equal varlen indices
// (context_lens [T, 1] with indices [T]); 1-D context_lens count one row per entry. It weighs
// ceil(context_len / 256) * rows, context_len being its last row's. Entry num_sms is (rows, 0).
#include <deepjit/host/kernel.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {
constexpr int64_t kSplitKV = 256;
struct Run { int64_t first, rows, weight_end; };
}  // namespace

DJ_KERNEL(dg_paged_mqa_metadata, "ptr,ptr,i64,i64,ptr,i64")
void dg_paged_mqa_metadata(int32_t* out, const int32_t* lens, int64_t rows, int64_t next_n, const int32_t* indices,
                           int64_t num_sms) {
    std::vector<Run> runs;
    int64_t total = 0;
    auto add = [&](int64_t first, int64_t n, int32_t len) {
        total += (std::max<int64_t>(len, 0) + kSplitKV - 1) / kSplitKV * n;
        runs.push_back({first, n, total});
    };
    if (indices != nullptr) {
        for (int64_t t = 0; t < rows;) {
            int64_t end = t + 1;
            while (end < rows && indices[end] == indices[t]) ++end;
            add(t, end - t, lens[end - 1]);
            t = end;
        }
    } else {
        for (int64_t first = 0; first < rows; first += next_n) add(first, next_n, lens[first + next_n - 1]);
    }
    const int64_t base = total / num_sms, extra = total % num_sms;
    size_t r = 0;
    for (int64_t w = 0; w <= num_sms; ++w) {
        const int64_t work = w * base + std::min(w, extra);
        while (r < runs.size() && runs[r].weight_end <= work) ++r;
        if (r < runs.size()) {
            const int64_t before = r ? runs[r - 1].weight_end : 0;
            out[2 * w] = static_cast<int32_t>(runs[r].first);
            out[2 * w + 1] = static_cast<int32_t>((work - before) / runs[r].rows);
        } else {
            out[2 * w] = static_cast<int32_t>(rows);
            out[2 * w + 1] = 0;
        }
    }
}
