// fused_weight: out = float(wh) * float(we) elementwise over hc x H (BF16 or FP32 inputs), the FP32
// product the gate kernels take as weight_fused. Usual sizes (some 30K values) stay on one thread.
#include <tile_kernels/host/quant.hpp>

DJ_KERNEL(tk_engram_fused_weight, "ptr,i32,ptr,i32,ptr,i64,i64")
void tk_engram_fused_weight(const void* wh, int32_t wh_bf16, const void* we, int32_t we_bf16, float* out, int64_t N,
                            int64_t threads) {
    const int32_t dt_h = wh_bf16 ? tk::kInBF16 : tk::kInF32, dt_e = we_bf16 ? tk::kInBF16 : tk::kInF32;
    dj::parallel_for((N + 4095) / 4096, N >= (1 << 20) ? threads : 1, [&](int64_t blk) {
        int64_t j = blk * 4096;
        const int64_t end = std::min(N, j + 4096);
#ifdef DJ_HAVE_AVX512
        for (; j + 16 <= end; j += 16)
            _mm512_storeu_ps(out + j, _mm512_mul_ps(tk::load16(wh, dt_h, j), tk::load16(we, dt_e, j)));
#endif
        for (; j < end; ++j) out[j] = tk::load1(wh, dt_h, j) * tk::load1(we, dt_e, j);
    });
}
