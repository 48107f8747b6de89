// The portable scalar reference of every kernel: dequantization, activation quantization (Q8_0,
// Q8_1, Q8_K, as ggml's reference functions define them) and one dot product per weight type, in
// ggml's arithmetic (per-block integer sums scaled in float). The fast paths are tested against these.
//
// Not here: argument checks (quants.cpp), SIMD (quants-avx512.cpp / quants-avx2.cpp). In a build
// with no SIMD path this file also supplies the (empty) SIMD table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "quants-blocks.h"
#include "quants-kernels.h"
#include "quants.h"

namespace strata {
namespace {

// ---------------------------------------------------------------- small helpers

inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// ---------------------------------------------------------------- dequantization

void dequant_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }

void dequant_f16(const void* src, float* dst, int64_t n) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(s[i]);
}

void dequant_bf16(const void* src, float* dst, int64_t n) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
}

void dequant_q4_0(const void* src, float* dst, int64_t n) {
    const block_q4_0* b = static_cast<const block_q4_0*>(src);
    for (int64_t i = 0; i < n / QK4_0; ++i, dst += QK4_0) {
        const float d = half_to_float(b[i].d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            dst[j] = float((b[i].qs[j] & 0xF) - 8) * d;
            dst[j + 16] = float((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequant_q4_1(const void* src, float* dst, int64_t n) {
    const block_q4_1* b = static_cast<const block_q4_1*>(src);
    for (int64_t i = 0; i < n / QK4_1; ++i, dst += QK4_1) {
        const float d = half_to_float(b[i].d), m = half_to_float(b[i].m);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            dst[j] = float(b[i].qs[j] & 0xF) * d + m;
            dst[j + 16] = float(b[i].qs[j] >> 4) * d + m;
        }
    }
}

void dequant_q5_0(const void* src, float* dst, int64_t n) {
    const block_q5_0* b = static_cast<const block_q5_0*>(src);
    for (int64_t i = 0; i < n / QK5_0; ++i, dst += QK5_0) {
        const float d = half_to_float(b[i].d);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int lo = (b[i].qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
            const int hi = (b[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
            dst[j] = float(lo - 16) * d;
            dst[j + 16] = float(hi - 16) * d;
        }
    }
}

void dequant_q5_1(const void* src, float* dst, int64_t n) {
    const block_q5_1* b = static_cast<const block_q5_1*>(src);
    for (int64_t i = 0; i < n / QK5_1; ++i, dst += QK5_1) {
        const float d = half_to_float(b[i].d), m = half_to_float(b[i].m);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const int lo = (b[i].qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
            const int hi = (b[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
            dst[j] = float(lo) * d + m;
            dst[j + 16] = float(hi) * d + m;
        }
    }
}

void dequant_mxfp4(const void* src, float* dst, int64_t n) {
    const block_mxfp4* b = static_cast<const block_mxfp4*>(src);
    for (int64_t i = 0; i < n / QK_MXFP4; ++i, dst += QK_MXFP4) {
        const float d = e8m0_to_fp32_half(b[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; ++j) {
            dst[j] = float(KVALUES_MXFP4[b[i].qs[j] & 0xF]) * d;
            dst[j + 16] = float(KVALUES_MXFP4[b[i].qs[j] >> 4]) * d;
        }
    }
}

void dequant_iq4_nl(const void* src, float* dst, int64_t n) {
    const block_iq4_nl* b = static_cast<const block_iq4_nl*>(src);
    for (int64_t i = 0; i < n / QK4_NL; ++i, dst += QK4_NL) {
        const float d = half_to_float(b[i].d);
        for (int j = 0; j < QK4_NL / 2; ++j) {
            dst[j] = float(KVALUES_IQ4NL[b[i].qs[j] & 0xF]) * d;
            dst[j + 16] = float(KVALUES_IQ4NL[b[i].qs[j] >> 4]) * d;
        }
    }
}

void dequant_iq4_xs(const void* src, float* dst, int64_t n) {
    const block_iq4_xs* b = static_cast<const block_iq4_xs*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = half_to_float(b[i].d);
        for (int j = 0; j < QK_K / 32; ++j, dst += 32) {
            const float dl = d * float(iq4_xs_scale(b[i], j));
            const uint8_t* q = b[i].qs + 16 * j;
            for (int l = 0; l < 16; ++l) {
                dst[l] = dl * float(KVALUES_IQ4NL[q[l] & 0xF]);
                dst[l + 16] = dl * float(KVALUES_IQ4NL[q[l] >> 4]);
            }
        }
    }
}

void dequant_q8_0(const void* src, float* dst, int64_t n) {
    const block_q8_0* b = static_cast<const block_q8_0*>(src);
    for (int64_t i = 0; i < n / QK8_0; ++i, dst += QK8_0) {
        const float d = half_to_float(b[i].d);
        for (int j = 0; j < QK8_0; ++j) dst[j] = float(b[i].qs[j]) * d;
    }
}

void dequant_q8_1(const void* src, float* dst, int64_t n) {
    const block_q8_1* b = static_cast<const block_q8_1*>(src);
    for (int64_t i = 0; i < n / QK8_1; ++i, dst += QK8_1) {
        const float d = half_to_float(b[i].d);
        for (int j = 0; j < QK8_1; ++j) dst[j] = float(b[i].qs[j]) * d;
    }
}

void dequant_q8_K(const void* src, float* dst, int64_t n) {
    const block_q8_K* b = static_cast<const block_q8_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        for (int j = 0; j < QK_K; ++j) dst[j] = float(b[i].qs[j]) * b[i].d;
    }
}

void dequant_q4_K(const void* src, float* dst, int64_t n) {
    const block_q4_K* b = static_cast<const block_q4_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
        for (int g = 0; g < 4; ++g) {
            int sc0, m0, sc1, m1;
            scale_min_k4(2 * g, b[i].scales, &sc0, &m0);
            scale_min_k4(2 * g + 1, b[i].scales, &sc1, &m1);
            const float d0 = d * float(sc0), mm0 = dmin * float(m0);
            const float d1 = d * float(sc1), mm1 = dmin * float(m1);
            const uint8_t* q = b[i].qs + 32 * g;
            for (int l = 0; l < 32; ++l) dst[l] = d0 * float(q[l] & 0xF) - mm0;
            for (int l = 0; l < 32; ++l) dst[32 + l] = d1 * float(q[l] >> 4) - mm1;
            dst += 64;
        }
    }
}

void dequant_q5_K(const void* src, float* dst, int64_t n) {
    const block_q5_K* b = static_cast<const block_q5_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
        for (int g = 0; g < 4; ++g) {
            int sc0, m0, sc1, m1;
            scale_min_k4(2 * g, b[i].scales, &sc0, &m0);
            scale_min_k4(2 * g + 1, b[i].scales, &sc1, &m1);
            const float d0 = d * float(sc0), mm0 = dmin * float(m0);
            const float d1 = d * float(sc1), mm1 = dmin * float(m1);
            const uint8_t* q = b[i].qs + 32 * g;
            const uint8_t* qh = b[i].qh;
            for (int l = 0; l < 32; ++l) {
                dst[l] = d0 * float((q[l] & 0xF) | (((qh[l] >> (2 * g)) & 1) << 4)) - mm0;
            }
            for (int l = 0; l < 32; ++l) {
                dst[32 + l] = d1 * float((q[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4)) - mm1;
            }
            dst += 64;
        }
    }
}

// Q6_K element (half h, position p in 0..127) -> q in [0, 63].
inline int q6_K_value(const block_q6_K& b, int h, int p) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const int l = p & 31, quarter = p >> 5;                 // quarter 0..3 of the half
    const int low = (quarter & 1) ? ql[l + 32] : ql[l];
    const int nib = (quarter & 2) ? (low >> 4) : (low & 0xF);
    return nib | (((qh[l] >> (2 * quarter)) & 3) << 4);
}

inline int q3_K_value(const block_q3_K& b, int e) {   // q - 4 in [-4, 3] of element e
    const int h = e / 128, g = (e % 128) / 32, k = e % 32;
    return ((b.qs[32 * h + k] >> (2 * g)) & 3) + 4 * ((b.hmask[k] >> (4 * h + g)) & 1) - 4;
}

void dequant_q3_K(const void* src, float* dst, int64_t n) {
    const block_q3_K* b = static_cast<const block_q3_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        const float d = half_to_float(b[i].d);
        int8_t sc[16];
        q3_K_scales(b[i], sc);
        for (int e = 0; e < QK_K; ++e) dst[e] = d * float(sc[e / 16]) * float(q3_K_value(b[i], e));
    }
}

void dequant_q2_K(const void* src, float* dst, int64_t n) {
    const block_q2_K* b = static_cast<const block_q2_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        const float d = half_to_float(b[i].d), dmin = half_to_float(b[i].dmin);
        for (int e = 0; e < QK_K; ++e) {
            const int q = (b[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            const uint8_t sm = b[i].scales[e / 16];
            dst[e] = d * float(sm & 0xF) * float(q) - dmin * float(sm >> 4);
        }
    }
}

void dequant_q6_K(const void* src, float* dst, int64_t n) {
    const block_q6_K* b = static_cast<const block_q6_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
        const float d = half_to_float(b[i].d);
        for (int e = 0; e < QK_K; ++e) {
            dst[e] = d * float(b[i].scales[e / 16]) * float(q6_K_value(b[i], e / 128, e % 128) - 32);
        }
    }
}

// ---------------------------------------------------------------- activation quantization

// C roundf (half away from zero) and rint (half to even, the default rounding mode) of |v| < 2^22,
// written out so that they inline and vectorise instead of calling libm (roundf was 6% of a
// prefill profile). v - trunc(v) is exact in that range.
inline float round_half_away(float v) {
    const float t = std::trunc(v);
    return t + (std::fabs(v - t) >= 0.5f ? std::copysign(1.0f, v) : 0.0f);
}
inline float round_half_even(float v) {
    const float t = std::trunc(v);
    const float f = std::fabs(v - t);
    // from 2^23 on every float is even; NaN compares false (its cast was undefined)
    const bool odd = std::fabs(t) < 8388608.0f && (static_cast<int32_t>(t) & 1) != 0;
    return t + ((f > 0.5f || (f == 0.5f && odd)) ? std::copysign(1.0f, v) : 0.0f);
}

// A rounded value to int32 as x86's cvtps2dq does (the AVX2 / AVX-512 quantizers' conversion): a NaN or a value
// outside int32 (a NaN or inf activation, or x * id from a subnormal block's scale, whose inverse overflows)
// becomes INT_MIN, the "integer indefinite", where a plain cast was undefined behaviour
inline int32_t to_int32_as_cvtps2dq(float r) {
    return r >= -2147483648.0f && r < 2147483648.0f ? static_cast<int32_t>(r) : INT32_MIN;
}
// ... then to int8 with the saturation of AVX2's packs (INT_MIN -> -128); a finite block's values are in [-127, 127]
inline int8_t saturate_int8(int32_t v) { return int8_t(std::clamp(v, -128, 127)); }

void quant_act_f32(const float* x, void* dst, int64_t n) { std::memcpy(dst, x, size_t(n) * 4); }

void quant_act_q8_0(const float* x, void* dst, int64_t n) {
    block_q8_0* y = static_cast<block_q8_0*>(dst);
    for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = float_to_half(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = saturate_int8(to_int32_as_cvtps2dq(round_half_away(x[j] * id)));
    }
}

void quant_act_q8_1(const float* x, void* dst, int64_t n) {
    block_q8_1* y = static_cast<block_q8_1*>(dst);
    for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = float_to_half(d);
        uint32_t sum = 0;   // of the int32 values, wrapping as the AVX2 sum does (INT_MIN for a non-finite lane)
        for (int j = 0; j < QK8_1; ++j) {
            const int32_t v = to_int32_as_cvtps2dq(round_half_away(x[j] * id));
            y[i].qs[j] = saturate_int8(v);
            sum += uint32_t(v);
        }
        y[i].s = float_to_half(float(int32_t(sum)) * d);
    }
}

void quant_act_q8_K(const float* x, void* dst, int64_t n) {
    block_q8_K* y = static_cast<block_q8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float amax = 0.0f, max = 0.0f;   // max: the signed value of largest magnitude (first one)
        for (int j = 0; j < QK_K; ++j) {
            const float ax = std::fabs(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int g = 0; g < QK_K / 16; ++g) {
            uint32_t sum = 0;   // of the int32 values, wrapping as the AVX2 sums do (INT_MIN for a non-finite lane)
            for (int l = 0; l < 16; ++l) {
                const int32_t v = std::min(127, to_int32_as_cvtps2dq(round_half_even(iscale * x[16 * g + l])));
                y[i].qs[16 * g + l] = saturate_int8(v);
                sum += uint32_t(v);
            }
            y[i].bsums[g] = int16_t(int32_t(sum));
        }
        y[i].d = 1.0f / iscale;
    }
}

// ---------------------------------------------------------------- dot products

float dot_f32(int64_t n, const void* w, const void* x) {
    const float* a = static_cast<const float*>(w);
    const float* b = static_cast<const float*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

float dot_f16(int64_t n, const void* w, const void* x) {
    const uint16_t* a = static_cast<const uint16_t*>(w);
    const float* b = static_cast<const float*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += half_to_float(a[i]) * b[i];
    return s;
}

float dot_bf16(int64_t n, const void* w, const void* x) {
    const uint16_t* a = static_cast<const uint16_t*>(w);
    const float* b = static_cast<const float*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += bf16_to_float(a[i]) * b[i];
    return s;
}

float dot_q4_0_q8_0(int64_t n, const void* w, const void* x) {
    const block_q4_0* a = static_cast<const block_q4_0*>(w);
    const block_q8_0* b = static_cast<const block_q8_0*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j] + ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        }
        s += float(sumi) * (half_to_float(a[i].d) * half_to_float(b[i].d));
    }
    return s;
}

float dot_q4_1_q8_1(int64_t n, const void* w, const void* x) {
    const block_q4_1* a = static_cast<const block_q4_1*>(w);
    const block_q8_1* b = static_cast<const block_q8_1*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK4_1; ++i) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += (a[i].qs[j] & 0xF) * b[i].qs[j] + (a[i].qs[j] >> 4) * b[i].qs[j + 16];
        }
        s += float(sumi) * (half_to_float(a[i].d) * half_to_float(b[i].d)) +
             half_to_float(a[i].m) * half_to_float(b[i].s);
    }
    return s;
}

