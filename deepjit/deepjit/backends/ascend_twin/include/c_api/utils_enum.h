// c_api/utils_enum.h — the C API's L2 cache-mode enums (asc-devkit include/c_api/utils/enum.h); the
// twin has no L2, so the modes are accepted and ignored.
#pragma once

#include <cstdint>

enum class asc_load_l2_cache_mode : uint8_t {
  NORMAL_FIRST_VICTIM = 0, NORMAL_LAST_VICTIM = 1, NORMAL_PERSISTENT = 2, NOTALLOC_KEEP = 4, NOTALLOC_CLEAN = 5,
  NOTALLOC_DROP = 6
};
enum class asc_store_l2_cache_mode : uint8_t {
  NORMAL_FIRST_VICTIM = 0, NORMAL_LAST_VICTIM = 1, NORMAL_PERSISTENT = 2, NOTALLOC_CLEAN = 4
};
