// EngramBuffer's fetch: out[r] = row (ids[r] % rows_per_peer) of peer ids[r] / rows_per_peer, whole rows of
// row_bytes copied (any dtype). peers holds each peer's table address (its shard in the symmetric window, or
// its slice of the all-gathered table); ids are checked in range by the caller.
#include <deep_ep/host/common.hpp>

DJ_KERNEL(ep_engram_gather, "ptr,ptr,ptr,i64,i64,i64,i64")
void ep_engram_gather(uint8_t* out, const int64_t* peers, const int32_t* ids, int64_t R, int64_t rows_per_peer,
                      int64_t row_bytes, int64_t threads) {
    dj::parallel_for(R, threads, [&](int64_t r) {
        const int64_t id = ids[r];
        const auto* table = reinterpret_cast<const uint8_t*>(peers[id / rows_per_peer]);
        std::memcpy(out + r * row_bytes, table + (id % rows_per_peer) * row_bytes, row_bytes);
    });
}
