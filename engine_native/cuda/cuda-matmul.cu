// The CUDA backend's prefill product kernel and the products' dispatch: y = x @ W^T with W in any
// supported GGUF type, dequantized to f16 (bf16 for BF16 weights) in shared memory and multiplied on
// tensor cores (WMMA 16x16x16, f32 accumulation); plus the embedding lookup.
//
// Not here: the CPU's 8-bit activation formats. The GPU multiplies f16 activations (x clamped to
// +-65504) with f16-rounded weights, so its logits differ from the CPU backend's within the parity
// tests' tolerance, never bitwise. Not here either: the decode kernel (cuda-matmul-decode.cu), which
// cuda_matmul_many calls for 16 tokens or fewer.
//
// Bitwise rule on the GPU: the k-order of an output (token t, weight row r) is fixed by n_cols alone
// (cuda-matmul-common.cuh): chunks of k_chunk columns, each chunk's partial the mma sequence over its
// k steps from zero, the output 0 + p0 + p1 + ... in chunk order. The prefill kernel walks the chunks
// in order; the decode kernel computes the chunks in parallel and adds the partials in the same
// order. Both give the same floats, so decode == prefill of one more token, and a row never depends
// on its batch.
#include <cstdint>
#include <string>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "cuda-dequant.cuh"
#include "cuda-kernels.cuh"
#include "cuda-matmul-common.cuh"
#include "quants.h"

