// Per-token FP8 cast of BF16 rows for the V1 low-latency dispatch: each 128-channel block is
// scaled so its absolute maximum (at least 1e-4) maps to 448: scale = amax / 448, q = x / scale,
// rounded to E4M3 (the same FP32 operations as utils/math.py's reference). With round_scale the
// scale is first rounded up to a power of two (exponent + 1 when any mantissa bit is set).
#include <deep_ep/host/common.hpp>
#include <deepjit/host/convert.hpp>

#include <cmath>

DJ_KERNEL(ep_fp8_cast, "ptr,ptr,ptr,i64,i64,i64,i64")
void ep_fp8_cast(const uint16_t* x, uint8_t* out, float* scales, int64_t T, int64_t H, int64_t round_scale,
                 int64_t threads) {
    const int64_t blocks = H / 128;
    dj::parallel_for(T * blocks, threads, [&](int64_t i) {
        const int64_t t = i / blocks, b = i % blocks;
        const uint16_t* src = x + t * H + b * 128;
        uint8_t* dst = out + t * H + b * 128;
#if defined(DJ_HAVE_AVX512)
        __m512 v[8];
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < 8; ++j) {
            v[j] = dj::bf16x16_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 16 * j)));
            m = _mm512_max_ps(m, _mm512_abs_ps(v[j]));
        }
        float s = std::fmax(_mm512_reduce_max_ps(m), 1e-4f) / 448.0f;
        if (round_scale) {
            const uint32_t bits = dj::f32_bits(s);
            s = dj::bits_f32((((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0 ? 1 : 0)) << 23);
        }
        scales[t * blocks + b] = s;
        const __m512 sv = _mm512_set1_ps(s);
        for (int j = 0; j < 8; ++j)
            _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * j), dj::f32x16_to_e4m3(_mm512_div_ps(v[j], sv)));
#else
        float v[128], amax = 0.0f;
        for (int h = 0; h < 128; ++h) {
            v[h] = dj::bf16_to_f32(src[h]);
            amax = std::fmax(amax, std::fabs(v[h]));
        }
        amax = std::fmax(amax, 1e-4f);
        float scale = amax / 448.0f;
        if (round_scale) {
            uint32_t bits = dj::f32_bits(scale);
            const uint32_t exp = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
            scale = dj::bits_f32(exp << 23);
        }
        scales[t * blocks + b] = scale;
        for (int h = 0; h < 128; ++h) dst[h] = dj::f32_to_e4m3(v[h] / scale);
#endif
    });
}
