// vec16: sixteen float lanes with one meaning on every build (AVX-512: one zmm; AVX2+FMA+F16C: two
// ymm; otherwise a float[16] with std::fma), for the engine's own loops (attention, softmax).
//
// Not here: quantized products (quants.h). Every operation is lane-wise except the reductions,
// which use one fixed tree, so a result never depends on the build's vector width or on where a
// lane sits in a batch. v16_exp is a Cephes-style polynomial evaluated with the same fma
// sequence on every build (bitwise equal across builds, within 2 ulp of expf).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "quants.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define STRATA_V16_AVX512 1
#elif defined(__AVX2__) && ((defined(__FMA__) && defined(__F16C__)) || defined(_MSC_VER))  // MSVC /arch:AVX2 implies both
#include <immintrin.h>
#define STRATA_V16_AVX2 1
#endif

namespace strata {

#if defined(STRATA_V16_AVX512)
struct v16 { __m512 v; };
inline v16 v16_zero() { return {_mm512_setzero_ps()}; }
inline v16 v16_set1(float x) { return {_mm512_set1_ps(x)}; }
inline v16 v16_load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline v16 v16_load(const uint16_t* p) { return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))}; }
inline void v16_store(float* p, v16 a) { _mm512_storeu_ps(p, a.v); }
inline v16 v16_fma(v16 a, v16 b, v16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline v16 v16_add(v16 a, v16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline v16 v16_sub(v16 a, v16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline v16 v16_mul(v16 a, v16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline v16 v16_div(v16 a, v16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline v16 v16_max(v16 a, v16 b) { return {_mm512_max_ps(a.v, b.v)}; }
inline v16 v16_min(v16 a, v16 b) { return {_mm512_min_ps(a.v, b.v)}; }
inline v16 v16_round(v16 a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
// 2^n for integral n in [-126, 127]
inline v16 v16_pow2i(v16 n) {
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127)), 23);
    return {_mm512_castsi512_ps(e)};
}
#elif defined(STRATA_V16_AVX2)
struct v16 { __m256 lo, hi; };
inline v16 v16_zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline v16 v16_set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline v16 v16_load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline v16 v16_load(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
inline void v16_store(float* p, v16 a) { _mm256_storeu_ps(p, a.lo); _mm256_storeu_ps(p + 8, a.hi); }
inline v16 v16_fma(v16 a, v16 b, v16 c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
inline v16 v16_add(v16 a, v16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline v16 v16_sub(v16 a, v16 b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
inline v16 v16_mul(v16 a, v16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline v16 v16_div(v16 a, v16 b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
inline v16 v16_max(v16 a, v16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline v16 v16_min(v16 a, v16 b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
inline v16 v16_round(v16 a) {
    constexpr int m = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {_mm256_round_ps(a.lo, m), _mm256_round_ps(a.hi, m)};
}
inline v16 v16_pow2i(v16 n) {
    const __m256i b = _mm256_set1_epi32(127);
    __m256i lo = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n.lo), b), 23);
    __m256i hi = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n.hi), b), 23);
    return {_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi)};
}
#else
struct v16 { float f[16]; };
inline v16 v16_zero() { return v16{}; }
inline v16 v16_set1(float x) { v16 r; for (int i = 0; i < 16; i++) r.f[i] = x; return r; }
inline v16 v16_load(const float* p) { v16 r; std::memcpy(r.f, p, sizeof(r.f)); return r; }
inline v16 v16_load(const uint16_t* p) { v16 r; for (int i = 0; i < 16; i++) r.f[i] = fp16_to_fp32(p[i]); return r; }
inline void v16_store(float* p, v16 a) { std::memcpy(p, a.f, sizeof(a.f)); }
#define STRATA_V16_LANEWISE(name, expr) \
    inline v16 name(v16 a, v16 b) { v16 r; for (int i = 0; i < 16; i++) r.f[i] = (expr); return r; }
STRATA_V16_LANEWISE(v16_add, a.f[i] + b.f[i])
STRATA_V16_LANEWISE(v16_sub, a.f[i] - b.f[i])
STRATA_V16_LANEWISE(v16_mul, a.f[i] * b.f[i])
STRATA_V16_LANEWISE(v16_div, a.f[i] / b.f[i])
STRATA_V16_LANEWISE(v16_max, a.f[i] > b.f[i] ? a.f[i] : b.f[i])
STRATA_V16_LANEWISE(v16_min, a.f[i] < b.f[i] ? a.f[i] : b.f[i])
#undef STRATA_V16_LANEWISE
inline v16 v16_fma(v16 a, v16 b, v16 c) { v16 r; for (int i = 0; i < 16; i++) r.f[i] = std::fma(a.f[i], b.f[i], c.f[i]); return r; }
inline v16 v16_round(v16 a) { v16 r; for (int i = 0; i < 16; i++) r.f[i] = std::nearbyint(a.f[i]); return r; }
inline v16 v16_pow2i(v16 n) {
    v16 r;
    for (int i = 0; i < 16; i++) {
        uint32_t e = uint32_t(int32_t(n.f[i]) + 127) << 23;
        std::memcpy(&r.f[i], &e, 4);
    }
    return r;
}
#endif

// Fixed-tree reductions (the same order on every build).
inline float v16_reduce_add(v16 a) {
    float f[16];
    v16_store(f, a);
    for (int s = 8; s >= 1; s /= 2)
        for (int i = 0; i < s; i++) f[i] = f[i] + f[i + s];
    return f[0];
}
inline float v16_reduce_max(v16 a) {
    float f[16];
    v16_store(f, a);
    for (int s = 8; s >= 1; s /= 2)
        for (int i = 0; i < s; i++) f[i] = f[i] > f[i + s] ? f[i] : f[i + s];
    return f[0];
}

// exp(x) for x in [-87, 88] (clamped outside): x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6
// polynomial (Cephes expf coefficients), times 2^n.
inline v16 v16_exp(v16 x) {
    x = v16_min(v16_max(x, v16_set1(-87.0f)), v16_set1(88.0f));
    v16 n = v16_round(v16_mul(x, v16_set1(1.44269504088896341f)));
    v16 r = v16_fma(n, v16_set1(-0.693359375f), x);
    r = v16_fma(n, v16_set1(2.12194440e-4f), r);
    v16 p = v16_set1(1.9875691500e-4f);
    p = v16_fma(p, r, v16_set1(1.3981999507e-3f));
    p = v16_fma(p, r, v16_set1(8.3334519073e-3f));
    p = v16_fma(p, r, v16_set1(4.1665795894e-2f));
    p = v16_fma(p, r, v16_set1(1.6666665459e-1f));
    p = v16_fma(p, r, v16_set1(5.0000001201e-1f));
    v16 r2 = v16_mul(r, r);
    p = v16_fma(p, r2, v16_add(r, v16_set1(1.0f)));
    return v16_mul(p, v16_pow2i(n));
}

}  // namespace strata