float dot_q5_0_q8_0(int64_t n, const void* w, const void* x) {
    const block_q5_0* a = static_cast<const block_q5_0*>(w);
    const block_q8_0* b = static_cast<const block_q8_0*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK5_0; ++i) {
        const uint32_t qh = load_u32(a[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            const int lo = ((a[i].qs[j] & 0xF) | int(((qh >> j) & 1) << 4)) - 16;
            const int hi = ((a[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4)) - 16;
            sumi += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
        }
        s += float(sumi) * (half_to_float(a[i].d) * half_to_float(b[i].d));
    }
    return s;
}

float dot_q5_1_q8_1(int64_t n, const void* w, const void* x) {
    const block_q5_1* a = static_cast<const block_q5_1*>(w);
    const block_q8_1* b = static_cast<const block_q8_1*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK5_1; ++i) {
        const uint32_t qh = load_u32(a[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            const int lo = (a[i].qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
            const int hi = (a[i].qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
            sumi += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
        }
        s += float(sumi) * (half_to_float(a[i].d) * half_to_float(b[i].d)) +
             half_to_float(a[i].m) * half_to_float(b[i].s);
    }
    return s;
}

// As ggml_vec_dot_mxfp4_q8_0: per block (fp16 x.d * e8m0_half(w.e)) * integer sum, summed in order.
float dot_mxfp4_q8_0(int64_t n, const void* w, const void* x) {
    const block_mxfp4* a = static_cast<const block_mxfp4*>(w);
    const block_q8_0* b = static_cast<const block_q8_0*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_MXFP4; ++i) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += KVALUES_MXFP4[a[i].qs[j] & 0xF] * b[i].qs[j] + KVALUES_MXFP4[a[i].qs[j] >> 4] * b[i].qs[j + 16];
        }
        s += (half_to_float(b[i].d) * e8m0_to_fp32_half(a[i].e)) * float(sumi);
    }
    return s;
}

