// Named launch arguments of the SwiGLU cast kernels. quant/swiglu.py reads these declarations
// (deepjit.descriptors) and fills every field by name, so Python and C++ cannot drift apart.
#pragma once

#include <cstdint>

namespace tk {

// x = [a | b]: [P, 2H] BF16 or FP32, contiguous; y = silu(a) * b (* routing weight), optionally clamped.
struct SwigluFwdCastArgs {
    uint8_t* q;                    // E4M3 [P, H], or null with y_out
    void* sf;                      // scales of q in the layout sm / sk / packed say, or null with y_out
    uint16_t* y_out;               // BF16 y [P, H] instead of the cast, or null
    const void* x;
    int32_t dt;                    // x's dtype: tk::kInF32 or tk::kInBF16
    int64_t P, H;
    int64_t npc;                   // channels per scale
    const int32_t* p2tt;           // pos_to_token_topk [P] (< 0: padding row), or null (no weights)
    const float* weights;          // topk_weights, flat, read at p2tt[p]
    const int32_t* p2e;            // pos_to_expert [P], or null
    bool has_clamp;
    float clamp;
    int64_t* counts;               // clamped_count [3] accumulated into, or null
    bool round_sf;
    float clamp_min;               // the smallest amax a scale is computed from
    bool packed;                   // scales as UE8M0 bytes packed 4 per int32
    int64_t sm, sk;                // strides of sf: per row, per scale block
};

struct SwigluBwdCastArgs {
    uint16_t* out;                 // silu(a) b w [P, H], grad_out's dtype
    uint16_t* x_grad;              // [P, 2H]
    uint8_t* x_grad_q;             // E4M3 [P, 2H]
    float* x_grad_sf;              // [P, 2H / npc]
    float* weight_grad;            // flat, accumulated at p2tt[p]
    const uint8_t* q;              // E4M3 input [P, 2H]
    const float* sf;               // its scales [P, 2H / npc]
    const uint16_t* grad_out;      // BF16 [P, H]
    const float* weights;          // topk_weights, flat
    const int32_t* p2tt;           // pos_to_token_topk [P] (< 0: padding row)
    int64_t P, H, npc;
    int32_t has_clamp;
    float clamp;
    int32_t round_sf;
};

}  // namespace tk
