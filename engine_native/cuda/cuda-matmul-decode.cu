// The decode product kernel (n_tok <= 16, cuda_matmul_many's decode branch): y = x @ W^T for one to
// three weights of one type and width, with the k-order of the prefill kernel (cuda-matmul-common.cuh)
// so decode and prefill give the same floats.
//
// Work unit: (256-column chunk, 16 weight rows), one warp. A block holds one chunk and four row tiles:
// each thread loads its two columns of the chunk's activations (all tokens) and each warp its tile's
// weight bytes for the chunk (4-byte loads where rows allow, else 2-byte), every load of the thread
// issued before the first store to shared memory, so a block waits for VRAM once, not once per load
// (session 6's version waited ~30 us a launch: the loads, through a parameter copied to local memory,
// went out one at a time). Then the warp dequantizes step by step into an mma tile (runs of 8 per
// lane, dq8: one scale decode per run) and runs the chunk's mma sequence from zero. Partials go to
// `partials`; the warp that finishes a tile's last chunk (a counter per tile) adds the tile's partials
// in chunk order (loads batched, adds in order) and writes y, then resets the counter for the next
// launch (CUDA graphs replay the same launch). So a decode product runs chunks x tiles warps at once
// (4096 for a 2048 x 8192 product) instead of one warp per tile walking the whole row.
//
// Not here: prefill (cuda-matmul.cu), dispatch by type (cuda_matmul_many in cuda-matmul.cu).
#include <cstdint>
#include <string>
#include <type_traits>

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
constexpr int k_stage_round = 40;          // staging loads a lane holds in registers at once
constexpr int k_sum_batch = 8;             // partials a lane loads before adding them (in chunk order)
static_assert(k_tile_bytes >= k_rows * 16 * 4, "a tile's partial (16 x 16 floats) fits its mma tile's memory");
static_assert(k_max_products == 3, "decode_set::pick selects among three products");

// Bytes of one row's chunk of a quantized TYPE; 2 for float types (not staged).
template <int TYPE>
__host__ __device__ constexpr int chunk_row_bytes() {
    if constexpr (staged<TYPE>) {
        return k_chunk / block_shape<TYPE>::cols * block_shape<TYPE>::bytes;
    } else {
        return 2;
    }
}

// Staging a row's chunk with loads of U (uint32_t when the rows are 4-byte aligned, else uint16_t): the
// loads start at the chunk's offset rounded down to sizeof(U), so a row's staged bytes begin `shift` (0 or
// 2) bytes in; stage_units<TYPE, U> units cover the chunk from either start (Q6_K's 210-byte chunks).
template <int TYPE, typename U>
__host__ __device__ constexpr int stage_units() {
    constexpr int cb = chunk_row_bytes<TYPE>();
    return cb % int(sizeof(U)) == 0 ? cb / int(sizeof(U)) : (cb + 2 + int(sizeof(U)) - 1) / int(sizeof(U));
}
template <int TYPE>
__host__ __device__ constexpr int stage_pitch() {   // bytes a row takes in the stage, whichever U
    return stage_units<TYPE, uint32_t>() * 4 > stage_units<TYPE, uint16_t>() * 2 ? stage_units<TYPE, uint32_t>() * 4
                                                                                  : stage_units<TYPE, uint16_t>() * 2;
}

struct decode_set {   // the products of one launch: product i owns tiles [first_tile[i], first_tile[i + 1])
    const uint8_t* w[k_max_products];
    float* y[k_max_products];
    int64_t n_out[k_max_products];
    int64_t first_tile[k_max_products + 1];
    int64_t n_tiles;   // first_tile[n]
    int n;
};

// a[which] with constant indices only: a dynamic index into a kernel parameter copies the whole
// parameter to local memory (and made every weight load of the kernel wait for the one before).
template <typename V, int N>
__device__ __forceinline__ V pick(const V (&a)[N], int which) {
    return which == 0 ? a[0] : (which == 1 ? a[1] : a[2]);
}

// dst (k_rows rows x NU units of U, row-major) := the units of weight rows m0.. starting at byte a0 of each
// row; zeros past n_out and past the row's end. Up to k_stage_round loads a lane in flight, then stores.
template <typename U, int NU>
__device__ __forceinline__ void stage_rows(U* dst, const uint8_t* w, size_t row_bytes, size_t a0, int64_t m0,
                                           int64_t n_out, int lane) {
    constexpr int total = k_rows * NU, per_lane = (total + 31) / 32;
#pragma unroll
    for (int j0 = 0; j0 < per_lane; j0 += k_stage_round) {
        U v[k_stage_round];
#pragma unroll
        for (int j = 0; j < k_stage_round; j++) {
            const int i = lane + 32 * (j0 + j), r = i / NU, u = i % NU;
            const size_t b = a0 + sizeof(U) * size_t(u);
            const bool ok = j0 + j < per_lane && i < total && m0 + r < n_out && b + sizeof(U) <= row_bytes;
            v[j] = ok ? __ldg(reinterpret_cast<const U*>(w + size_t(m0 + r) * row_bytes + b)) : U(0);
        }
#pragma unroll
        for (int j = 0; j < k_stage_round; j++) {
            const int i = lane + 32 * (j0 + j);
            if (j0 + j < per_lane && i < total) dst[i] = v[j];
        }
    }
}

