// Quantized weight formats and the products over them: the seam between the model code (which
// owns threads, shapes and buffers) and the kernels (which own block layouts and SIMD).
//
// Not here: threading (callers split rows), model shapes, KV cache. Block layouts follow GGUF /
// ggml exactly (static_assert'ed in quants-blocks.h) so a mapped tensor is used in place.
//
// Bitwise rule: for a given weight row and activation row, matmul() produces exactly the float
// that matvec() produces, whatever n_tok or the row range. Prefill chunking and batch size must
// never change a result (restore/copy parity and batched-decode parity rest on this).
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata {

// GGUF tensor type ids (ggml_type numbering).
enum tensor_type : int32_t {
    TYPE_F32 = 0,
    TYPE_F16 = 1,
    TYPE_Q4_0 = 2,
    TYPE_Q4_1 = 3,
    TYPE_Q5_0 = 6,
    TYPE_Q5_1 = 7,
    TYPE_Q8_0 = 8,
    TYPE_Q8_1 = 9,
    TYPE_Q2_K = 10,
    TYPE_Q3_K = 11,
    TYPE_Q4_K = 12,
    TYPE_Q5_K = 13,
    TYPE_Q6_K = 14,
    TYPE_Q8_K = 15,
    TYPE_IQ4_NL = 20,
    TYPE_IQ4_XS = 23,
    TYPE_BF16 = 30,
    TYPE_MXFP4 = 39,   // gpt-oss experts: 4-bit E2M1 values, one E8M0 (power of two) scale per 32
};

// Name as GGUF spells it ("Q4_1"), or nullptr for an id this build does not know.
const char* type_name(int32_t type);
// True for the weight types the engine computes with (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K
// Q5_K Q6_K IQ4_NL IQ4_XS MXFP4).
bool type_supported(int32_t type);
// Elements per block (1 for float types) and bytes per block.
int64_t type_block_size(int32_t type);
size_t type_block_bytes(int32_t type);
// Bytes of one row of n elements (n a multiple of the block size; throws std::invalid_argument otherwise).
size_t type_row_bytes(int32_t type, int64_t n);

// Dequantize one row of n elements (reference path, also used for embeddings lookups).
void dequantize_row(int32_t type, const void* src, float* dst, int64_t n);

// The activation format a weight type's dot product consumes (Q8_0 blocks, Q8_1, Q8_K, or plain f32
// for float weights), and its row size in bytes for n elements.
int32_t act_type_for(int32_t weight_type);
size_t act_row_bytes(int32_t weight_type, int64_t n);
// Quantize one activation row x (n floats) into the format act_type_for(weight_type) names.
void quantize_act_row(int32_t weight_type, const float* x, void* dst, int64_t n);

// y[r - r0] = dot(W[r], xq) for rows r in [r0, r1). W rows are w_row_bytes apart; xq is one
// activation row from quantize_act_row. n = row length in elements.
void matvec(int32_t weight_type, const void* w, size_t w_row_bytes, const void* xq, float* y,
            int64_t n, int64_t r0, int64_t r1);

// Y[t * y_stride + r] = dot(W[r], Xq[t]) for tokens t in [0, n_tok), rows r in [r0, r1).
// Xq rows are xq_row_bytes apart. Same floats as matvec for every (t, r). Y is indexed by the
// absolute row r (matvec's y by r - r0), so y_stride >= r1 when n_tok > 1. Calls on disjoint row
// ranges may run concurrently (each thread keeps its own scratch).
void matmul(int32_t weight_type, const void* w, size_t w_row_bytes, const void* xq, size_t xq_row_bytes,
            int64_t n_tok, float* y, int64_t y_stride, int64_t n, int64_t r0, int64_t r1);

// The portable scalar versions of the two products, always compiled; tests compare the fast ones
// against these (equal within a stated tolerance; the fast path's own matvec/matmul equal bitwise).
void matvec_generic(int32_t weight_type, const void* w, size_t w_row_bytes, const void* xq, float* y,
                    int64_t n, int64_t r0, int64_t r1);

// fp16 / bf16 conversions used across the engine.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);

// What the build chose: "avx512-vnni", "avx512", "avx2" or "scalar".
const char* simd_name();

}  // namespace strata
