// The per-lane steps of the AVX2 activation quantizers, shared by the GGUF-row ones (quants-avx2.cpp's
// quant_act_*_avx2) and the packed-row one (quants-packed-avx2.cpp): both must give byte for byte the
// scalar quantizer's output (quants-generic.cpp), so they use these same instructions.
//
// Include only from files compiled for AVX2 (inside their STRATA_SIMD_AVX2 block).
#pragma once

#include <immintrin.h>

namespace strata {
namespace act_avx2 {

inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// roundf of each lane (half away from zero), as round_half_away in quants-generic.cpp.
inline __m256 round_away8(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(abs8(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

// Four (8,) int32 vectors in [-127, 127] -> 32 int8 in element order.
inline __m256i pack_32_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i abcd = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));   // lane-interleaved
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

}  // namespace act_avx2
}  // namespace strata
