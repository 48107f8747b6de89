// The decode product kernel (n_tok <= 16, cuda_matmul_many's decode branch): y = x @ W^T for one to
// three weights of one type and width, with the k-order of the prefill kernel (cuda-matmul-common.cuh)
// so decode and prefill give the same floats.
//
// Work unit: (256-column chunk, 16 weight rows), one warp. A block holds one chunk and four row tiles:
// it converts the chunk's activations to f16 once, each warp copies its tile's weight bytes for the
// chunk into shared memory with every load in flight (one round trip to VRAM), dequantizes them step
// by step into an mma tile (runs of 8 per lane, dq8: one scale decode per run) and runs the chunk's mma
// sequence from zero. Partials go to `partials`; the
// warp that finishes a tile's last chunk (a counter per tile) adds the tile's partials in chunk order
// and writes y, then resets the counter for the next launch (CUDA graphs replay the same launch).
// So a decode product runs chunks x tiles warps at once (4096 for a 2048 x 8192 product) instead of
// one warp per tile walking the whole row.
//
// Not here: prefill (cuda-matmul.cu), dispatch by type (cuda_matmul_many in cuda-matmul.cu).
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

constexpr int k_tiles = 4;                 // row tiles (warps) a block
constexpr int k_rows = 16;                 // weight rows a tile
constexpr int k_x_ld = k_chunk + 8;        // activation pitch in elements (multiple of 8 for WMMA)
constexpr int k_tile_bytes = k_rows * k_ld * 2;   // a warp's mma tile of weights (T is 2 bytes), reused for its partial
static_assert(k_tile_bytes >= k_rows * 16 * 4, "a tile's partial (16 x 16 floats) fits its mma tile's memory");

// Bytes of one row's chunk of a quantized TYPE (its pitch in the stage); 2 for float types (not staged).
template <int TYPE>
__host__ __device__ constexpr int chunk_row_bytes() {
    if constexpr (staged<TYPE>) {
        return k_chunk / block_shape<TYPE>::cols * block_shape<TYPE>::bytes;
    } else {
        return 2;
    }
}

struct decode_set {   // the products of one launch: product i owns tiles [first_tile[i], first_tile[i + 1])
    const uint8_t* w[k_max_products];
    float* y[k_max_products];
    int64_t n_out[k_max_products];
    int64_t first_tile[k_max_products + 1];
    int n;
};