namespace strata {
namespace {

using namespace nvcuda;

using namespace cuda_mm;

// ---------------------------------------------------------------- prefill (n_tok > 16)
//
// A block: k_pf_warps warps, 16 * k_pf_warps weight rows x 16 * TN tokens; warp w holds rows [16w, 16w + 16)
// for all the block's tokens (TN accumulator fragments). Per 256-column chunk: the rows' raw weight bytes
// of the chunk are copied into shared memory once (coalesced 4- or 2-byte loads, every load of a thread
// in flight; a quantized element then costs shared-memory byte reads instead of VRAM round trips); then
// two passes of k_span columns each dequantize the staged bytes into an f16/bf16 tile, convert the
// activations (float4 loads where x and n_cols allow), and run the pass's mma steps. The tile sizes and
// passes change only which outputs a block holds and when operands are staged: every output's arithmetic
// is the k-order above (its chunk's mma steps from zero over k = 0, 16, ... up to the chunk's columns
// rounded up to k_bk, zeros past n_cols; partials added in chunk order), the same floats as decode.
constexpr int k_pf_warps = 4;              // prefill: warps a block, 16 weight rows each
constexpr int k_pf_threads = 32 * k_pf_warps;
constexpr int k_pf_rows = 16 * k_pf_warps;  // prefill: weight rows a block
constexpr int k_span = 128;                // prefill: columns dequantized per pass (half a chunk)
constexpr int k_span_ld = k_span + 8;      // prefill: shared row pitch of a pass, elements (multiple of 8)
constexpr int k_pf_stage_pitch = 272;      // prefill: staged bytes per row and chunk (Q8_0's 8 x 34, the most)
constexpr int64_t k_wide_n_out = 1024;     // products this wide or wider get 64-token tiles, narrower ones 32
static_assert(k_pf_rows * (k_span / 8) % k_pf_threads == 0, "a pass's runs of 8 columns split evenly over the threads");
static_assert(k_chunk % k_span == 0 && k_span % k_bk == 0, "a chunk is whole passes of whole k steps");

// Dynamic shared memory of matmul_prefill_kernel: a_sh (rows, k_span_ld), b_sh (tokens, k_span_ld), stage.
template <int TYPE, typename T, int TN>
constexpr size_t prefill_smem_bytes() {
    return sizeof(T) * size_t(k_pf_rows + 16 * TN) * k_span_ld +
           (staged<TYPE> ? size_t(k_pf_rows) * k_pf_stage_pitch : size_t(0));
}

// stage (k_pf_rows, k_pf_stage_pitch bytes) := the raw bytes of columns [kb, ke) of weight rows m0.., zeros
// past n_out. Word loads when every address is 4-byte aligned, else half-word loads (rows are 2-aligned).
template <int TYPE>
__device__ __forceinline__ void stage_chunk(const uint8_t* __restrict__ w, size_t w_row_bytes, int64_t n_out,
                                            int64_t m0, int64_t kb, int64_t ke, uint8_t* stage, int tid) {
    using BS = block_shape<TYPE>;
    const size_t off = size_t(kb / BS::cols) * BS::bytes;
    const int n_bytes = int((ke - kb) / BS::cols) * BS::bytes;
    if (((reinterpret_cast<uintptr_t>(w) | w_row_bytes | off | size_t(n_bytes)) & 3) == 0) {
        const int n_words = n_bytes / 4;
        uint32_t* dst = reinterpret_cast<uint32_t*>(stage);
#pragma unroll 4
        for (int i = tid; i < k_pf_rows * n_words; i += k_pf_threads) {
            const int r = i / n_words, q = i % n_words;
            const int64_t gr = m0 + r;
            dst[r * (k_pf_stage_pitch / 4) + q] =
                gr < n_out ? *reinterpret_cast<const uint32_t*>(w + size_t(gr) * w_row_bytes + off + 4 * size_t(q)) : 0u;
        }
    } else {
        const int n_halves = n_bytes / 2;
        uint16_t* dst = reinterpret_cast<uint16_t*>(stage);
#pragma unroll 4
        for (int i = tid; i < k_pf_rows * n_halves; i += k_pf_threads) {
            const int r = i / n_halves, q = i % n_halves;
            const int64_t gr = m0 + r;
            dst[r * (k_pf_stage_pitch / 2) + q] =
                gr < n_out ? *reinterpret_cast<const uint16_t*>(w + size_t(gr) * w_row_bytes + off + 2 * size_t(q))
                           : uint16_t(0);
        }
    }
}

// y (n_tok, n_out) = x (n_tok, n_cols) @ W^T for prefill, W (n_out, n_cols) of weight type TYPE.
// Launch: grid (ceil(n_out / k_pf_rows), ceil(n_tok / (16 * TN))), block (k_pf_threads),
// dynamic shared memory prefill_smem_bytes<TYPE, T, TN>().
template <int TYPE, typename T, int TN>
__global__ void __launch_bounds__(k_pf_threads, 4)
matmul_prefill_kernel(const uint8_t* __restrict__ w, size_t w_row_bytes, int64_t n_out, int64_t n_cols,
                      const float* __restrict__ x, int64_t n_tok, float* __restrict__ y) {
    constexpr int BN = 16 * TN;        // tokens a block
    constexpr int LDC = BN + 4;
    static_assert(sizeof(float) * k_pf_rows * LDC <= sizeof(T) * (k_pf_rows + BN) * k_span_ld, "c_sh fits a_sh + b_sh");
    extern __shared__ __align__(128) uint8_t smem[];
    T* a_sh = reinterpret_cast<T*>(smem);                        // (k_pf_rows, k_span) weights of this pass
    T* b_sh = a_sh + k_pf_rows * k_span_ld;                      // (BN tokens, k_span) activations, k contiguous
    uint8_t* stage = reinterpret_cast<uint8_t*>(b_sh + BN * k_span_ld);   // (k_pf_rows, chunk bytes) raw weights
    float* c_sh = reinterpret_cast<float*>(smem);                // (k_pf_rows, BN) results, after the last pass
    const int tid = threadIdx.x, warp = tid / 32;
    const int64_t m0 = int64_t(blockIdx.x) * k_pf_rows, n0 = int64_t(blockIdx.y) * BN;
    const bool x_vec = n_cols % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[TN], total[TN];   // chunk, sum of chunks
    for (int j = 0; j < TN; j++) wmma::fill_fragment(total[j], 0.0f);

    for (int64_t kb = 0; kb < n_cols; kb += k_chunk) {
        const int64_t ke = kb + k_chunk < n_cols ? kb + k_chunk : n_cols;
        const int k_used = int((ke - kb + k_bk - 1) / k_bk) * k_bk;   // columns the chunk's k steps cover
        for (int j = 0; j < TN; j++) wmma::fill_fragment(acc[j], 0.0f);
        if constexpr (staged<TYPE>) {
            stage_chunk<TYPE>(w, w_row_bytes, n_out, m0, kb, ke, stage, tid);
            __syncthreads();
        }
        for (int s0 = 0; s0 < k_used; s0 += k_span) {
            // weights: runs of 8 columns (r, s0 + kk .. + 7) of the chunk, each run's block scales decoded
            // once (dq8); consecutive threads on consecutive runs of a row
#pragma unroll 2
            for (int j = 0; j < k_pf_rows * (k_span / 8) / k_pf_threads; j++) {
                const int i = tid + j * k_pf_threads;
                const int r = i / (k_span / 8), kk = 8 * (i % (k_span / 8));
                const int64_t gr = m0 + r, gk = kb + s0 + kk;
                const uint8_t* src = staged<TYPE> ? stage + r * k_pf_stage_pitch : w + size_t(gr < n_out ? gr : 0) * w_row_bytes;
                const int64_t at = staged<TYPE> ? s0 + kk : gk;   // src's element of column gk
                float v[8];
                if (gr < n_out && gk + 8 <= ke) {
                    cuda_dq::dq8<TYPE>(src, at, v);
                } else {
                    for (int e = 0; e < 8; e++) v[e] = gr < n_out && gk + e < ke ? cuda_dq::dq<TYPE>(src, at + e) : 0.0f;
                }
                store_elem8<T>(a_sh + r * k_span_ld + kk, v);   // 16-byte aligned: k_span_ld * 2, kk * 2 multiples of 16
            }
            // activations: token t's columns [kb + s0, kb + s0 + k_span), zeros past n_tok and n_cols
            if (x_vec) {
#pragma unroll 8
                for (int j = 0; j < BN * (k_span / 4) / k_pf_threads; j++) {
                    const int i = tid + j * k_pf_threads;
                    const int t = i / (k_span / 4), kk = 4 * (i % (k_span / 4));
                    const int64_t gt = n0 + t, gk = kb + s0 + kk;
                    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (gt < n_tok && gk < ke) v = *reinterpret_cast<const float4*>(x + gt * n_cols + gk);
                    T* dst = b_sh + t * k_span_ld + kk;
                    dst[0] = to_elem<T>(v.x);
                    dst[1] = to_elem<T>(v.y);
                    dst[2] = to_elem<T>(v.z);
                    dst[3] = to_elem<T>(v.w);
                }
            } else {
#pragma unroll 8
                for (int j = 0; j < BN * k_span / k_pf_threads; j++) {
                    const int i = tid + j * k_pf_threads;
                    const int t = i / k_span, kk = i % k_span;
                    const int64_t gt = n0 + t, gk = kb + s0 + kk;
                    const float v = (gt < n_tok && gk < ke) ? x[gt * n_cols + gk] : 0.0f;
                    b_sh[t * k_span_ld + kk] = to_elem<T>(v);
                }
            }
            __syncthreads();
            const int s_steps = k_used - s0 < k_span ? k_used - s0 : k_span;
            for (int kk = 0; kk < s_steps; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::load_matrix_sync(a, a_sh + warp * 16 * k_span_ld + kk, k_span_ld);
                for (int j = 0; j < TN; j++) {
                    // B (k, token) at b_sh[token * k_span_ld + k]: column-major with leading dimension k_span_ld
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
                    wmma::load_matrix_sync(b, b_sh + j * 16 * k_span_ld + kk, k_span_ld);
                    wmma::mma_sync(acc[j], a, b, acc[j]);
                }
            }
            __syncthreads();   // a_sh / b_sh (and, after the last pass, stage) are refilled next
        }
        for (int j = 0; j < TN; j++) {   // the chunk's partial joins the sum, in chunk order
            for (int e = 0; e < total[j].num_elements; e++) total[j].x[e] += acc[j].x[e];
        }
    }
    for (int j = 0; j < TN; j++) {
        wmma::store_matrix_sync(c_sh + warp * 16 * LDC + j * 16, total[j], LDC, wmma::mem_row_major);
    }
    __syncthreads();
    for (int i = tid; i < k_pf_rows * BN; i += k_pf_threads) {
        const int t = i / k_pf_rows, r = i % k_pf_rows;   // consecutive threads: consecutive weight rows of y
        const int64_t gt = n0 + t, gr = m0 + r;
        if (gt < n_tok && gr < n_out) y[gt * n_out + gr] = c_sh[r * LDC + t];
    }
}

// x (n_rows, n_embd) := dequantized token_embd rows; mirrors forward.cpp's dequantize_row lookup.
// Launch: grid (n_rows), block (256).
template <int TYPE>
__global__ void embed_kernel(const uint8_t* w, size_t w_row_bytes, const cuda_dev_row* rows, int64_t n_embd,
                             float* x) {
    const int64_t r = blockIdx.x;
    const uint8_t* src = w + size_t(rows[r].token) * w_row_bytes;
    for (int64_t i = threadIdx.x; i < n_embd; i += blockDim.x) x[r * n_embd + i] = cuda_dq::dq<TYPE>(src, i);
}

// One prefill product with TN-token tiles; the kernel's shared memory limit is raised once (above 48 KiB).
template <int TYPE, typename T, int TN>
void launch_prefill(const cuda_product& p, size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok,
                    cudaStream_t stream) {
    constexpr size_t smem = prefill_smem_bytes<TYPE, T, TN>();
    static const cudaError_t raised = cudaFuncSetAttribute(matmul_prefill_kernel<TYPE, T, TN>,
                                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    cuda_check(raised, "matmul: raising the prefill kernel's shared memory");
    const dim3 grid(unsigned((p.n_out + k_pf_rows - 1) / k_pf_rows), unsigned((n_tok + 16 * TN - 1) / (16 * TN)));
    matmul_prefill_kernel<TYPE, T, TN><<<grid, k_pf_threads, smem, stream>>>(p.w, w_row_bytes, p.n_out, n_cols, x,
                                                                              n_tok, p.y);
}

template <int TYPE, typename T>
void launch_matmul(size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok, const cuda_product* products,
                   int n_products, cudaStream_t stream) {
    for (int i = 0; i < n_products; i++) {   // prefill: 64 weight rows a block; narrow products 32 tokens, else 64
        const cuda_product& p = products[i];
        if (p.n_out < k_wide_n_out) {
            launch_prefill<TYPE, T, 2>(p, w_row_bytes, n_cols, x, n_tok, stream);
        } else {
            launch_prefill<TYPE, T, 4>(p, w_row_bytes, n_cols, x, n_tok, stream);
        }
    }
}

}  // namespace

void cuda_matmul_many(int32_t type, size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok,
                      const cuda_product* products, int n_products, const cuda_decode_scratch& scratch,
                      cudaStream_t stream) {
    if (n_products < 1 || n_products > k_max_products) {
        throw cuda_error("matmul: " + std::to_string(n_products) + " products in one call (1 to " +
                         std::to_string(k_max_products) + ")");
    }
    for (int i = 0; i < n_products; i++) {
        if (products[i].n_out <= 0) throw cuda_error("matmul: a product with no output rows");
    }
    if (n_tok <= 0) return;
    if (n_tok <= 16) {   // decode: its own kernel (cuda-matmul-decode.cu), the same floats
        cuda_decode_products(type, w_row_bytes, n_cols, x, n_tok, products, n_products, scratch, stream);
        return;
    }
    const auto* ps = products;
    switch (type) {
        case TYPE_F32: launch_matmul<TYPE_F32, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        case TYPE_F16: launch_matmul<TYPE_F16, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        case TYPE_BF16:
            launch_matmul<TYPE_BF16, __nv_bfloat16>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream);
            break;
        case TYPE_Q4_0: launch_matmul<TYPE_Q4_0, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        case TYPE_Q4_1: launch_matmul<TYPE_Q4_1, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        case TYPE_Q5_0: launch_matmul<TYPE_Q5_0, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        case TYPE_Q5_1: launch_matmul<TYPE_Q5_1, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        case TYPE_Q8_0: launch_matmul<TYPE_Q8_0, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        case TYPE_Q4_K: launch_matmul<TYPE_Q4_K, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        case TYPE_Q5_K: launch_matmul<TYPE_Q5_K, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        case TYPE_Q6_K: launch_matmul<TYPE_Q6_K, __half>(w_row_bytes, n_cols, x, n_tok, ps, n_products, stream); break;
        default: throw cuda_error("matmul: weight type id " + std::to_string(type) + " has no CUDA kernel");
    }
    cuda_check(cudaGetLastError(), "matmul kernel launch");
}

void cuda_matmul(int32_t type, const uint8_t* w, size_t w_row_bytes, int64_t n_out, int64_t n_cols, const float* x,
                 int64_t n_tok, float* y, const cuda_decode_scratch& scratch, cudaStream_t stream) {
    if (n_tok <= 0 || n_out <= 0) return;
    const cuda_product p{w, n_out, y};
    cuda_matmul_many(type, w_row_bytes, n_cols, x, n_tok, &p, 1, scratch, stream);
}

void cuda_embed(int32_t type, const uint8_t* w, size_t w_row_bytes, const cuda_dev_row* rows, int64_t n_rows,
                int64_t n_embd, float* x, cudaStream_t stream) {
    if (n_rows <= 0) return;
    const unsigned grid = unsigned(n_rows);
    switch (type) {
        case TYPE_F32: embed_kernel<TYPE_F32><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_F16: embed_kernel<TYPE_F16><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_BF16: embed_kernel<TYPE_BF16><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_Q4_0: embed_kernel<TYPE_Q4_0><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_Q4_1: embed_kernel<TYPE_Q4_1><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_Q5_0: embed_kernel<TYPE_Q5_0><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_Q5_1: embed_kernel<TYPE_Q5_1><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_Q8_0: embed_kernel<TYPE_Q8_0><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_Q4_K: embed_kernel<TYPE_Q4_K><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_Q5_K: embed_kernel<TYPE_Q5_K><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        case TYPE_Q6_K: embed_kernel<TYPE_Q6_K><<<grid, 256, 0, stream>>>(w, w_row_bytes, rows, n_embd, x); break;
        default: throw cuda_error("embedding: weight type id " + std::to_string(type) + " has no CUDA kernel");
    }
    cuda_check(cudaGetLastError(), "embed_kernel launch");
}

}  // namespace strata
