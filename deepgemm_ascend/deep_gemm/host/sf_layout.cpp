// Scale-factor layout transforms: strided FP32 copies with per-row broadcast, and UE8M0 packing
// and unpacking (exponent bytes little-endian in int32 / int16 words). Work is split into
// blocks of 64 MN rows so each block's input rows stay in L1 while the (usually MN-major)
// output is written along its contiguous dimension.
#include <deepjit/host/convert.hpp>
#include <deepjit/host/kernel.hpp>
#include <deepjit/host/parallel.hpp>

#include <algorithm>
#include <cstring>

namespace {
enum : int { P_MODE, P_B, P_MN, P_SK, P_WORDS, P_GRAN, P_ISB, P_ISM, P_ISK, P_OSB, P_OSM, P_OSK, P_BYTES };
enum Mode : int { kCopy = 0, kPack = 1, kUnpack = 2 };
constexpr int64_t BLOCK = 64;
}  // namespace

DJ_KERNEL(dg_sf_layout, "ptr,ptr,ptr,i64")
void dg_sf_layout(const int64_t* p, const void* in, void* out, int64_t threads) {
    const int64_t B = p[P_B], MN = p[P_MN], SK = p[P_SK], words = p[P_WORDS], gran = std::max<int64_t>(p[P_GRAN], 1);
    const int64_t isb = p[P_ISB], ism = p[P_ISM], isk = p[P_ISK], osb = p[P_OSB], osm = p[P_OSM], osk = p[P_OSK];
    const int per_word = static_cast<int>(p[P_BYTES]);
    const int mode = static_cast<int>(p[P_MODE]);
    const int64_t blocks = (MN + BLOCK - 1) / BLOCK;
    dj::parallel_for(B * blocks, threads, [&](int64_t item) {
        const int64_t b = item / blocks, m0 = (item % blocks) * BLOCK, m1 = std::min(MN, m0 + BLOCK);
        if (mode == kCopy) {
            const float* src = static_cast<const float*>(in) + b * isb;
            float* dst = static_cast<float*>(out) + b * osb;
            for (int64_t k = 0; k < SK; ++k)
                for (int64_t m = m0; m < m1; ++m) dst[m * osm + k * osk] = src[(m / gran) * ism + k * isk];
        } else if (mode == kPack) {
            const uint32_t* src = static_cast<const uint32_t*>(in) + b * isb;
            for (int64_t w = 0; w < words; ++w)
                for (int64_t m = m0; m < m1; ++m) {
                    uint32_t word = 0;
                    for (int j = 0; j < per_word; ++j) {
                        const int64_t k = w * per_word + j;
                        if (k < SK) word |= ((src[(m / gran) * ism + k * isk] >> 23) & 0xFFu) << (8 * j);
                    }
                    const int64_t o = b * osb + m * osm + w * osk;
                    if (per_word == 4)
                        static_cast<uint32_t*>(out)[o] = word;
                    else
                        static_cast<uint16_t*>(out)[o] = static_cast<uint16_t>(word);
                }
        } else {
            float* dst = static_cast<float*>(out) + b * osb;
            for (int64_t k = 0; k < SK; ++k)
                for (int64_t m = m0; m < m1; ++m) {
                    const int64_t i = b * isb + m * ism + (k / per_word) * isk;
                    const uint32_t word = per_word == 4 ? static_cast<const uint32_t*>(in)[i]
                                                        : static_cast<const uint16_t*>(in)[i];
                    dst[m * osm + k * osk] = dj::bits_f32(((word >> (8 * (k % per_word))) & 0xFFu) << 23);
                }
        }
    });
}
