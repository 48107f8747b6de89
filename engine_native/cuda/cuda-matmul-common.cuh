// Device helpers shared by the product kernels (cuda-matmul.cu: prefill, dispatch, embedding;
// cuda-matmul-decode.cu: decode): tile constants, the k-order's chunk, the f16/bf16 rounding of
// operands, block shapes of the quantized types.
//
// Not here: kernels. The k-order every product kernel must keep (the bitwise rule): the columns are
// cut into chunks of k_chunk; a chunk's partial is the mma sequence (WMMA 16x16x16, f32) over its k
// steps from zero; the output is 0 + p0 + p1 + ... in chunk order.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "quants.h"

namespace strata {
namespace cuda_mm {

constexpr int k_bk = 32;                   // k per step: one 32-block (an eighth of a K-quant super-block)
constexpr int k_ld = k_bk + 8;             // shared row pitch in elements (multiple of 8, fewer bank conflicts)
constexpr int k_chunk = 256;               // columns per chunk of the k-order (a K-quant super-block)

template <typename T>
__device__ __forceinline__ T to_elem(float v);
template <>
__device__ __forceinline__ __half to_elem<__half>(float v) {
    return __float2half_rn(fminf(65504.0f, fmaxf(-65504.0f, v)));
}
template <>
__device__ __forceinline__ __nv_bfloat16 to_elem<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// to_elem of a and b packed in one word (a in the low half): each rounded exactly as to_elem rounds it,
// with one paired conversion instruction instead of two, for 32-bit and wider shared-memory stores.
template <typename T>
__device__ __forceinline__ uint32_t to_elem2(float a, float b);
template <>
__device__ __forceinline__ uint32_t to_elem2<__half>(float a, float b) {
    const __half2 h = __floats2half2_rn(fminf(65504.0f, fmaxf(-65504.0f, a)), fminf(65504.0f, fmaxf(-65504.0f, b)));
    return *reinterpret_cast<const uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t to_elem2<__nv_bfloat16>(float a, float b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
}
// Eight floats as to_elem<T> rounds them, at dst (16-byte aligned): one 128-bit store.
template <typename T>
__device__ __forceinline__ void store_elem8(T* dst, const float* v) {
    *reinterpret_cast<uint4*>(dst) =
        make_uint4(to_elem2<T>(v[0], v[1]), to_elem2<T>(v[2], v[3]), to_elem2<T>(v[4], v[5]), to_elem2<T>(v[6], v[7]));
}

// Columns and bytes of one block of a quantized TYPE (float types are not staged: no shape).
template <int TYPE> struct block_shape;
template <> struct block_shape<TYPE_Q4_0> { static constexpr int cols = 32, bytes = 18; };
template <> struct block_shape<TYPE_Q4_1> { static constexpr int cols = 32, bytes = 20; };
template <> struct block_shape<TYPE_Q5_0> { static constexpr int cols = 32, bytes = 22; };
template <> struct block_shape<TYPE_Q5_1> { static constexpr int cols = 32, bytes = 24; };
template <> struct block_shape<TYPE_Q8_0> { static constexpr int cols = 32, bytes = 34; };
template <> struct block_shape<TYPE_Q4_K> { static constexpr int cols = 256, bytes = 144; };
template <> struct block_shape<TYPE_Q5_K> { static constexpr int cols = 256, bytes = 176; };
template <> struct block_shape<TYPE_Q6_K> { static constexpr int cols = 256, bytes = 210; };

// Quantized rows are staged into shared memory a chunk at a time (one round trip to VRAM per chunk
// instead of one per k step); float rows are read in place (an element is one aligned load anyway).
template <int TYPE>
constexpr bool staged = !(TYPE == TYPE_F32 || TYPE == TYPE_F16 || TYPE == TYPE_BF16);

}  // namespace cuda_mm
}  // namespace strata
