// The per-row steps of the forward pass (forward.cpp, forward-moe.cpp, forward-mla.cpp): RMSNorm, RoPE of
// one head, the gated FFN activations. Each has a fixed order of operations that depends on its row alone
// (the bitwise rule: forward.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "model.h"
#include "vec16.h"

namespace strata {

constexpr int64_t k_rows_per_chunk = 8;   // per-row stages: batches below this run inline

// y = x / sqrt(mean(x^2) + eps) * w, with a fixed 8-lane accumulation order.
inline void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int l = 0; l < 8; l++) acc[l] += x[i + l] * x[i + l];
    }
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) sum += x[i] * x[i];
    const float scale = 1.0f / std::sqrt(sum / float(n) + eps);
    for (i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

// Rotates one head in place with the row's (cos, sin) table: (n_rot / 2, 2).
inline void rope_head(float* x, const float* cs, int64_t n_rot, rope_style style) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const int64_t i0 = style == ROPE_NORM ? 2 * i : i;
        const int64_t i1 = style == ROPE_NORM ? 2 * i + 1 : i + half;
        const float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

// g = block(g, u) over n elements, 16 lanes at a time (a short tail through a padded block).
template <typename Block>
inline void gated_rows(float* g, const float* u, int64_t n, Block block) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) v16_store(g + i, block(v16_load(g + i), v16_load(u + i)));
    if (i < n) {
        float tg[16] = {}, tu[16] = {};
        std::memcpy(tg, g + i, sizeof(float) * size_t(n - i));
        std::memcpy(tu, u + i, sizeof(float) * size_t(n - i));
        v16_store(tg, block(v16_load(tg), v16_load(tu)));
        std::memcpy(g + i, tg, sizeof(float) * size_t(n - i));
    }
}

// g = silu(g) * u = g / (1 + exp(-g)) * u
inline void swiglu_row(float* g, const float* u, int64_t n) {
    gated_rows(g, u, n, [](v16 x, v16 up) {
        return v16_mul(v16_div(x, v16_add(v16_set1(1.0f), v16_exp(v16_sub(v16_zero(), x)))), up);
    });
}

// gemma3's GeGLU with ggml_gelu's tanh form: 0.5 g (1 + tanh(z)) = g / (1 + exp(-2 z)),
// z = sqrt(2 / pi) g (1 + 0.044715 g^2); g = gelu(g) * u
inline void geglu_row(float* g, const float* u, int64_t n) {
    gated_rows(g, u, n, [](v16 x, v16 up) {
        const v16 z2 = v16_mul(v16_mul(v16_set1(-2.0f * 0.7978845608028654f), x),
                               v16_add(v16_set1(1.0f), v16_mul(v16_set1(0.044715f), v16_mul(x, x))));
        return v16_mul(v16_div(x, v16_add(v16_set1(1.0f), v16_exp(z2))), up);
    });
}

// gpt-oss's clamped SwiGLU (ggml's swiglu_oai): x = min(g, 7), y = clamp(u, -7, 7),
// g = x / (1 + exp(-1.702 x)) * (y + 1)
inline void swiglu_oai_row(float* g, const float* u, int64_t n) {
    gated_rows(g, u, n, [](v16 gate, v16 up) {
        const v16 limit = v16_set1(7.0f);
        const v16 x = v16_min(gate, limit);
        const v16 y = v16_max(v16_min(up, limit), v16_sub(v16_zero(), limit));
        const v16 s = v16_div(x, v16_add(v16_set1(1.0f), v16_exp(v16_mul(v16_set1(-1.702f), x))));
        return v16_mul(s, v16_add(y, v16_set1(1.0f)));
    });
}

// the FFN activation of `act` over n gate / up pairs (dense FFNs and experts)
inline void gated_activation(ffn_activation act, float* g, const float* u, int64_t n) {
    if (act == FFN_SWIGLU_OAI) swiglu_oai_row(g, u, n);
    else if (act == FFN_GEGLU) geglu_row(g, u, n);
    else swiglu_row(g, u, n);
}

}  // namespace strata