// Per block fp16 w.d * fp16 x.d times the integer sum, summed in order (as Q4_0).
float dot_iq4_nl_q8_0(int64_t n, const void* w, const void* x) {
    const block_iq4_nl* a = static_cast<const block_iq4_nl*>(w);
    const block_q8_0* b = static_cast<const block_q8_0*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK4_NL; ++i) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j) {
            sumi += KVALUES_IQ4NL[a[i].qs[j] & 0xF] * b[i].qs[j] + KVALUES_IQ4NL[a[i].qs[j] >> 4] * b[i].qs[j + 16];
        }
        s += float(sumi) * (half_to_float(a[i].d) * half_to_float(b[i].d));
    }
    return s;
}

// Per super-block the exact integer sum of (ls[j] - 32) times sub-block j's integer dot (|.| < 2^28),
// then one float multiply by x.d * w.d.
float dot_iq4_xs_q8_K(int64_t n, const void* w, const void* x) {
    const block_iq4_xs* a = static_cast<const block_iq4_xs*>(w);
    const block_q8_K* b = static_cast<const block_q8_K*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int32_t sumi = 0;
        for (int j = 0; j < QK_K / 32; ++j) {
            const uint8_t* q = a[i].qs + 16 * j;
            const int8_t* y = b[i].qs + 32 * j;
            int sub = 0;
            for (int l = 0; l < 16; ++l) sub += KVALUES_IQ4NL[q[l] & 0xF] * y[l] + KVALUES_IQ4NL[q[l] >> 4] * y[l + 16];
            sumi += iq4_xs_scale(a[i], j) * sub;
        }
        s += b[i].d * half_to_float(a[i].d) * float(sumi);
    }
    return s;
}