// Elements gk .. gk + 15 of a float-type row (F32, F16, BF16), every load issued before any is used; the
// floats dq<TYPE> gives, 0 past n_cols.
template <int TYPE>
__device__ __forceinline__ void float_row_16(const uint8_t* row, int64_t gk, int64_t n_cols, float* v) {
    using E = typename std::conditional<TYPE == TYPE_F32, unsigned int, unsigned short>::type;
    E raw[16];
#pragma unroll
    for (int j = 0; j < 16; j++) raw[j] = gk + j < n_cols ? __ldg(reinterpret_cast<const E*>(row) + gk + j) : E(0);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        if constexpr (TYPE == TYPE_F32) {
            v[j] = __uint_as_float(raw[j]);
        } else if constexpr (TYPE == TYPE_F16) {
            v[j] = __half2float(__ushort_as_half(raw[j]));
        } else {
            v[j] = __uint_as_float(uint32_t(raw[j]) << 16);
        }
    }
}

// Launch: grid (n_chunks, ceil(n_tiles / k_tiles)), block (32 * k_tiles).
// partials: (n_chunks, n_tiles, 16 rows, 16 tokens); counters: (n_tiles,), zero between launches.
// U: the staging load (uint32_t: every row and weight 4-byte aligned; uint16_t otherwise).
template <int TYPE, typename T, typename U>
__global__ void __launch_bounds__(32 * k_tiles)
decode_kernel(decode_set ps, size_t w_row_bytes, int64_t n_cols, const float* __restrict__ x, int64_t n_tok,
              float* __restrict__ partials, unsigned* __restrict__ counters) {
    constexpr int CB = chunk_row_bytes<TYPE>(), NU = stage_units<TYPE, U>(), PITCH = NU * int(sizeof(U));
    static_assert(PITCH <= stage_pitch<TYPE>(), "the stage holds a row's units");
    __shared__ __align__(32) T xh[16 * k_x_ld];                                 // (16 tokens, chunk) activations
    __shared__ __align__(16) uint8_t stage[k_tiles][k_rows * stage_pitch<TYPE>()];   // a tile's weight bytes
    __shared__ __align__(32) uint8_t tile_sh[k_tiles][k_tile_bytes];            // mma tile, then the partial
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t n_chunks = (n_cols + k_chunk - 1) / k_chunk, n_tiles = ps.n_tiles;
    const int64_t c = blockIdx.x, kb = c * k_chunk, ke = kb + k_chunk < n_cols ? kb + k_chunk : n_cols;
    const int64_t tile = int64_t(blockIdx.y) * k_tiles + warp;
    const int which = ps.n > 1 && tile >= ps.first_tile[1] ? (ps.n > 2 && tile >= ps.first_tile[2] ? 2 : 1) : 0;
    const bool active = tile < n_tiles;
    const uint8_t* __restrict__ w = pick(ps.w, which);
    const int64_t n_out = pick(ps.n_out, which), m0 = (tile - pick(ps.first_tile, which)) * k_rows;

    pdl_launch_dependents();   // a decode product right after this one (Q/K then V) may start staging
    // 1. this warp's weight bytes (constant: before pdl_wait, so with programmatic launch they load while
    //    the kernel before runs), then the chunk's activations (this thread's two columns of the n_tok
    //    tokens: zeros past n_cols; the tile's columns past n_tok are left as they are: an mma output
    //    column t reads only column t, and outputs past n_tok are never written); each batch of loads in
    //    flight before its first store to shared memory
    size_t shift = 0;   // where the chunk's bytes begin in a staged row
    if constexpr (staged<TYPE>) {
        const size_t off = size_t(kb / block_shape<TYPE>::cols * block_shape<TYPE>::bytes);
        const size_t a0 = off & ~(sizeof(U) - 1);
        shift = off - a0;
        if (active) stage_rows<U, NU>(reinterpret_cast<U*>(stage[warp]), w, w_row_bytes, a0, m0, n_out, lane);
    }
    pdl_wait();   // x, partials, counters and y belong to the kernels before
    float xv[2][16];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t gk = kb + tid + 32 * k_tiles * h;
#pragma unroll
        for (int t = 0; t < 16; t++) xv[h][t] = t < n_tok && gk < n_cols ? __ldg(x + t * n_cols + gk) : 0.0f;
    }
    static_assert(2 * 32 * k_tiles == k_chunk, "two columns a thread cover the chunk");
    if (n_tok == 1) {   // a single decode row: two conversions a thread, not 32
        xh[tid] = to_elem<T>(xv[0][0]);
        xh[tid + 32 * k_tiles] = to_elem<T>(xv[1][0]);
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int t = 0; t < 16; t++) {
                if (t < n_tok) xh[t * k_x_ld + tid + 32 * k_tiles * h] = to_elem<T>(xv[h][t]);
            }
        }
    }
    __syncthreads();
    if (!active) return;

    // 2. the chunk's mma sequence from zero, 32 columns a step
    T* a_sh = reinterpret_cast<T*>(tile_sh[warp]);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    const int r = lane / 2, c0 = (lane % 2) * 16;   // this lane's row and its 16 columns of every step
    const bool row_ok = m0 + r < n_out;
    const uint8_t* src = staged<TYPE> ? stage[warp] + r * PITCH + shift : w + size_t(row_ok ? m0 + r : 0) * w_row_bytes;
    for (int64_t k0 = kb; k0 < ke; k0 += k_bk) {
        float v[16];
        if constexpr (staged<TYPE>) {
#pragma unroll
            for (int h = 0; h < 2; h++) {   // two runs of 8 columns, each with its block's scales decoded once
                const int64_t gk = k0 + c0 + 8 * h;
                if (row_ok && gk + 8 <= n_cols) {
                    cuda_dq::dq8<TYPE>(src, gk - kb, v + 8 * h);
                } else {
                    for (int j = 0; j < 8; j++) v[8 * h + j] = row_ok && gk + j < n_cols ? cuda_dq::dq<TYPE>(src, gk + j - kb) : 0.0f;
                }
            }
        } else {
            float_row_16<TYPE>(src, k0 + c0, row_ok ? n_cols : 0, v);
        }
        store_elem8<T>(a_sh + r * k_ld + c0, v);   // 16-byte aligned: k_ld * 2 and c0 * 2 are multiples of 16
        store_elem8<T>(a_sh + r * k_ld + c0 + 8, v + 8);
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

    // 3. the partial out; the tile's last chunk to finish adds them all in chunk order
    float* part = reinterpret_cast<float*>(tile_sh[warp]);
    wmma::store_matrix_sync(part, acc, 16, wmma::mem_row_major);   // part[r * 16 + t]
    __syncwarp();
    float* mine = partials + (c * n_tiles + tile) * (k_rows * 16);
    for (int i = lane; i < k_rows * 16; i += 32) {
        if (i % 16 < n_tok) mine[i] = part[i];
    }
    // the count, an acq_rel atomic of lane 0 after the warp's barrier: it releases the warp's partial and,
    // for the last chunk, acquires everyone else's (as CUTLASS's split-k semaphores do; two sequentially
    // consistent fences a warp cost more)
    __syncwarp();
    unsigned done = 0;
    if (lane == 0) {
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(done) : "l"(counters + tile), "r"(1u) : "memory");
    }
    done = __shfl_sync(0xffffffffu, done, 0);
    if (done != unsigned(n_chunks - 1)) return;
    __syncwarp();   // lane 0's acquire before any lane reads a partial
    float* __restrict__ y = pick(ps.y, which);
    const int n_t = int(n_tok);
    for (int e = lane; e < k_rows * n_t; e += 32) {   // lane: (row, token) outputs, all the chunks of each
        const int rr = e / n_t, t = e % n_t;
        if (m0 + rr >= n_out) continue;
        const float* p = partials + tile * (k_rows * 16) + rr * 16 + t;
        const int64_t stride = n_tiles * (k_rows * 16);
        float sum = 0.0f;
        for (int64_t c1 = 0; c1 < n_chunks; c1 += k_sum_batch) {   // a batch's loads in flight, then its adds in order
            float buf[k_sum_batch];
#pragma unroll
            for (int j = 0; j < k_sum_batch; j++) buf[j] = c1 + j < n_chunks ? __ldcg(p + (c1 + j) * stride) : 0.0f;
#pragma unroll
            for (int j = 0; j < k_sum_batch; j++) {
                if (c1 + j < n_chunks) sum += buf[j];
            }
        }
        y[t * n_out + m0 + rr] = sum;
    }
    if (lane == 0) counters[tile] = 0u;   // ready for the next launch
}

