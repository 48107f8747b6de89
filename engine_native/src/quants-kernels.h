// Internal seam between quants.cpp (validation, dispatch) and the kernel files: the scalar reference
// functions of quants-generic.cpp and the one SIMD table a build compiles (quants-avx512.cpp or
// quants-avx2.cpp, chosen by the compiler's macros below).
//
// Not here: argument checks (quants.cpp does them before any kernel runs) or block layouts
// (quants-blocks.h). Callers of these functions pass validated sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

// F16C and FMA: gcc/clang name them; MSVC does not, but /arch:AVX2 (and above) implies both.
#if (defined(__F16C__) && defined(__FMA__)) || (defined(_MSC_VER) && defined(__AVX2__))
#define STRATA_HAVE_F16C_FMA 1
#include <immintrin.h>
#endif

// The AVX-512 files use GNU inline asm and builtins (gcc, clang, clang-cl); MSVC gets the AVX2 set.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(STRATA_HAVE_F16C_FMA) && (defined(__GNUC__) || defined(__clang__))
#define STRATA_SIMD_AVX512 1
#elif defined(__AVX2__) && defined(STRATA_HAVE_F16C_FMA)
#define STRATA_SIMD_AVX2 1
#endif

namespace strata {

// Scalar dot product of one weight row with one quantized activation row (n elements).
using dot_fn = float (*)(int64_t n, const void* w_row, const void* xq_row);
using dequant_fn = void (*)(const void* src, float* dst, int64_t n);
using quant_act_fn = void (*)(const float* x, void* dst, int64_t n);

// Y[t * y_stride + (r - r0)] = dot(W[r], Xq[t]); y points at the element of (t = 0, r = r0).
// Every (t, r) goes through the same instruction sequence whatever n_tok or the row range: that is
// what makes matvec (n_tok = 1) and matmul bitwise equal.
using matmul_fn = void (*)(const void* w, size_t w_row_bytes, const void* xq, size_t xq_row_bytes,
                           int64_t n_tok, float* y, int64_t y_stride, int64_t n, int64_t r0, int64_t r1);

// quants-generic.cpp: always compiled.
dot_fn generic_dot_for(int32_t weight_type);          // nullptr for an unsupported type
dequant_fn generic_dequant_for(int32_t type);         // also Q8_0 / Q8_1 / Q8_K, for tests
quant_act_fn act_quantizer_for(int32_t act_type);     // Q8_0, Q8_1, Q8_K or F32 (a copy)

// The build's SIMD products (nullptr for a type the build has no fast path for, and for every type
// in a scalar build); defined by exactly one of quants-avx512.cpp / quants-avx2.cpp / quants-generic.cpp.
matmul_fn simd_matmul_for(int32_t weight_type);
const char* simd_build_name();
// The build's products over row-interleaved weights (quants-packed.h), or nullptr (quants-packed-avx512.cpp:
// every packed type; quants-packed-avx2.cpp: Q4_1, Q8_0, IQ4_NL, Q4_K, Q5_K and Q6_K; a scalar build: none). Groups of 16 rows [r0 / 16, ceil(r1 / 16))
// of the packed matrix, n_blocks blocks a row; Y[t * y_stride + r] stored for r0 <= r < r1.
using packed_matmul_fn = void (*)(const uint8_t* packed, int64_t n_blocks, const uint8_t* xp, size_t xp_row_bytes,
                                  int64_t n_tok, float* y, int64_t y_stride, int64_t r0, int64_t r1);
packed_matmul_fn simd_packed_matmul_for(int32_t weight_type);
// The build's activation quantizer straight into prepared packed rows (quants-packed.h) for weight_type, the
// bytes of quantize_act_row then prepare_act_row_packed; nullptr: none (those two steps run).
using packed_act_fn = void (*)(const float* x, uint8_t* dst, int64_t n);
packed_act_fn simd_packed_act_quantizer_for(int32_t weight_type);
// The build's SIMD activation quantizers, byte-identical to act_quantizer_for's (nullptr: none).
quant_act_fn simd_act_quantizer_for(int32_t act_type);
// For benchmarks: n_iter rounds of independent int8 dot-product instructions (VNNI dpbusd, or AVX2
// maddubs+madd) on registers; returns the multiply-adds done (0 in a scalar build). *sink defeats
// dead-code elimination.
int64_t simd_int8_probe(int64_t n_iter, int32_t* sink);

// Exact IEEE half <-> float conversions (round to nearest even), inline for the kernels.
inline float half_to_float(uint16_t h) {
#if defined(STRATA_HAVE_F16C_FMA)
    return _cvtsh_ss(h);
#else
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else {  // subnormal half: normalise
        int e = -1;
        do {
            mant <<= 1;
            ++e;
        } while ((mant & 0x400) == 0);
        bits = sign | uint32_t(112 - e) << 23 | ((mant & 0x3ff) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
#endif
}

inline uint16_t float_to_half(float f) {
#if defined(STRATA_HAVE_F16C_FMA)
    return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return uint16_t(sign | (ax > 0x7f800000u ? 0x7e00 : 0x7c00));  // NaN / Inf
    if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);       // >= 65520 rounds to Inf
    if (ax >= 0x38800000u) {                                     // normal half (>= 2^-14)
        ax += 0xc8000fffu + ((ax >> 13) & 1);                    // rebias exponent, round to even
        return uint16_t(sign | (ax >> 13));
    }
    const uint32_t e = ax >> 23;
    if (e < 102) return uint16_t(sign);                          // below half the smallest subnormal
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;                              // 14 .. 24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
#endif
}

#if defined(__AVX2__)
// quants-blocks.h's q3_K_scales sixteen at a time: the 12 packed bytes at p -> (16,) int8 sc - 32. Reads
// exactly those 12 bytes.
inline __m128i q3_K_scales_x16(const uint8_t* p) {
    const __m128i lo8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));          // bytes 0-7
    int32_t hi4;
    std::memcpy(&hi4, p + 8, 4);                                                          // bytes 8-11
    const __m128i low4 = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(lo8, low4), _mm_and_si128(_mm_srli_epi16(lo8, 4), low4));
    // scale j's high bits: byte j % 4 of hi4, bits 2 (j / 4): 32-bit lane j / 4 shifted by 2 (j / 4)
    const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(hi4), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}
#endif

inline float bf16_to_float(uint16_t h) {
    const uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace strata