float dot_q8_0_q8_0(int64_t n, const void* w, const void* x) {
    const block_q8_0* a = static_cast<const block_q8_0*>(w);
    const block_q8_0* b = static_cast<const block_q8_0*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; ++j) sumi += a[i].qs[j] * b[i].qs[j];
        s += float(sumi) * (half_to_float(a[i].d) * half_to_float(b[i].d));
    }
    return s;
}

float dot_q4_K_q8_K(int64_t n, const void* w, const void* x) {
    const block_q4_K* a = static_cast<const block_q4_K*>(w);
    const block_q8_K* b = static_cast<const block_q8_K*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sumi = 0, summ = 0;
        for (int g = 0; g < 4; ++g) {
            const uint8_t* q = a[i].qs + 32 * g;
            const int8_t* xq = b[i].qs + 64 * g;
            int lo = 0, hi = 0;
            for (int l = 0; l < 32; ++l) {
                lo += (q[l] & 0xF) * xq[l];
                hi += (q[l] >> 4) * xq[32 + l];
            }
            int sc0, m0, sc1, m1;
            scale_min_k4(2 * g, a[i].scales, &sc0, &m0);
            scale_min_k4(2 * g + 1, a[i].scales, &sc1, &m1);
            sumi += sc0 * lo + sc1 * hi;
            summ += m0 * (b[i].bsums[4 * g] + b[i].bsums[4 * g + 1]) +
                    m1 * (b[i].bsums[4 * g + 2] + b[i].bsums[4 * g + 3]);
        }
        s += b[i].d * half_to_float(a[i].d) * float(sumi) - b[i].d * half_to_float(a[i].dmin) * float(summ);
    }
    return s;
}

