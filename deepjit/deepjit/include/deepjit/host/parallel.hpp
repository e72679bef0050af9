// Thread partitioning for host kernels: OpenMP with an explicit thread count passed by the caller
// (libraries map set_num_sms / num_sms onto it), and balanced 1-D splits of a work range.
#pragma once

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace dj {

// [begin, end) of part `part` out of `parts` over `n` items, sizes differing by at most one.
struct Range {
    int64_t begin, end;
};
inline Range split_range(int64_t n, int64_t parts, int64_t part) {
    const int64_t base = n / parts, rem = n % parts;
    const int64_t begin = part * base + std::min(part, rem);
    return {begin, begin + base + (part < rem ? 1 : 0)};
}

inline int thread_count(int64_t requested, int64_t work_items) {
    int64_t t = requested > 0 ? requested : 1;
    if (work_items < t) t = work_items > 0 ? work_items : 1;
    return static_cast<int>(t);
}

// Calls fn(item) for item in [0, n), statically chunked over `threads` threads.
template <typename F>
inline void parallel_for(int64_t n, int64_t threads, F&& fn) {
    const int t = thread_count(threads, n);
#ifdef _OPENMP
    if (t > 1) {
#pragma omp parallel for num_threads(t) schedule(static)
        for (int64_t i = 0; i < n; ++i) fn(i);
        return;
    }
#endif
    for (int64_t i = 0; i < n; ++i) fn(i);
}

// Like parallel_for but hands out items dynamically, for uneven work per item.
template <typename F>
inline void parallel_for_dynamic(int64_t n, int64_t threads, F&& fn) {
    const int t = thread_count(threads, n);
#ifdef _OPENMP
    if (t > 1) {
#pragma omp parallel for num_threads(t) schedule(dynamic, 1)
        for (int64_t i = 0; i < n; ++i) fn(i);
        return;
    }
#endif
    for (int64_t i = 0; i < n; ++i) fn(i);
}

// Calls fn(thread_index, num_threads) once per thread.
template <typename F>
inline void parallel_threads(int64_t threads, F&& fn) {
    const int t = thread_count(threads, threads);
#ifdef _OPENMP
    if (t > 1) {
#pragma omp parallel num_threads(t)
        fn(static_cast<int64_t>(omp_get_thread_num()), static_cast<int64_t>(t));
        return;
    }
#endif
    fn(0, 1);
}

}  // namespace dj