// Launch: grid (n_chunks, ceil(n_tiles / k_tiles)), block (32 * k_tiles).
// partials: (n_chunks, n_tiles, 16 rows, 16 tokens); counters: (n_tiles,), zero between launches.
template <int TYPE, typename T>
__global__ void __launch_bounds__(32 * k_tiles)
decode_kernel(decode_set ps, size_t w_row_bytes, int64_t n_cols, const float* __restrict__ x, int64_t n_tok,
              float* __restrict__ partials, unsigned* __restrict__ counters) {
    constexpr int CB = chunk_row_bytes<TYPE>();
    __shared__ __align__(32) T xh[16 * k_x_ld];                        // (16 tokens, chunk) activations
    __shared__ __align__(16) uint8_t stage[k_tiles][k_rows * CB];      // a tile's weight bytes of the chunk
    __shared__ __align__(32) uint8_t tile_sh[k_tiles][k_tile_bytes];   // mma tile, then the partial
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t n_chunks = (n_cols + k_chunk - 1) / k_chunk, n_tiles = ps.first_tile[ps.n];
    const int64_t c = blockIdx.x, kb = c * k_chunk, ke = kb + k_chunk < n_cols ? kb + k_chunk : n_cols;
    const int64_t tile = int64_t(blockIdx.y) * k_tiles + warp;
    int which = 0;
    while (which + 1 < ps.n && tile >= ps.first_tile[which + 1]) which++;
    const bool active = tile < n_tiles;
    const uint8_t* __restrict__ w = ps.w[which];
    const int64_t n_out = ps.n_out[which], m0 = (tile - ps.first_tile[which]) * k_rows;

    // 1. this warp's weight bytes, every load issued before any is waited for
    if constexpr (staged<TYPE>) {
        if (active) {
            constexpr int H = CB / 2;                        // halfwords of a whole chunk's row
            const int64_t halves = (ke - kb) / block_shape<TYPE>::cols * block_shape<TYPE>::bytes / 2;
            const size_t off = size_t(kb / block_shape<TYPE>::cols * block_shape<TYPE>::bytes);
            uint16_t* dst = reinterpret_cast<uint16_t*>(stage[warp]);
#pragma unroll
            for (int j = 0; j < (k_rows * H + 31) / 32; j++) {
                const int i = lane + 32 * j, r = i / H, hw = i % H;
                if (i < k_rows * H && hw < halves) {
                    dst[i] = m0 + r < n_out
                                 ? *reinterpret_cast<const uint16_t*>(w + size_t(m0 + r) * w_row_bytes + off + 2 * hw)
                                 : uint16_t(0);
                }
            }
        }
    }
    // 2. the chunk's activations, once for the block's tiles (zeros past n_tok and n_cols)
#pragma unroll
    for (int j = 0; j < 16 * k_chunk / (32 * k_tiles); j++) {
        const int i = tid + 32 * k_tiles * j, t = i / k_chunk, kk = i % k_chunk;
        const int64_t gk = kb + kk;
        xh[t * k_x_ld + kk] = to_elem<T>(t < n_tok && gk < n_cols ? x[t * n_cols + gk] : 0.0f);
    }
    __syncthreads();
    if (!active) return;

    // 3. the chunk's mma sequence from zero, 32 columns a step
    T* a_sh = reinterpret_cast<T*>(tile_sh[warp]);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    const int r = lane / 2, c0 = (lane % 2) * 16;   // this lane's row and its 16 columns of every step
    const bool row_ok = m0 + r < n_out;
    const uint8_t* src = staged<TYPE> ? stage[warp] + r * CB : w + size_t(row_ok ? m0 + r : 0) * w_row_bytes;
    const int64_t src_k0 = staged<TYPE> ? kb : 0;   // column of src's first element
    for (int64_t k0 = kb; k0 < ke; k0 += k_bk) {
#pragma unroll
        for (int h = 0; h < 2; h++) {   // two runs of 8 columns, each with its block's scales decoded once
            const int64_t gk = k0 + c0 + 8 * h;
            float v[8];
            if (row_ok && gk + 8 <= n_cols) {
                cuda_dq::dq8<TYPE>(src, gk - src_k0, v);
            } else {
                for (int j = 0; j < 8; j++) v[j] = row_ok && gk + j < n_cols ? cuda_dq::dq<TYPE>(src, gk + j - src_k0) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) a_sh[r * k_ld + c0 + 8 * h + j] = to_elem<T>(v[j]);
        }
        __syncwarp();
        for (int kk = 0; kk < k_bk; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;   // (k, t) at xh[t * k_x_ld + k]
            wmma::load_matrix_sync(a, a_sh + kk, k_ld);
            wmma::load_matrix_sync(b, xh + (k0 - kb) + kk, k_x_ld);
            wmma::mma_sync(acc, a, b, acc);
        }
        __syncwarp();   // a_sh is refilled next step
    }

    // 4. the partial out; the tile's last chunk to finish adds them all in chunk order
    float* part = reinterpret_cast<float*>(tile_sh[warp]);
    wmma::store_matrix_sync(part, acc, 16, wmma::mem_row_major);   // part[r * 16 + t]
    __syncwarp();
    float* mine = partials + (c * n_tiles + tile) * (k_rows * 16);
    for (int i = lane; i < k_rows * 16; i += 32) {
        if (i % 16 < n_tok) mine[i] = part[i];
    }
    __threadfence();   // the partial is visible device-wide before the count says so
    __syncwarp();
    unsigned done = 0;
    if (lane == 0) done = atomicAdd(&counters[tile], 1u);
    done = __shfl_sync(0xffffffffu, done, 0);
    if (done != unsigned(n_chunks - 1)) return;
    __threadfence();
    float* __restrict__ y = ps.y[which];
    for (int i = lane; i < k_rows * 16; i += 32) {
        const int r = i / 16, t = i % 16;
        if (t < n_tok && m0 + r < n_out) {
            float sum = 0.0f;
            for (int64_t cc = 0; cc < n_chunks; cc++) sum += __ldcg(partials + (cc * n_tiles + tile) * (k_rows * 16) + i);
            y[t * n_out + m0 + r] = sum;
        }
    }
    if (lane == 0) counters[tile] = 0u;   // ready for the next launch
}

