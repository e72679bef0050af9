// flash_mla/ascend/nz_rows.h — 16-bit rows into an NZ tile in UB by block-strided register stores, shared by
// sparse_mla.asc and dense_attn.asc: the tile then goes into the cube's L1 as one UB -> L1 copy of whole
// 16-column blocks (a copy of 32-byte rows runs at 3/4 of their width a cycle: TileLang 0.1.15's raw N-split
// fit). Element (t, d) of a tile of `rows` rows sits at ((d / 16) * rows + t) * 16 + d % 16.
#pragma once

#include <c_api/asc_simd.h>

namespace fmla_nz {

// One register of 128 elements of row t from column d (a multiple of 16), masked.
template <class V>
__simd_callee__ inline void store(__ubuf__ uint16_t* nz, uint32_t rows, uint32_t t, uint32_t d, V v, vector_bool m) {
  asc_storealign(nz + ((d / 16) * rows + t) * 16, v, uint16_t(rows), uint16_t(0), m);
}

// Column blocks [b0, b0 + nb) of `rows` rows (row t at src + t * ld elements) into `nz` (block b - b0). A row's
// last load may read past those blocks (into its next columns, or past the last row, still in UB); only they
// are stored.
__simd_vf__ inline void rows_vf(__ubuf__ uint16_t* src, uint32_t ld, __ubuf__ uint16_t* nz, uint32_t rows, uint32_t b0,
                                uint32_t nb) {
  for (uint32_t t = 0; t < rows; ++t)
    for (uint32_t c = 0; c < nb * 16; c += 128) {
      uint32_t n = nb * 16 - c < 128 ? nb * 16 - c : 128;
      vector_uint16_t v;
      asc_loadalign(v, src + t * ld + b0 * 16 + c);
      store(nz, rows, t, c, v, asc_update_mask_b16(n));
    }
}

}  // namespace fmla_nz