float dot_q5_K_q8_K(int64_t n, const void* w, const void* x) {
    const block_q5_K* a = static_cast<const block_q5_K*>(w);
    const block_q8_K* b = static_cast<const block_q8_K*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sumi = 0, summ = 0;
        for (int g = 0; g < 4; ++g) {
            const uint8_t* q = a[i].qs + 32 * g;
            const int8_t* xq = b[i].qs + 64 * g;
            int lo = 0, hi = 0;
            for (int l = 0; l < 32; ++l) {
                lo += ((q[l] & 0xF) | (((a[i].qh[l] >> (2 * g)) & 1) << 4)) * xq[l];
                hi += ((q[l] >> 4) | (((a[i].qh[l] >> (2 * g + 1)) & 1) << 4)) * xq[32 + l];
            }
            int sc0, m0, sc1, m1;
            scale_min_k4(2 * g, a[i].scales, &sc0, &m0);
            scale_min_k4(2 * g + 1, a[i].scales, &sc1, &m1);
            sumi += sc0 * lo + sc1 * hi;
            summ += m0 * (b[i].bsums[4 * g] + b[i].bsums[4 * g + 1]) +
                    m1 * (b[i].bsums[4 * g + 2] + b[i].bsums[4 * g + 3]);
        }
        s += b[i].d * half_to_float(a[i].d) * float(sumi) - b[i].d * half_to_float(a[i].dmin) * float(summ);
    }
    return s;
}

