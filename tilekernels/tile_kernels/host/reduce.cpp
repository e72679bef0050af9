// tk_reduce: out[t] = cast((sum over k in order of fma(x[pos_k], w[t,k] * x_sf[pos_k], acc)) * sf)
// back from the expert-major rows to tokens; FP32 accumulation, FP32/BF16/E4M3 in and out.
#include <tile_kernels/host/layout_args.hpp>
#include <tile_kernels/host/quant.hpp>

namespace {

enum Dt : int32_t { kF32 = 0, kBF16 = 1, kE4M3 = 2 };

DJ_INLINE float load1(const void* p, int32_t dt, int64_t i) {
    if (dt == kBF16) return dj::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    if (dt == kE4M3) return dj::e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    return static_cast<const float*>(p)[i];
}

#ifdef DJ_HAVE_AVX512
DJ_INLINE __m512 load16(const void* p, int32_t dt, int64_t i) {
    if (dt == kE4M3) return dj::e4m3x16_to_f32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(p) + i)));
    return tk::load16(p, dt == kBF16 ? tk::kInBF16 : tk::kInF32, i);
}
#endif

DJ_INLINE void store1(void* p, int32_t dt, int64_t i, float v) {
    if (dt == kBF16) static_cast<uint16_t*>(p)[i] = dj::f32_to_bf16(v);
    else if (dt == kE4M3) static_cast<uint8_t*>(p)[i] = dj::f32_to_e4m3(v);
    else static_cast<float*>(p)[i] = v;
}

}  // namespace

DJ_KERNEL(tk_reduce, "ptr,i64")
void tk_reduce(const tk::ReduceArgs* args, int64_t threads) {
    const tk::ReduceArgs a = *args;
    void* out = a.out;
    const void* x = a.x;
    const float *weights = a.weights, *x_sf = a.x_sf, *sf = a.sf;
    const int32_t* t2p = a.t2p;
    const int32_t in_dt = a.in_dt, out_dt = a.out_dt;
    const int64_t T = a.T, K = a.K, H = a.H;
    const size_t in_es = in_dt == kF32 ? 4 : (in_dt == kBF16 ? 2 : 1), out_es = out_dt == kF32 ? 4 : (out_dt == kBF16 ? 2 : 1);
    dj::parallel_threads(dj::thread_count(threads, T), [&](int64_t th, int64_t nt) {
        std::vector<float> acc(H);
        const dj::Range rg = dj::split_range(T, nt, th);
        for (int64_t t = rg.begin; t < rg.end; ++t) {
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t k = 0; k < K; ++k) {
                const int32_t p = t2p[t * K + k];
                if (p < 0) continue;
                float s = weights != nullptr ? weights[t * K + k] : 1.0f;
                if (x_sf != nullptr) s = s * x_sf[p];
                const void* row = static_cast<const char*>(x) + p * H * in_es;
                int64_t h = 0;
#ifdef DJ_HAVE_AVX512
                const __m512 vs = _mm512_set1_ps(s);
                for (; h + 16 <= H; h += 16)
                    _mm512_storeu_ps(acc.data() + h, _mm512_fmadd_ps(load16(row, in_dt, h), vs, _mm512_loadu_ps(acc.data() + h)));
#endif
                for (; h < H; ++h) acc[h] = std::fma(load1(row, in_dt, h), s, acc[h]);
            }
            void* orow = static_cast<char*>(out) + t * H * out_es;
            int64_t h = 0;
            const float f = sf != nullptr ? sf[0] : 1.0f;
#ifdef DJ_HAVE_AVX512
            for (; h + 16 <= H; h += 16) {
                __m512 v = _mm512_loadu_ps(acc.data() + h);
                if (sf != nullptr) v = _mm512_mul_ps(v, _mm512_set1_ps(f));
                if (out_dt == kBF16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(orow) + h), dj::f32x16_to_bf16(v));
                else if (out_dt == kE4M3) _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint8_t*>(orow) + h), dj::f32x16_to_e4m3(v));
                else _mm512_storeu_ps(static_cast<float*>(orow) + h, v);
            }
#endif
            for (; h < H; ++h) store1(orow, out_dt, h, sf != nullptr ? acc[h] * f : acc[h]);
        }
    });
}
