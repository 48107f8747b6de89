// The CUDA backend's product kernels, one for decode and one for prefill, with one k-order between
// them: y = x @ W^T with W in any supported GGUF type, dequantized to f16 (bf16 for BF16 weights) in
// shared memory and multiplied on tensor cores (WMMA 16x16x16, f32 accumulation); plus the embedding
// lookup.
//
// Not here: the CPU's 8-bit activation formats. The GPU multiplies f16 activations (x clamped to
// +-65504) with f16-rounded weights, so its logits differ from the CPU backend's within the parity
// tests' tolerance, never bitwise.
//
// Bitwise rule on the GPU: the k-order of an output (token t, weight row r) is fixed by n_cols alone.
// The columns are cut into chunks of k_chunk; a chunk's partial sum is the sequence of mma steps over
// its k = 0, 16, 32, ... starting from zero, and the output is 0 + p0 + p1 + ... in chunk order (f32
// adds). The prefill kernel walks the chunks in order inside one warp; the decode kernel gives each
// warp of a block its own chunk (so a decode row keeps many warps busy and each warp's chain is short)
// and adds the partials in chunk order. Both give the same floats, so decode == prefill of one more
// token, and a row never depends on its batch.
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
constexpr int k_dec_warps = 4;             // decode: at most this many chunks in flight per 16-row tile
constexpr int k_dec_rows = 16;             // decode: weight rows a block (one mma tile)
constexpr int k_stage_pitch = 272;         // decode: staged bytes per row and chunk (Q8_0's 8 x 34, the most)

// y (n_tok, n_out) = x (n_tok, n_cols) @ W^T for prefill, W (n_out, n_cols) of weight type TYPE.
// Launch: grid (ceil(n_out / (16 * WARPS)), ceil(n_tok / (16 * TN))), block (32 * WARPS). Warp w computes
// weight rows [16w, 16w + 16) of the block's tile for its 16 * TN tokens, TN accumulator fragments.
// The tile shape changes only which outputs a block holds, never the k-order of any one of them.
template <int TYPE, typename T, int TN, int WARPS>
__global__ void __launch_bounds__(32 * WARPS)
matmul_kernel(const uint8_t* __restrict__ w, size_t w_row_bytes, int64_t n_out, int64_t n_cols,
              const float* __restrict__ x, int64_t n_tok, float* __restrict__ y) {
    constexpr int k_bm = 16 * WARPS;   // weight rows a block
    constexpr int BN = 16 * TN;        // tokens a block
    constexpr int LDC = BN + 4;
    __shared__ __align__(32) T a_sh[k_bm * k_ld];     // (k_bm rows, k_bk) weights of this k step
    __shared__ __align__(32) T b_sh[BN * k_ld];       // (BN tokens, k_bk) activations, k contiguous
    __shared__ __align__(32) float c_sh[k_bm * LDC];  // (k_bm rows, BN tokens) results
    const int tid = threadIdx.x, warp = tid / 32;
    const int64_t m0 = int64_t(blockIdx.x) * k_bm, n0 = int64_t(blockIdx.y) * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[TN], total[TN];   // chunk, sum of chunks
    for (int j = 0; j < TN; j++) wmma::fill_fragment(total[j], 0.0f);

    for (int64_t k0 = 0; k0 < n_cols; k0 += k_bk) {
        if (k0 % k_chunk == 0) {
            for (int j = 0; j < TN; j++) wmma::fill_fragment(acc[j], 0.0f);
        }
        // compile-time trip counts, unrolled: a thread's 16 loads are in flight together
#pragma unroll
        for (int j = 0; j < k_bm * k_bk / (32 * WARPS); j++) {
            const int i = tid + j * 32 * WARPS;
            const int r = i / k_bk, kk = i % k_bk;
            const int64_t gr = m0 + r, gk = k0 + kk;
            const float v = (gr < n_out && gk < n_cols) ? cuda_dq::dq<TYPE>(w + size_t(gr) * w_row_bytes, gk) : 0.0f;
            a_sh[r * k_ld + kk] = to_elem<T>(v);
        }
#pragma unroll
        for (int j = 0; j < BN * k_bk / (32 * WARPS); j++) {
            const int i = tid + j * 32 * WARPS;
            const int t = i / k_bk, kk = i % k_bk;
            const int64_t gt = n0 + t, gk = k0 + kk;
            const float v = (gt < n_tok && gk < n_cols) ? x[gt * n_cols + gk] : 0.0f;
            b_sh[t * k_ld + kk] = to_elem<T>(v);
        }
        __syncthreads();
        for (int kk = 0; kk < k_bk; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
            wmma::load_matrix_sync(a, a_sh + warp * 16 * k_ld + kk, k_ld);
            for (int j = 0; j < TN; j++) {
                // B (k, token) at b_sh[token * k_ld + k]: column-major with leading dimension k_ld
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
                wmma::load_matrix_sync(b, b_sh + j * 16 * k_ld + kk, k_ld);
                wmma::mma_sync(acc[j], a, b, acc[j]);
            }
        }
        if ((k0 + k_bk) % k_chunk == 0 || k0 + k_bk >= n_cols) {   // the chunk's partial joins the sum
            for (int j = 0; j < TN; j++) {
                for (int e = 0; e < total[j].num_elements; e++) total[j].x[e] += acc[j].x[e];
            }
        }
        __syncthreads();   // a_sh / b_sh are refilled next step
    }
    for (int j = 0; j < TN; j++) {
        wmma::store_matrix_sync(c_sh + warp * 16 * LDC + j * 16, total[j], LDC, wmma::mem_row_major);
    }
    __syncthreads();
    for (int i = tid; i < k_bm * BN; i += blockDim.x) {
        const int t = i / k_bm, r = i % k_bm;   // consecutive threads: consecutive weight rows of y
        const int64_t gt = n0 + t, gr = m0 + r;
        if (gt < n_tok && gr < n_out) y[gt * n_out + gr] = c_sh[r * LDC + t];
    }
}

