// per_block_cast_lossless: packed E2M1 data with power-of-two block scales (exponent e_in) to
// E4M3 with larger blocks (exponent e_out, computed by the caller): out = e4m3(v * 2^(e_in - e_out)),
// the factor built from its exponent bits exactly as the reference builds it (int32 arithmetic).
#include <tile_kernels/host/quant.hpp>

DJ_KERNEL(tk_lossless, "ptr,ptr,ptr,ptr,i64,i64,i64,i64,i64,i64,i32,i64,i64,i64,i64")
void tk_lossless(uint8_t* out, const uint8_t* q, const void* sf, const int32_t* e_out, int64_t M, int64_t K,
                 int64_t IBM, int64_t IBK, int64_t OBM, int64_t OBK, int32_t packed, int64_t sm, int64_t sk,
                 int64_t kb_out, int64_t threads) {
    dj::parallel_for(M, threads, [&](int64_t i) {
        const uint8_t* src = q + i * (K / 2);
        uint8_t* dst = out + i * K;
        const int32_t* eo = e_out + (i / OBM) * kb_out;
        for (int64_t j0 = 0; j0 < K; j0 += IBK) {
            const int64_t j1 = std::min(K, j0 + IBK);
            const int32_t e_in = static_cast<int32_t>((dj::f32_bits(tk::load_sf(sf, packed != 0, sm, sk, i / IBM, j0 / IBK)) >> 23) & 0xFF);
            const float f = dj::bits_f32(static_cast<uint32_t>(e_in - eo[j0 / OBK] + 127) << 23);
            int64_t j = j0;
#ifdef DJ_HAVE_AVX512
            for (; j + 16 <= j1; j += 16)
                tk::store_e4m3x16(dst + j, _mm512_mul_ps(tk::e2m1x16_to_f32(src + j / 2), _mm512_set1_ps(f)));
#endif
            for (; j < j1; ++j)
                dst[j] = dj::f32_to_e4m3(dj::e2m1_to_f32((src[j / 2] >> (4 * (j & 1))) & 0xF) * f);
        }
    });
}
