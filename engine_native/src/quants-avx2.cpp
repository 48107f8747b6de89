// AVX2 + FMA products: compiled only when the compiler targets AVX2 but not the AVX-512 set of
// quants-avx512.cpp; see quants-kernels.h for the macro test.
#include "quants-kernels.h"

#if defined(STRATA_SIMD_AVX2)
namespace strata {
matmul_fn simd_matmul_for(int32_t) { return nullptr; }
const char* simd_build_name() { return "avx2"; }
}  // namespace strata
#endif
