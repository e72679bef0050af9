// E5M6 (12-bit floats, 8 codes in 3 little-endian uint32 words, MSB first).
//   op 0, cast: one scale per row (amax clamped at 1e-4, max 65024); each scaled value becomes
//         the top 12 bits of its round-toward-zero half, rounded half-to-even on the 17 dropped
//         FP32 bits.
//   op 1, cast back: code << 4 read as a half, times the block scale, to FP32 or BF16.
#include <tile_kernels/host/quant.hpp>

namespace {

inline uint32_t half_bits_toward_zero(uint32_t bits) {
    const uint32_t sign = (bits >> 16) & 0x8000u, exp = (bits >> 23) & 0xFFu, mant = bits & 0x7FFFFFu;
    if (exp == 255) return sign | (mant == 0 ? 0x7C00u : 0x7FFFu);
    if (exp > 142) return sign | 0x7C00u;
    if (exp >= 113) return sign | ((exp - 112) << 10) | (mant >> 13);
    if (exp >= 103) return sign | ((mant | 0x800000u) >> (126 - exp));
    return sign;
}

inline uint32_t e5m6_code(float v) {
    const uint32_t bits = dj::f32_bits(v);
    const uint32_t code = half_bits_toward_zero(bits) >> 4;
    return (code + (((code & 1u) + (bits & 0x1FFFFu)) > 0x10000u ? 1u : 0u)) & 0xFFFu;
}

inline float half_to_f32(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0) {
        const float m = static_cast<float>(mant) * 0x1p-24f;  // subnormal (exact)
        return sign ? -m : m;
    }
    if (exp == 31) return dj::bits_f32(sign | 0x7F800000u | (mant << 13));
    return dj::bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace

DJ_KERNEL(tk_e5m6, "i32,ptr,ptr,ptr,i32,i64,i64,i64,i64,i32,i32,i64,i64,i64")
void tk_e5m6(int32_t op, void* out, void* sf, const void* x, int32_t dt, int64_t T, int64_t H, int64_t BM, int64_t BK,
             int32_t round_sf, int32_t packed, int64_t sm, int64_t sk, int64_t threads) {
    dj::parallel_for(T, threads, [&](int64_t t) {
        if (op == 0) {
            const char* row = static_cast<const char*>(x) + t * H * (dt == tk::kInBF16 ? 2 : 4);
            float amax = 0.0f;
            for (int64_t h = 0; h < H; ++h) amax = std::max(amax, std::fabs(tk::load1(row, dt, h)));
            const tk::Scale s = tk::block_scale(amax, 1e-4f, 65024.0f, round_sf != 0);
            tk::store_sf(sf, packed != 0, sm, sk, t, 0, s.sf);
            uint32_t* words = static_cast<uint32_t*>(out) + t * (H / 8) * 3;
            for (int64_t g = 0; g < H / 8; ++g) {
                uint32_t c[8];
                for (int i = 0; i < 8; ++i) c[i] = e5m6_code(tk::load1(row, dt, g * 8 + i) * s.inv);
                words[3 * g] = c[0] << 20 | c[1] << 8 | c[2] >> 4;
                words[3 * g + 1] = (c[2] & 0xFu) << 28 | c[3] << 16 | c[4] << 4 | c[5] >> 8;
                words[3 * g + 2] = (c[5] & 0xFFu) << 24 | c[6] << 12 | c[7];
            }
        } else {
            const uint32_t* words = static_cast<const uint32_t*>(x) + t * (H / 8) * 3;
            for (int64_t g = 0; g < H / 8; ++g) {
                const uint32_t w0 = words[3 * g], w1 = words[3 * g + 1], w2 = words[3 * g + 2];
                const uint32_t c[8] = {w0 >> 20, (w0 >> 8) & 0xFFFu, ((w0 << 4) | (w1 >> 28)) & 0xFFFu, (w1 >> 16) & 0xFFFu,
                                       (w1 >> 4) & 0xFFFu, ((w1 << 8) | (w2 >> 24)) & 0xFFFu, (w2 >> 12) & 0xFFFu, w2 & 0xFFFu};
                for (int i = 0; i < 8; ++i) {
                    const int64_t h = g * 8 + i;
                    const float v = half_to_f32(c[i] << 4) * tk::load_sf(sf, packed != 0, sm, sk, t / BM, h / BK);
                    if (dt == tk::kInBF16) static_cast<uint16_t*>(out)[t * H + h] = dj::f32_to_bf16(v);
                    else static_cast<float*>(out)[t * H + h] = v;
                }
            }
        }
    });
}
