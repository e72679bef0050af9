// grad_w_reduce: s = sum over blocks of grad_w_partial (in block order: bitwise torch's sum for up to
// two blocks); grad_wh += s * we; grad_we += s * wh (products rounded before the adds).
#include <tile_kernels/host/quant.hpp>

DJ_KERNEL(tk_engram_grad_w, "ptr,i64,ptr,i32,ptr,i32,ptr,ptr,i64,i64")
void tk_engram_grad_w(const float* partial, int64_t B, const void* wh, int32_t wh_bf16, const void* we, int32_t we_bf16,
                      float* gwh, float* gwe, int64_t N, int64_t threads) {
    const int32_t dt_h = wh_bf16 ? tk::kInBF16 : tk::kInF32, dt_e = we_bf16 ? tk::kInBF16 : tk::kInF32;
    // the usual sizes (hc x H, some 30K values) take microseconds: threads only for large ones
    dj::parallel_for((N + 4095) / 4096, N * B >= (1 << 20) ? threads : 1, [&](int64_t blk) {
        int64_t j = blk * 4096;
        const int64_t end = std::min(N, j + 4096);
#ifdef DJ_HAVE_AVX512
        for (; j + 16 <= end; j += 16) {
            __m512 s = _mm512_loadu_ps(partial + j);
            for (int64_t b = 1; b < B; ++b) s = _mm512_add_ps(s, _mm512_loadu_ps(partial + b * N + j));
            _mm512_storeu_ps(gwh + j, _mm512_add_ps(_mm512_loadu_ps(gwh + j), tk::rounded(_mm512_mul_ps(s, tk::load16(we, dt_e, j)))));
            _mm512_storeu_ps(gwe + j, _mm512_add_ps(_mm512_loadu_ps(gwe + j), tk::rounded(_mm512_mul_ps(s, tk::load16(wh, dt_h, j)))));
        }
#endif
        for (; j < end; ++j) {
            float s = partial[j];
            for (int64_t b = 1; b < B; ++b) s += partial[b * N + j];
            gwh[j] += tk::rounded(s * tk::load1(we, dt_e, j));
            gwe[j] += tk::rounded(s * tk::load1(wh, dt_h, j));
        }
    });
}