template <int TYPE, typename T>
void launch_decode(const decode_set& ps, size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok,
                   const cuda_decode_scratch& scratch, cudaStream_t stream) {
    const int64_t n_chunks = (n_cols + k_chunk - 1) / k_chunk, n_tiles = ps.first_tile[ps.n];
    const dim3 grid(unsigned(n_chunks), unsigned((n_tiles + k_tiles - 1) / k_tiles));
    decode_kernel<TYPE, T><<<grid, 32 * k_tiles, 0, stream>>>(ps, w_row_bytes, n_cols, x, n_tok, scratch.partials,
                                                             scratch.counters);
}

}  // namespace

// Tiles of a call: each product rounds its own rows up to whole tiles, so products of n_rows_total rows
// in all hold at most ceil(n_rows_total / 16) + k_max_products - 1 tiles (3 x 8 rows: 3 tiles, not 2).
static int64_t max_tiles(int64_t n_rows_total) { return (n_rows_total + k_rows - 1) / k_rows + k_max_products - 1; }

int64_t cuda_decode_partial_floats(int64_t n_cols, int64_t n_rows_total) {
    return (n_cols + k_chunk - 1) / k_chunk * max_tiles(n_rows_total) * (k_rows * 16);
}

int64_t cuda_decode_counters(int64_t n_rows_total) { return max_tiles(n_rows_total); }

void cuda_decode_products(int32_t type, size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok,
                          const cuda_product* products, int n_products, const cuda_decode_scratch& scratch,
                          cudaStream_t stream) {
    decode_set ps{};
    ps.n = n_products;
    int64_t rows = 0;
    for (int i = 0; i < n_products; i++) {
        ps.w[i] = products[i].w;
        ps.y[i] = products[i].y;
        ps.n_out[i] = products[i].n_out;
        ps.first_tile[i + 1] = ps.first_tile[i] + (products[i].n_out + k_rows - 1) / k_rows;
        rows += products[i].n_out;
    }
    const int64_t n_tiles = ps.first_tile[n_products];   // the kernel's partials and counters index these tiles
    if (!scratch.partials || !scratch.counters ||
        (n_cols + k_chunk - 1) / k_chunk * n_tiles * (k_rows * 16) > scratch.partial_floats ||
        n_tiles > scratch.n_counters) {
        throw cuda_error("matmul: decode scratch too small for " + std::to_string(rows) + " rows x " +
                         std::to_string(n_cols) + " columns");
    }
    switch (type) {
        case TYPE_F32: launch_decode<TYPE_F32, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_F16: launch_decode<TYPE_F16, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_BF16: launch_decode<TYPE_BF16, __nv_bfloat16>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_Q4_0: launch_decode<TYPE_Q4_0, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_Q4_1: launch_decode<TYPE_Q4_1, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_Q5_0: launch_decode<TYPE_Q5_0, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_Q5_1: launch_decode<TYPE_Q5_1, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_Q8_0: launch_decode<TYPE_Q8_0, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_Q4_K: launch_decode<TYPE_Q4_K, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_Q5_K: launch_decode<TYPE_Q5_K, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        case TYPE_Q6_K: launch_decode<TYPE_Q6_K, __half>(ps, w_row_bytes, n_cols, x, n_tok, scratch, stream); break;
        default: throw cuda_error("matmul: weight type id " + std::to_string(type) + " has no CUDA kernel");
    }
    cuda_check(cudaGetLastError(), "decode_kernel launch");
}

}  // namespace strata
