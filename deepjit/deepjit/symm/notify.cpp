// Publish `value` into a list of signal words (typically one slot in every peer's header) and
// wake whoever sleeps on them.
#include <deepjit/host/kernel.hpp>
#include <symm/signals.hpp>

DJ_KERNEL(symm_notify, "ptr,i64,i64")
void symm_notify(const uint64_t* addresses, int64_t count, int64_t value) {
    for (int64_t i = 0; i < count; ++i)
        dj_symm::store_release(reinterpret_cast<int64_t*>(addresses[i]), value);
    for (int64_t i = 0; i < count; ++i) dj_symm::futex_wake_all(reinterpret_cast<int64_t*>(addresses[i]));
}
