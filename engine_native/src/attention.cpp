// Attention over the KV cache: f16 and q8_0 rows, AVX-512 / F16C paths and a scalar fallback.
//
// Not here: threading (the caller splits rows x groups). Each path is deterministic for a build;
// the scalar path is the reference for the others (same math, different lane order).
#include "attention.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "quants.h"

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

namespace strata {

namespace {

constexpr int k_qk = 32;   // Q8_0 block

// ---- f16 rows

inline float dot_f16(const float* q, const uint16_t* k, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m512 kv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i)));
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), kv, acc);
    }
    float s = _mm512_reduce_add_ps(acc);
#elif defined(__F16C__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k + i)));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), kv, acc);
    }
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float s = _mm_cvtss_f32(h);
#else
    float s = 0.0f;
#endif
    for (; i < n; i++) s += q[i] * fp16_to_fp32(k[i]);
    return s;
}

inline void axpy_f16(float* out, float w, const uint16_t* v, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    __m512 wv = _mm512_set1_ps(w);
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)));
        _mm512_storeu_ps(out + i, _mm512_fmadd_ps(wv, x, _mm512_loadu_ps(out + i)));
    }
#elif defined(__F16C__) && defined(__FMA__)
    __m256 wv = _mm256_set1_ps(w);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
        _mm256_storeu_ps(out + i, _mm256_fmadd_ps(wv, x, _mm256_loadu_ps(out + i)));
    }
#endif
    for (; i < n; i++) out[i] += w * fp16_to_fp32(v[i]);
}

// ---- f32 rows (a precision reference for tests)

inline float dot_f32(const float* q, const float* k, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int l = 0; l < 8; l++) acc[l] += q[i + l] * k[i + l];
    }
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += q[i] * k[i];
    return s;
}

inline void axpy_f32(float* out, float w, const float* v, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] += w * v[i];
}

// ---- q8_0 rows: blocks of (fp16 d, int8 qs[32])

inline const uint8_t* q8_block(const uint8_t* row, int64_t b) { return row + b * (2 + k_qk); }

inline float q8_scale(const uint8_t* blk) {
    uint16_t d;
    std::memcpy(&d, blk, 2);
    return fp16_to_fp32(d);
}

float dot_q8(const float* q, const uint8_t* row, int64_t first_block, int64_t n) {
    float s = 0.0f;
    for (int64_t b = 0; b < n / k_qk; b++) {
        const uint8_t* blk = q8_block(row, first_block + b);
        const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2);
        const float* qq = q + b * k_qk;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = 0; j < k_qk; j += 8) {
            for (int l = 0; l < 8; l++) acc[l] += qq[j + l] * float(qs[j + l]);
        }
        float bs = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        s += bs * q8_scale(blk);
    }
    return s;
}

void axpy_q8(float* out, float w, const uint8_t* row, int64_t first_block, int64_t n) {
    for (int64_t b = 0; b < n / k_qk; b++) {
        const uint8_t* blk = q8_block(row, first_block + b);
        const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2);
        float wd = w * q8_scale(blk);
        float* o = out + b * k_qk;
        for (int j = 0; j < k_qk; j++) o[j] += wd * float(qs[j]);
    }
}

}  // namespace

size_t kv_row_bytes(int32_t kv_type, int64_t kv_dim) {
    if (kv_type == TYPE_F32) return size_t(kv_dim) * 4;
    if (kv_type == TYPE_F16) return size_t(kv_dim) * 2;
    if (kv_type == TYPE_Q8_0) {
        if (kv_dim % k_qk != 0) {
            throw std::invalid_argument("q8_0 KV needs a KV row length that is a multiple of 32, got " +
                                        std::to_string(kv_dim));
        }
        return size_t(kv_dim / k_qk) * (2 + k_qk);
    }
    throw std::invalid_argument("unsupported KV type id " + std::to_string(kv_type));
}

void kv_store_row(int32_t kv_type, const float* src, uint8_t* dst, int64_t kv_dim) {
    if (kv_type == TYPE_F32) {
        std::memcpy(dst, src, sizeof(float) * size_t(kv_dim));
        return;
    }
    if (kv_type == TYPE_F16) {
        uint16_t* h = reinterpret_cast<uint16_t*>(dst);
        int64_t i = 0;
#if defined(__F16C__)
        for (; i + 8 <= kv_dim; i += 8) {
            __m128i p = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), p);
        }
#endif
        for (; i < kv_dim; i++) h[i] = fp32_to_fp16(src[i]);
        return;
    }
    for (int64_t b = 0; b < kv_dim / k_qk; b++) {
        const float* x = src + b * k_qk;
        float amax = 0.0f;
        for (int j = 0; j < k_qk; j++) amax = std::fmax(amax, std::fabs(x[j]));
        uint16_t dh = fp32_to_fp16(amax / 127.0f);
        float d = fp16_to_fp32(dh);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t* blk = dst + b * (2 + k_qk);
        std::memcpy(blk, &dh, 2);
        int8_t* qs = reinterpret_cast<int8_t*>(blk + 2);
        for (int j = 0; j < k_qk; j++) {
            float v = std::nearbyint(x[j] * id);
            qs[j] = int8_t(std::fmax(-127.0f, std::fmin(127.0f, v)));
        }
    }
}

void attention_group(int32_t kv_type, const float* q, const uint8_t* k, const uint8_t* v, size_t row_bytes,
                     int64_t g, int64_t n_rep, int64_t head_dim, int64_t n_pos, float scale, float* out,
                     float* scores) {
    const bool f16 = kv_type == TYPE_F16, f32 = kv_type == TYPE_F32;
    const int64_t first_block = g * head_dim / k_qk;   // q8_0 only
    for (int64_t t = 0; t < n_pos; t++) {
        const uint8_t* krow = k + size_t(t) * row_bytes;
        for (int64_t h = 0; h < n_rep; h++) {
            const float* qh = q + h * head_dim;
            float s = f16    ? dot_f16(qh, reinterpret_cast<const uint16_t*>(krow) + g * head_dim, head_dim)
                      : f32 ? dot_f32(qh, reinterpret_cast<const float*>(krow) + g * head_dim, head_dim)
                            : dot_q8(qh, krow, first_block, head_dim);
            scores[h * n_pos + t] = s * scale;
        }
    }
    for (int64_t h = 0; h < n_rep; h++) {
        float* sc = scores + h * n_pos;
        float mx = sc[0];
        for (int64_t t = 1; t < n_pos; t++) mx = std::fmax(mx, sc[t]);
        float sum = 0.0f;
        for (int64_t t = 0; t < n_pos; t++) {
            sc[t] = std::exp(sc[t] - mx);
            sum += sc[t];
        }
        float inv = 1.0f / sum;
        float* oh = out + h * head_dim;
        std::memset(oh, 0, sizeof(float) * size_t(head_dim));
        for (int64_t t = 0; t < n_pos; t++) {
            const uint8_t* vrow = v + size_t(t) * row_bytes;
            float w = sc[t] * inv;
            if (f16) {
                axpy_f16(oh, w, reinterpret_cast<const uint16_t*>(vrow) + g * head_dim, head_dim);
            } else if (f32) {
                axpy_f32(oh, w, reinterpret_cast<const float*>(vrow) + g * head_dim, head_dim);
            } else {
                axpy_q8(oh, w, vrow, first_block, head_dim);
            }
        }
    }
}

}  // namespace strata