// Per super-block the exact integer sums over sub-blocks of sc * sum q x and of m * sum x (Q8_K's sums),
// then x.d * (d * the first - dmin * the second).
float dot_q2_K_q8_K(int64_t n, const void* w, const void* x) {
    const block_q2_K* a = static_cast<const block_q2_K*>(w);
    const block_q8_K* b = static_cast<const block_q8_K*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sumi = 0, summ = 0;
        for (int g = 0; g < QK_K / 16; ++g) {
            int sub = 0;
            for (int l = 0; l < 16; ++l) {
                const int e = 16 * g + l;
                sub += ((a[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) * b[i].qs[e];
            }
            sumi += (a[i].scales[g] & 0xF) * sub;
            summ += (a[i].scales[g] >> 4) * b[i].bsums[g];
        }
        s += b[i].d * (half_to_float(a[i].d) * float(sumi) - half_to_float(a[i].dmin) * float(summ));
    }
    return s;
}

// Per super-block the exact integer sum over sub-blocks of (sc - 32) * sum (q - 4) x, then one float
// multiply by x.d * w.d (as Q6_K).
float dot_q3_K_q8_K(int64_t n, const void* w, const void* x) {
    const block_q3_K* a = static_cast<const block_q3_K*>(w);
    const block_q8_K* b = static_cast<const block_q8_K*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int8_t sc[16];
        q3_K_scales(a[i], sc);
        int sumi = 0;
        for (int g = 0; g < QK_K / 16; ++g) {
            int sub = 0;
            for (int l = 0; l < 16; ++l) sub += q3_K_value(a[i], 16 * g + l) * b[i].qs[16 * g + l];
            sumi += sc[g] * sub;
        }
        s += b[i].d * half_to_float(a[i].d) * float(sumi);
    }
    return s;
}

