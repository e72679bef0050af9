// Named launch arguments of dg_sf_layout (host/sf_layout.cpp); host/sf_layout.py reads this
// declaration (deepjit.descriptors) and fills every field by name.
#pragma once

#include <cstdint>

namespace dg {

struct SfLayoutArgs {
    int64_t mode;                  // 0: FP32 copy, 1: pack UE8M0 exponent bytes, 2: unpack them
    int64_t batch, mn, sk;         // output rows [batch, mn]; K values (scale blocks) per row
    int64_t words;                 // packed words per row (pack: output, unpack: input)
    int64_t gran;                  // output row i reads input row i / gran
    int64_t in_b, in_mn, in_k;     // input strides, in elements
    int64_t out_b, out_mn, out_k;  // output strides, in elements
    int64_t per_word;              // bytes of a packed word: 4 (int32) or 2 (int16)
};

}  // namespace dg