template <int TYPE, typename T>
void launch_decode(const decode_set& ps, size_t w_row_bytes, int64_t n_cols, const float* x, int64_t n_tok,
                   const cuda_decode_scratch& scratch, cudaStream_t stream) {
    const int64_t n_chunks = (n_cols + k_chunk - 1) / k_chunk;
    const dim3 grid(unsigned(n_chunks), unsigned((ps.n_tiles + k_tiles - 1) / k_tiles));
    bool words = w_row_bytes % 4 == 0;   // 4-byte staging loads when every row start is 4-byte aligned
    for (int i = 0; i < ps.n; i++) words = words && reinterpret_cast<uintptr_t>(ps.w[i]) % 4 == 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(32 * k_tiles);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = scratch.pdl ? 1 : 0;
    if constexpr (staged<TYPE>) {
        if (!words) {
            cuda_check(cudaLaunchKernelEx(&cfg, decode_kernel<TYPE, T, uint16_t>, ps, w_row_bytes, n_cols, x, n_tok,
                                          scratch.partials, scratch.counters),
                       "decode_kernel launch");
            return;
        }
    }
    cuda_check(cudaLaunchKernelEx(&cfg, decode_kernel<TYPE, T, uint32_t>, ps, w_row_bytes, n_cols, x, n_tok,
                                  scratch.partials, scratch.counters),
               "decode_kernel launch");
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
    ps.n_tiles = n_tiles;
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
