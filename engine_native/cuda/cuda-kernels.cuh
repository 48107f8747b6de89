// Launchers of the CUDA backend's kernels (host functions, one stream argument each): the seam between
// cuda-backend.cu (which owns buffers, shapes and order) and the kernel files (which own the arithmetic).
//
// Not here: memory, the layer loop, host<->device copies (cuda-backend.cu). Every launcher checks its
// launch with cudaGetLastError and throws cuda_error naming the kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include <string>

#include <cuda_runtime.h>

#include "cuda-backend.h"

namespace strata {

// Programmatic dependent launch (sm_90 and newer; no-ops below): a decode product launched with
// cuda_decode_scratch::pdl starts while the kernel before it runs, stages its weights (constant), and
// waits (pdl_wait) before it reads anything an earlier kernel wrote. The kernels that precede a
// product call pdl_launch_dependents first thing, so the product's blocks launch while they run.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {   // every earlier kernel done and its writes visible
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Throws cuda_error "<what>: <CUDA's message>" unless e is cudaSuccess.
inline void cuda_check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw cuda_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// One row of a forward batch on the device: where its context's KV lives and where the row goes.
// A context's KV is one allocation laid out (n_layer, 2 [K, V], capacity, kv_row_bytes).
struct cuda_dev_row {
    uint8_t* kv;        // the context's KV allocation
    int64_t capacity;   // tokens
    int64_t pos;        // position of this row's token
    int32_t token;
    int32_t pad_;
};

// Shapes the per-row kernels share.
struct cuda_shape {
    int64_t n_embd, n_head, n_head_kv, head_dim, n_rot, n_ff;
    int32_t rope_neox;       // 0: ROPE_NORM (adjacent pairs), 1: ROPE_NEOX (halves)
    int32_t kv_type;         // TYPE_F16, TYPE_F32 or TYPE_Q8_0
    size_t kv_row_bytes;
    float rms_eps;
};

// cuda-matmul.cu: y (n_tok, n_out) = x (n_tok, n_cols) @ W^T, W (n_out, n_cols) of any supported type.
// (scratch: the decode kernel's, see cuda_decode_scratch below; unused by prefill-sized calls)
struct cuda_decode_scratch;
void cuda_matmul(int32_t type, const uint8_t* w, size_t w_row_bytes, int64_t n_out, int64_t n_cols, const float* x,
                 int64_t n_tok, float* y, const cuda_decode_scratch& scratch, cudaStream_t stream);
// Several products of the same x by weights of one type and width (Q, K, V; gate, up): one launch when
// decode-sized (n_tok <= 16), else one each. Every y is the same floats as cuda_matmul gives it alone.
struct cuda_product {
    const uint8_t* w;   // (n_out, n_cols), w_row_bytes a row
    int64_t n_out;
    float* y;           // (n_tok, n_out)
};
constexpr int k_max_products = 3;
// Device scratch of the decode kernel (cuda-matmul-decode.cu): per-chunk partial sums and a counter
// per 16-row tile (zeroed once at allocation; every launch leaves them zero).
struct cuda_decode_scratch {
    float* partials = nullptr;
    unsigned* counters = nullptr;
    int64_t partial_floats = 0, n_counters = 0;
    bool pdl = false;   // launch the decode kernel as a programmatic dependent (sm_90+ devices only)
};
// Sizes a decode of n_rows_total rows (all products of one call) by n_cols columns needs.
int64_t cuda_decode_partial_floats(int64_t n_cols, int64_t n_rows_total);
int64_t cuda_decode_counters(int64_t n_rows_total);
void cuda_matmul_many(int32_t type, size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok,
                      const cuda_product* products, int n_products, const cuda_decode_scratch& scratch,
                      cudaStream_t stream);
// The decode branch of cuda_matmul_many (n_tok <= 16); throws when the scratch is too small.
void cuda_decode_products(int32_t type, size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok,
                          const cuda_product* products, int n_products, const cuda_decode_scratch& scratch,
                          cudaStream_t stream);
// x (n_rows, n_embd) := rows of token_embd (any supported type) at each row's token.
void cuda_embed(int32_t type, const uint8_t* w, size_t w_row_bytes, const cuda_dev_row* rows, int64_t n_rows,
                int64_t n_embd, float* x, cudaStream_t stream);

// cuda-kernels.cu
// If add: x += add (written back). Then y[j] = rms_norm(x[src_j]) * w for j < n_rows, where src_j =
// idx ? idx[j] : j. x, add: (*, n); y: (n_rows, n).
void cuda_rms_norm(float* x, const float* add, const int32_t* idx, const float* w, float* y, int64_t n_rows,
                   int64_t n, float eps, cudaStream_t stream);
// gate := silu(gate) * up, both (n_rows, n_ff).
void cuda_swiglu(float* gate, const float* up, int64_t n_rows, int64_t n_ff, cudaStream_t stream);
// Per row: biases (when given), Q/K head RMS norms (when given), RoPE with the row's (n_rot / 2, 2)
// cos/sin table, then K and V stored into the row's context at its position in layer `layer`.
// q (n_rows, q_dim), k/v (n_rows, kv_dim), rope_cs (n_rows, n_rot).
void cuda_qkv_post(float* q, float* k, float* v, const float* bq, const float* bk, const float* bv,
                   const float* q_norm, const float* k_norm, const float* rope_cs, const cuda_dev_row* rows,
                   int64_t n_rows, int64_t layer, const cuda_shape& s, cudaStream_t stream);
// Causal grouped-query attention of every row over its context's positions [0, pos]:
// q (n_rows, q_dim) -> out (n_rows, q_dim). A row's positions are split into parts (a function of its
// length and the model shape only) whose partial sums go to `scratch`, then merged in part order.
// scratch: at least cuda_attention_scratch_floats(n_rows, ...) floats, device memory.
void cuda_attention(const float* q, float* out, const cuda_dev_row* rows, int64_t n_rows, int64_t layer,
                    const cuda_shape& s, float* scratch, cudaStream_t stream);
// Floats of attention scratch a batch of max_rows rows needs: (max_rows, n_head, parts, head_dim + 2).
int64_t cuda_attention_scratch_floats(int64_t max_rows, int64_t n_head, int64_t n_head_kv, int64_t head_dim);

}  // namespace strata