// y (n_tok, n_out) = x (n_tok, n_cols) @ W^T for decode, n_tok <= 16: one block per 16 weight rows,
// its warps on successive chunks (warp w on chunks w, w + W, ...), each chunk's partial from zero over
// its k steps, the partials added to the block's sum in chunk order after each round. Same floats as
// matmul_kernel.
// Several products of one launch (cuda_matmul_many): product i owns blocks [first_block[i], first_block[i + 1]).
struct product_set {
    const uint8_t* w[k_max_products];
    float* y[k_max_products];
    int64_t n_out[k_max_products];
    int64_t first_block[k_max_products + 1];
    int n;
};

// Launch: grid (sum over products of ceil(n_out / 16)), block (32 * W), W = min(k_dec_warps, number of chunks).
template <int TYPE, typename T>
__global__ void __launch_bounds__(32 * k_dec_warps)
matmul_decode_kernel(product_set ps, size_t w_row_bytes, int64_t n_cols, const float* __restrict__ x, int64_t n_tok) {
    int which = 0;
    while (which + 1 < ps.n && int64_t(blockIdx.x) >= ps.first_block[which + 1]) which++;
    const uint8_t* __restrict__ w = ps.w[which];
    float* __restrict__ y = ps.y[which];
    const int64_t n_out = ps.n_out[which];
    using BS = block_shape<TYPE>;
    constexpr int k_stage = staged<TYPE> ? k_dec_rows * k_stage_pitch : 2;
    __shared__ __align__(16) uint8_t stage[k_dec_warps][k_stage];             // this chunk's weight bytes
    __shared__ __align__(32) T a_sh[k_dec_warps][k_dec_rows * k_ld];         // (16 rows, k_bk) weights
    __shared__ __align__(32) T b_sh[k_dec_warps][16 * k_ld];                 // (16 tokens, k_bk) activations
    __shared__ __align__(32) float part[k_dec_warps][k_dec_rows * 16];       // chunk partials, (row, token)
    __shared__ float total[k_dec_rows * 16];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, n_warps = blockDim.x / 32;
    const int64_t m0 = (int64_t(blockIdx.x) - ps.first_block[which]) * k_dec_rows;
    const int64_t n_chunks = (n_cols + k_chunk - 1) / k_chunk;
    for (int i = tid; i < k_dec_rows * 16; i += blockDim.x) total[i] = 0.0f;

    for (int64_t round = 0; round < n_chunks; round += n_warps) {
        const int64_t c = round + warp;
        if (c < n_chunks) {
            const int64_t kb = c * k_chunk, ke = kb + k_chunk < n_cols ? kb + k_chunk : n_cols;
            const uint8_t* rows = w;   // staged: stage[warp], pitch k_stage_pitch; else W in place
            size_t pitch = w_row_bytes;
            if constexpr (staged<TYPE>) {
                const int64_t off = kb / BS::cols * BS::bytes, halves = (ke - kb) / BS::cols * BS::bytes / 2;
                uint16_t* dst = reinterpret_cast<uint16_t*>(stage[warp]);
#pragma unroll 8
                for (int64_t i = lane; i < k_dec_rows * halves; i += 32) {
                    const int64_t r = i / halves, hw = i % halves, gr = m0 + r;
                    dst[r * (k_stage_pitch / 2) + hw] =
                        gr < n_out ? *reinterpret_cast<const uint16_t*>(w + size_t(gr) * w_row_bytes + size_t(off) + 2 * hw)
                                   : uint16_t(0);
                }
                __syncwarp();
                rows = stage[warp];
                pitch = k_stage_pitch;
            }
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int64_t k0 = kb; k0 < ke; k0 += k_bk) {
                const int64_t gk = k0 + lane;   // this lane's column of the step, every row
#pragma unroll
                for (int r = 0; r < k_dec_rows; r++) {
                    float v = 0.0f;
                    if (m0 + r < n_out && gk < n_cols) {
                        v = staged<TYPE> ? cuda_dq::dq<TYPE>(rows + size_t(r) * pitch, gk - kb)
                                         : cuda_dq::dq<TYPE>(rows + size_t(m0 + r) * pitch, gk);
                    }
                    a_sh[warp][r * k_ld + lane] = to_elem<T>(v);
                }
#pragma unroll
                for (int t = 0; t < 16; t++) {
                    const float v = (t < n_tok && gk < n_cols) ? x[t * n_cols + gk] : 0.0f;
                    b_sh[warp][t * k_ld + lane] = to_elem<T>(v);
                }
                __syncwarp();
                for (int kk = 0; kk < k_bk; kk += 16) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
                    wmma::load_matrix_sync(a, a_sh[warp] + kk, k_ld);
                    wmma::load_matrix_sync(b, b_sh[warp] + kk, k_ld);
                    wmma::mma_sync(acc, a, b, acc);
                }
                __syncwarp();   // a_sh / b_sh are refilled next step
            }
            wmma::store_matrix_sync(part[warp], acc, 16, wmma::mem_row_major);
        }
        __syncthreads();
        const int64_t n_parts = n_chunks - round < n_warps ? n_chunks - round : n_warps;
        for (int i = tid; i < k_dec_rows * 16; i += blockDim.x) {
            float sum = total[i];
            for (int64_t p = 0; p < n_parts; p++) sum += part[p][i];   // chunk order
            total[i] = sum;
        }
        __syncthreads();   // part is rewritten next round
    }
    for (int i = tid; i < k_dec_rows * 16; i += blockDim.x) {
        const int t = i / k_dec_rows, r = i % k_dec_rows;   // consecutive threads: consecutive rows of y
        if (t < n_tok && m0 + r < n_out) y[t * n_out + m0 + r] = total[r * 16 + t];
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

template <int TYPE, typename T>
void launch_matmul(size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok, const cuda_product* products,
                   int n_products, cudaStream_t stream) {
    if (n_tok <= 16) {   // decode: a block per 16 weight rows of any of the products, a warp per chunk
        product_set ps{};
        ps.n = n_products;
        for (int i = 0; i < n_products; i++) {
            ps.w[i] = products[i].w;
            ps.y[i] = products[i].y;
            ps.n_out[i] = products[i].n_out;
            ps.first_block[i + 1] = ps.first_block[i] + (products[i].n_out + k_dec_rows - 1) / k_dec_rows;
        }
        const int64_t n_chunks = (n_cols + k_chunk - 1) / k_chunk;
        const int warps = int(n_chunks < k_dec_warps ? n_chunks : k_dec_warps);
        matmul_decode_kernel<TYPE, T><<<unsigned(ps.first_block[n_products]), 32 * warps, 0, stream>>>(
            ps, w_row_bytes, n_cols, x, n_tok);
        return;
    }
    for (int i = 0; i < n_products; i++) {   // prefill: 4 warps, 64 weight rows x 64 tokens a block
        const cuda_product& p = products[i];
        const dim3 grid(unsigned((p.n_out + 63) / 64), unsigned((n_tok + 63) / 64));
        matmul_kernel<TYPE, T, 4, 4><<<grid, 128, 0, stream>>>(p.w, w_row_bytes, p.n_out, n_cols, x, n_tok, p.y);
    }
}

}  // namespace

void cuda_matmul_many(int32_t type, size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok,
                      const cuda_product* products, int n_products, cudaStream_t stream) {
    if (n_products < 1 || n_products > k_max_products) {
        throw cuda_error("matmul: " + std::to_string(n_products) + " products in one call (1 to " +
                         std::to_string(k_max_products) + ")");
    }
    for (int i = 0; i < n_products; i++) {
        if (products[i].n_out <= 0) throw cuda_error("matmul: a product with no output rows");
    }
    if (n_tok <= 0) return;
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
                 int64_t n_tok, float* y, cudaStream_t stream) {
    if (n_tok <= 0 || n_out <= 0) return;
    const cuda_product p{w, n_out, y};
    cuda_matmul_many(type, w_row_bytes, n_cols, x, n_tok, &p, 1, stream);
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