float dot_q6_K_q8_K(int64_t n, const void* w, const void* x) {
    const block_q6_K* a = static_cast<const block_q6_K*>(w);
    const block_q8_K* b = static_cast<const block_q8_K*>(x);
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sumi = 0;
        for (int g = 0; g < QK_K / 16; ++g) {
            int sub = 0;
            for (int l = 0; l < 16; ++l) {
                const int e = 16 * g + l;
                sub += (q6_K_value(a[i], e / 128, e % 128) - 32) * b[i].qs[e];
            }
            sumi += a[i].scales[g] * sub;
        }
        s += b[i].d * half_to_float(a[i].d) * float(sumi);
    }
    return s;
}

}  // namespace

// ---------------------------------------------------------------- tables

dot_fn generic_dot_for(int32_t weight_type) {
    switch (weight_type) {
        case TYPE_F32: return dot_f32;
        case TYPE_F16: return dot_f16;
        case TYPE_BF16: return dot_bf16;
        case TYPE_Q4_0: return dot_q4_0_q8_0;
        case TYPE_Q4_1: return dot_q4_1_q8_1;
        case TYPE_Q5_0: return dot_q5_0_q8_0;
        case TYPE_Q5_1: return dot_q5_1_q8_1;
        case TYPE_Q8_0: return dot_q8_0_q8_0;
        case TYPE_Q2_K: return dot_q2_K_q8_K;
        case TYPE_Q3_K: return dot_q3_K_q8_K;
        case TYPE_Q4_K: return dot_q4_K_q8_K;
        case TYPE_Q5_K: return dot_q5_K_q8_K;
        case TYPE_Q6_K: return dot_q6_K_q8_K;
        case TYPE_IQ4_NL: return dot_iq4_nl_q8_0;
        case TYPE_IQ4_XS: return dot_iq4_xs_q8_K;
        case TYPE_MXFP4: return dot_mxfp4_q8_0;
        default: return nullptr;
    }
}

dequant_fn generic_dequant_for(int32_t type) {
    switch (type) {
        case TYPE_F32: return dequant_f32;
        case TYPE_F16: return dequant_f16;
        case TYPE_BF16: return dequant_bf16;
        case TYPE_Q4_0: return dequant_q4_0;
        case TYPE_Q4_1: return dequant_q4_1;
        case TYPE_Q5_0: return dequant_q5_0;
        case TYPE_Q5_1: return dequant_q5_1;
        case TYPE_Q8_0: return dequant_q8_0;
        case TYPE_Q8_1: return dequant_q8_1;
        case TYPE_Q2_K: return dequant_q2_K;
        case TYPE_Q3_K: return dequant_q3_K;
        case TYPE_Q4_K: return dequant_q4_K;
        case TYPE_Q5_K: return dequant_q5_K;
        case TYPE_Q6_K: return dequant_q6_K;
        case TYPE_Q8_K: return dequant_q8_K;
        case TYPE_IQ4_NL: return dequant_iq4_nl;
        case TYPE_IQ4_XS: return dequant_iq4_xs;
        case TYPE_MXFP4: return dequant_mxfp4;
        default: return nullptr;
    }
}

quant_act_fn act_quantizer_for(int32_t act_type) {
    switch (act_type) {
        case TYPE_F32: return quant_act_f32;
        case TYPE_Q8_0: return quant_act_q8_0;
        case TYPE_Q8_1: return quant_act_q8_1;
        case TYPE_Q8_K: return quant_act_q8_K;
        default: return nullptr;
    }
}

#if !defined(STRATA_SIMD_AVX512) && !defined(STRATA_SIMD_AVX2)
matmul_fn simd_matmul_for(int32_t) { return nullptr; }
quant_act_fn simd_act_quantizer_for(int32_t) { return nullptr; }
const char* simd_build_name() { return "scalar"; }
int64_t simd_int8_probe(int64_t, int32_t* sink) {
    *sink = 0;
    return 0;
}
#endif

}  // namespace strata
