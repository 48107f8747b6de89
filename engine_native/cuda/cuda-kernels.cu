// The CUDA backend's per-row kernels: RMSNorm (+ residual add), SwiGLU, the Q/K/V
// post-processing (biases, Q/K norms, RoPE, K/V store in the cache format) and causal grouped-query
// attention over the KV cache of each row's own context (rows of one batch may have any lengths).
//
// Not here: products (cuda-matmul.cu), buffers and the layer loop (cuda-backend.cu). Bitwise rule:
// each block works on one row (attention: one row's KV head and part), every reduction has a fixed tree
// and every split depends only on the row's own length, so a row's result never depends on the batch.
#include <cmath>
#include <cstdint>

#include <cuda_fp16.h>

#include "cuda-dequant.cuh"
#include "cuda-kernels.cuh"
#include "quants.h"

namespace strata {
namespace {

constexpr int k_row_threads = 256;   // per-row kernels: one block of 256 threads per row
constexpr int k_row_batch = 8;       // elements a thread loads together in the per-row passes

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the same value, added in
// the same order (warp trees, then warps 0, 1, ...). sh: 32 floats of shared memory.
__device__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    const int w = threadIdx.x / 32, n_warps = blockDim.x / 32;
    __syncthreads();   // sh may still be read by a previous reduction
    if (threadIdx.x % 32 == 0) sh[w] = v;
    __syncthreads();
    float r = 0.0f;
    for (int i = 0; i < n_warps; i++) r += sh[i];
    return r;
}

// ---------------------------------------------------------------- norms and element-wise

// Mirrors forward.cpp rms_norm (plus the residual add before the FFN norm). A thread's elements are
// i = threadIdx.x + k * blockDim.x, taken k_row_batch at a time: the batch's loads are issued together
// (predicated, no branch between them), so a pass waits for VRAM once per batch instead of once per
// element; the thread's arithmetic, in increasing i, is unchanged.
// Launch: grid (n_rows), block (k_row_threads).
__global__ void rms_norm_kernel(float* __restrict__ x, const float* __restrict__ add, const int32_t* __restrict__ idx,
                                const float* __restrict__ w, float* __restrict__ y, int64_t n, float eps) {
    pdl_launch_dependents();   // the product after the norm may start staging its weights
    __shared__ float sh[32];
    const int64_t j = blockIdx.x;
    const int64_t src = idx ? idx[j] : j;
    float* __restrict__ xr = x + src * n;
    const float* __restrict__ ar = add ? add + src * n : nullptr;
    const int64_t step = blockDim.x;
    float ss = 0.0f;
    for (int64_t i0 = threadIdx.x; i0 < n; i0 += k_row_batch * step) {
        float v[k_row_batch];
#pragma unroll
        for (int u = 0; u < k_row_batch; u++) {
            const int64_t i = i0 + u * step;
            v[u] = i < n ? (ar ? xr[i] + ar[i] : xr[i]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < k_row_batch; u++) {
            const int64_t i = i0 + u * step;
            if (i < n) {
                if (ar) xr[i] = v[u];
                ss += v[u] * v[u];
            }
        }
    }
    const float total = block_sum(ss, sh);
    const float scale = 1.0f / sqrtf(total / float(n) + eps);
    for (int64_t i0 = threadIdx.x; i0 < n; i0 += k_row_batch * step) {
        float v[k_row_batch], wv[k_row_batch];
#pragma unroll
        for (int u = 0; u < k_row_batch; u++) {
            const int64_t i = i0 + u * step;
            v[u] = i < n ? xr[i] : 0.0f;
            wv[u] = i < n ? w[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < k_row_batch; u++) {
            const int64_t i = i0 + u * step;
            if (i < n) y[j * n + i] = (v[u] * scale) * wv[u];
        }
    }
}

// Mirrors forward.cpp's SwiGLU loop: g = g / (1 + exp(-g)) * u. Launch: grid-stride.
__global__ void swiglu_kernel(float* gate, const float* up, int64_t n) {
    pdl_launch_dependents();   // the down product may start staging its weights
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// ---------------------------------------------------------------- Q/K/V post-processing and KV store

// The q8_0 KV row format of kv-layout.cpp's kv_store (quantize_block_q8_0): per 32 values,
// fp16 d = amax / 127, then qs = clamp(round_half_even(x / d), -127, 127).
__device__ void store_q8_0_block(const float* x, uint8_t* dst) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const __half dh = __float2half_rn(amax / 127.0f);
    const float d = __half2float(dh);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const unsigned short bits = __half_as_ushort(dh);
    dst[0] = uint8_t(bits & 0xFF);
    dst[1] = uint8_t(bits >> 8);
    for (int j = 0; j < 32; j++) {
        const float v = rintf(x[j] * id);
        dst[2 + j] = uint8_t(int8_t(fmaxf(-127.0f, fminf(127.0f, v))));
    }
}

// Mirrors the per-row block of forward.cpp after the Q/K/V products: biases, Q/K norms (qwen3),
// rope_head on every Q and K head, kv_store (kv-layout.cpp) of K and V at the row's position.
// Launch: grid (n_rows), block (k_row_threads).
__global__ void qkv_post_kernel(float* __restrict__ Q, float* __restrict__ K, float* __restrict__ V,
                                const float* __restrict__ bq, const float* __restrict__ bk,
                                const float* __restrict__ bv, const float* __restrict__ q_norm,
                                const float* __restrict__ k_norm, const float* __restrict__ rope_cs,
                                const cuda_dev_row* __restrict__ rows, int64_t layer, cuda_shape s) {
    const int64_t r = blockIdx.x, HD = s.head_dim;
    const int64_t Qd = s.n_head * HD, KVd = s.n_head_kv * HD;
    float* q = Q + r * Qd;
    float* k = K + r * KVd;
    float* v = V + r * KVd;
    if (bq) {
        for (int64_t i = threadIdx.x; i < Qd; i += blockDim.x) q[i] += bq[i];
        for (int64_t i = threadIdx.x; i < KVd; i += blockDim.x) {
            k[i] += bk[i];
            v[i] += bv[i];
        }
        __syncthreads();
    }
    const int64_t n_heads = s.n_head + s.n_head_kv;   // Q heads, then K heads
    if (q_norm) {
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
        for (int64_t hh = warp; hh < n_heads; hh += n_warps) {
            float* x = hh < s.n_head ? q + hh * HD : k + (hh - s.n_head) * HD;
            const float* nw = hh < s.n_head ? q_norm : k_norm;
            float ss = 0.0f;
            for (int64_t i = lane; i < HD; i += 32) ss += x[i] * x[i];
            ss = warp_sum(ss);
            const float scale = 1.0f / sqrtf(ss / float(HD) + s.rms_eps);
            for (int64_t i = lane; i < HD; i += 32) x[i] = (x[i] * scale) * nw[i];
        }
        __syncthreads();
    }
    const int64_t half = s.n_rot / 2;
    const float* cs = rope_cs + r * s.n_rot;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < n_heads * half; i += blockDim.x) {
        const int64_t hh = i / half, p = i % half;
        float* x = hh < s.n_head ? q + hh * HD : k + (hh - s.n_head) * HD;
        const float c = cs[2 * p], sn = cs[2 * p + 1];
        const int64_t i0 = s.rope_neox ? p : 2 * p;
        const int64_t i1 = s.rope_neox ? p + half : 2 * p + 1;
        const float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * sn;
        x[i1] = x0 * sn + x1 * c;
    }
    __syncthreads();
    const cuda_dev_row row = rows[r];
    const size_t rb = s.kv_row_bytes;
    uint8_t* kdst = row.kv + (size_t(2 * layer) * size_t(row.capacity) + size_t(row.pos)) * rb;
    uint8_t* vdst = row.kv + (size_t(2 * layer + 1) * size_t(row.capacity) + size_t(row.pos)) * rb;
    if (s.kv_type == TYPE_F16) {
        for (int64_t i = threadIdx.x; i < KVd; i += blockDim.x) {
            reinterpret_cast<unsigned short*>(kdst)[i] = __half_as_ushort(__float2half_rn(k[i]));
            reinterpret_cast<unsigned short*>(vdst)[i] = __half_as_ushort(__float2half_rn(v[i]));
        }
    } else if (s.kv_type == TYPE_F32) {
        for (int64_t i = threadIdx.x; i < KVd; i += blockDim.x) {
            reinterpret_cast<float*>(kdst)[i] = k[i];
            reinterpret_cast<float*>(vdst)[i] = v[i];
        }
    } else {   // TYPE_Q8_0: K blocks, then V blocks
        const int64_t nb = KVd / 32;
        for (int64_t b = threadIdx.x; b < 2 * nb; b += blockDim.x) {
            if (b < nb) store_q8_0_block(k + b * 32, kdst + b * 34);
            else store_q8_0_block(v + (b - nb) * 32, vdst + (b - nb) * 34);
        }
    }
}

// ---------------------------------------------------------------- attention

// Split attention (flash-decoding): a row's positions [0, n_pos) are cut into at most n_parts parts of
// attention_part_length(n_pos, n_parts) positions (whole tiles of k_att_tile), a function of n_pos and
// the model shape only, so a row's result never depends on the batch or the launch. One block of
// k_att_warps warps per (row, KV head, group of <= k_att_heads query heads, part) reads its part's K and
// V rows once for all the group's query heads (a warp reads whole head rows: coalesced pair loads) and
// writes an unnormalized partial (acc, running max m, sum l); a merge block per (row, query head) adds
// the parts in increasing order. Grid sizes depend on n_rows and the shape only (CUDA graphs): blocks
// whose part lies past the row's length exit at once.
constexpr int k_att_warps = 4;                       // a part block's warps
constexpr int k_att_heads = 4;                       // query heads a part block serves: warp j owns head j
constexpr int k_att_tile = 64;                       // positions per tile; a part is whole tiles
constexpr int k_att_per_warp = k_att_tile / k_att_warps;   // tile positions a warp loads (K, then V)
constexpr int k_att_chunks = 4;                      // 64-element chunks of a head row: head_dim <= 256
constexpr int k_max_head_dim = 64 * k_att_chunks;
constexpr int k_att_target_blocks = 256;             // part blocks one decode row aims for
constexpr int k_att_min_parts = 8, k_att_max_parts = 64;
constexpr int k_merge_threads = 64;
static_assert(k_att_heads == k_att_warps, "warp j keeps the softmax state of query head j");

__host__ __device__ __forceinline__ int64_t attention_query_groups(int64_t n_head, int64_t n_head_kv) {
    return (n_head / n_head_kv + k_att_heads - 1) / k_att_heads;
}

// Parts per row for a model shape: enough part blocks for one decode row to fill the GPU.
__host__ __device__ __forceinline__ int attention_parts(int64_t n_head, int64_t n_head_kv) {
    const int64_t per_part = n_head_kv * attention_query_groups(n_head, n_head_kv);
    const int64_t want = k_att_target_blocks / (per_part > 0 ? per_part : 1);
    return int(want < k_att_min_parts ? k_att_min_parts : (want > k_att_max_parts ? k_att_max_parts : want));
}

// Positions per part of a row of n_pos positions: round_up(ceil(n_pos / n_parts), k_att_tile).
__host__ __device__ __forceinline__ int64_t attention_part_length(int64_t n_pos, int n_parts) {
    const int64_t per = (n_pos + n_parts - 1) / n_parts;
    return (per + k_att_tile - 1) / k_att_tile * k_att_tile;
}

// Elements e, e + 1 (e even) of a cache row in the KV format KVT. Alignment: f16 rows are 4-byte
// aligned at even e, f32 rows 8-byte; a q8_0 pair never straddles a 32-block and sits 2-byte aligned.
template <int KVT>
__device__ __forceinline__ float2 kv_pair(const uint8_t* row, int64_t e) {
    if constexpr (KVT == TYPE_F16) {
        return __half22float2(*reinterpret_cast<const __half2*>(row + 2 * e));
    } else if constexpr (KVT == TYPE_F32) {
        return *reinterpret_cast<const float2*>(row + 4 * e);
    } else {
        const uint8_t* blk = row + (e / 32) * 34;
        const float d = cuda_dq::f16_at(blk);
        const char2 qs = *reinterpret_cast<const char2*>(blk + 2 + e % 32);
        return make_float2(float(qs.x) * d, float(qs.y) * d);
    }
}

// Sums of N values per lane over the warp, spread out (N = 16): after the call lane `lane` holds the
// full sum of value spread_index(lane) (each value in two lanes). 16 shuffles instead of 16 x 5; a fixed
// tree, so the same bits for the same inputs.
// One halving step: lanes with bit O set keep values [H, 2H), the others [0, H); each adds its partner's.
template <int H, int O>
__device__ __forceinline__ void spread_step(float* v, int lane) {
    const bool hi = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < H; i++) {
        const float send = hi ? v[i] : v[i + H];
        const float keep = hi ? v[i + H] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
}

__device__ __forceinline__ float spread_sum(float (&v)[16], int lane) {
    spread_step<8, 16>(v, lane);
    spread_step<4, 8>(v, lane);
    spread_step<2, 4>(v, lane);
    spread_step<1, 2>(v, lane);
    return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}

__device__ __forceinline__ int spread_index(int lane) {
    return ((lane >> 4) & 1) * 8 + ((lane >> 3) & 1) * 4 + ((lane >> 2) & 1) * 2 + ((lane >> 1) & 1);
}

// One part of one row for the query heads [h0, h0 + nq) of KV head g; mirrors attention.cpp
// attention_group (scores = q.k * scale, softmax, weighted sum of V) with a one-pass softmax over the
// part's tiles in increasing order. Lane `lane` owns the element pairs 64 c + 2 lane (c < NC) of a head
// row: NC = ceil(head_dim / 64). A warp loads its k_att_per_warp rows of a tile U at a time (all of them
// for head_dim <= 64), so many rows are in flight.
// Launch: grid (n_rows, n_head_kv * query groups, n_parts), block (32 * k_att_warps).
// part_acc: (n_rows, n_head, n_parts, head_dim); part_ml: (n_rows, n_head, n_parts, 2 [m, l]).
template <int KVT, int NC>
__global__ void __launch_bounds__(32 * k_att_warps)
attention_part_kernel(const float* Q, const cuda_dev_row* rows, int64_t layer, cuda_shape s, float scale,
                      int n_parts, float* part_acc, float* part_ml) {
    constexpr int U = NC == 1 ? 16 : (NC == 2 ? 8 : 4);   // rows loaded together: <= 32 registers of K or V
    static_assert(k_att_per_warp == 16 && k_att_per_warp % U == 0, "a warp's 16 tile rows in whole rounds");
    __shared__ float p_sh[k_att_heads][k_att_tile];   // scores, then their exp
    __shared__ float corr_sh[k_att_heads];
    __shared__ float comb_sh[k_att_warps][k_att_heads][64 * NC];   // the warps' sums of V
    const int64_t r = blockIdx.x, part = blockIdx.z;
    const cuda_dev_row row = rows[r];
    const int64_t n_pos = row.pos + 1;
    const int64_t len = attention_part_length(n_pos, n_parts);
    const int64_t t_begin = part * len;
    if (t_begin >= n_pos) return;   // uniform over the block: nothing to do for this part
    const int64_t t_end = min(n_pos, t_begin + len);
    const int64_t HD = s.head_dim, n_rep = s.n_head / s.n_head_kv;
    const int64_t n_qg = attention_query_groups(s.n_head, s.n_head_kv);
    const int64_t g = blockIdx.y / n_qg, h0 = g * n_rep + (blockIdx.y % n_qg) * k_att_heads;
    const int nq = int(min(int64_t(k_att_heads), g * n_rep + n_rep - h0));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const size_t rb = s.kv_row_bytes;
    const uint8_t* kbase = row.kv + size_t(2 * layer) * size_t(row.capacity) * rb;
    const uint8_t* vbase = kbase + size_t(row.capacity) * rb;
    const int64_t e0 = g * HD;   // the KV head's first element in a cache row

    float2 qv[k_att_heads][NC];   // 0 for heads past nq and elements past head_dim
    float2 acc[k_att_heads][NC];
#pragma unroll
    for (int j = 0; j < k_att_heads; j++) {
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int64_t e = 64 * c + 2 * lane;
            const float* q = Q + (r * s.n_head + h0 + j) * HD + e;
            qv[j][c] = j < nq && e < HD ? make_float2(q[0], q[1]) : make_float2(0.0f, 0.0f);
            acc[j][c] = make_float2(0.0f, 0.0f);
        }
    }
    float m = -INFINITY, l = 0.0f;   // softmax state of query head `warp` (same in every lane)

    for (int64_t t0 = t_begin; t0 < t_end; t0 += k_att_tile) {
        const int64_t tw = t0 + warp * k_att_per_warp;   // the warp's first tile position
        // scores: partial dots of the warp's 16 positions per lane, then spread sums over the warp
        float d[k_att_heads][k_att_per_warp];
#pragma unroll
        for (int u0 = 0; u0 < k_att_per_warp; u0 += U) {
            float2 kf[U][NC];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const uint8_t* krow = kbase + size_t(tw + u0 + u) * rb;
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const int64_t e = 64 * c + 2 * lane;
                    kf[u][c] = tw + u0 + u < t_end && e < HD ? kv_pair<KVT>(krow, e0 + e) : make_float2(0.0f, 0.0f);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
#pragma unroll
                for (int j = 0; j < k_att_heads; j++) {
                    float x = 0.0f;
#pragma unroll
                    for (int c = 0; c < NC; c++) x += qv[j][c].x * kf[u][c].x + qv[j][c].y * kf[u][c].y;
                    d[j][u0 + u] = x;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < k_att_heads; j++) {
            if (j < nq) {   // uniform over the block
                const float dot = spread_sum(d[j], lane);
                const int i = spread_index(lane);
                if ((lane & 1) == 0) p_sh[j][warp * k_att_per_warp + i] = tw + i < t_end ? dot * scale : -INFINITY;
            }
        }
        __syncthreads();   // scores of the whole tile published
        if (warp < nq) {   // warp j: one-pass softmax step of head j over this tile
            const float s0 = p_sh[warp][lane], s1 = p_sh[warp][lane + 32];
            const float m_new = fmaxf(m, warp_max(fmaxf(s0, s1)));   // finite: the tile has >= 1 position
            const float p0 = expf(s0 - m_new), p1 = expf(s1 - m_new);
            const float corr = expf(m - m_new);   // 0 on the first tile (m = -inf)
            l = l * corr + warp_sum(p0 + p1);
            m = m_new;
            p_sh[warp][lane] = p0;   // each lane rewrites only what it read
            p_sh[warp][lane + 32] = p1;
            if (lane == 0) corr_sh[warp] = corr;
        }
        __syncthreads();   // probabilities and corrections published
#pragma unroll
        for (int j = 0; j < k_att_heads; j++) {
            const float corr = j < nq ? corr_sh[j] : 0.0f;
#pragma unroll
            for (int c = 0; c < NC; c++) {
                acc[j][c].x *= corr;
                acc[j][c].y *= corr;
            }
        }
#pragma unroll
        for (int u0 = 0; u0 < k_att_per_warp; u0 += U) {
            float2 vf[U][NC];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const uint8_t* vrow = vbase + size_t(tw + u0 + u) * rb;
#pragma unroll
                for (int c = 0; c < NC; c++) {
                    const int64_t e = 64 * c + 2 * lane;
                    vf[u][c] = tw + u0 + u < t_end && e < HD ? kv_pair<KVT>(vrow, e0 + e) : make_float2(0.0f, 0.0f);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
#pragma unroll
                for (int j = 0; j < k_att_heads; j++) {
                    const float p = j < nq ? p_sh[j][warp * k_att_per_warp + u0 + u] : 0.0f;   // 0 past the end
#pragma unroll
                    for (int c = 0; c < NC; c++) {
                        acc[j][c].x += p * vf[u][c].x;
                        acc[j][c].y += p * vf[u][c].y;
                    }
                }
            }
        }
        __syncthreads();   // p_sh and corr_sh are rewritten by the next tile
    }

    // the warps' sums of V, added in warp order; the part's (m, l) from warp j
#pragma unroll
    for (int j = 0; j < k_att_heads; j++) {
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int e = 64 * c + 2 * lane;
            if (j < nq && e < HD) {
                comb_sh[warp][j][e] = acc[j][c].x;
                comb_sh[warp][j][e + 1] = acc[j][c].y;
            }
        }
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < nq * HD; i += blockDim.x) {
        const int64_t j = i / HD, e = i % HD;
        float sum = comb_sh[0][j][e];
        for (int w = 1; w < k_att_warps; w++) sum += comb_sh[w][j][e];
        part_acc[((r * s.n_head + h0 + j) * n_parts + part) * HD + e] = sum;
    }
    if (warp < nq && lane == 0) {
        float* ml = part_ml + ((r * s.n_head + h0 + warp) * n_parts + part) * 2;
        ml[0] = m;
        ml[1] = l;
    }
}

// The part kernel for head_dim's chunk count.
template <int KVT>
void launch_attention_parts(dim3 grid, cudaStream_t stream, const float* q, const cuda_dev_row* rows, int64_t layer,
                            const cuda_shape& s, float scale, int n_parts, float* part_acc, float* part_ml) {
    const int threads = 32 * k_att_warps;
    switch ((s.head_dim + 63) / 64) {
        case 1: attention_part_kernel<KVT, 1><<<grid, threads, 0, stream>>>(q, rows, layer, s, scale, n_parts, part_acc, part_ml); break;
        case 2: attention_part_kernel<KVT, 2><<<grid, threads, 0, stream>>>(q, rows, layer, s, scale, n_parts, part_acc, part_ml); break;
        case 3: attention_part_kernel<KVT, 3><<<grid, threads, 0, stream>>>(q, rows, layer, s, scale, n_parts, part_acc, part_ml); break;
        default: attention_part_kernel<KVT, 4><<<grid, threads, 0, stream>>>(q, rows, layer, s, scale, n_parts, part_acc, part_ml); break;
    }
}

// out[row, head] = sum_p acc_p * exp(m_p - M) / sum_p l_p * exp(m_p - M), parts in increasing order.
// Launch: grid (n_rows, n_head), block (k_merge_threads).
__global__ void attention_merge_kernel(float* __restrict__ out, const cuda_dev_row* __restrict__ rows, cuda_shape s,
                                       int n_parts, const float* __restrict__ part_acc,
                                       const float* __restrict__ part_ml) {
    pdl_launch_dependents();   // the output projection may start staging its weights
    __shared__ float w_sh[k_att_max_parts];
    const int64_t r = blockIdx.x, h = blockIdx.y, HD = s.head_dim;
    const int64_t n_pos = rows[r].pos + 1;
    const int64_t len = attention_part_length(n_pos, n_parts);
    const int np = int((n_pos + len - 1) / len);
    const float* ml = part_ml + (r * s.n_head + h) * n_parts * 2;
    const float* acc = part_acc + (r * s.n_head + h) * n_parts * HD;
    // the parts' values k_row_batch at a time, loads together, then used in part order
    float mx = -INFINITY;
    for (int p0 = 0; p0 < np; p0 += k_row_batch) {
        float b[k_row_batch];
#pragma unroll
        for (int u = 0; u < k_row_batch; u++) b[u] = p0 + u < np ? ml[2 * (p0 + u)] : -INFINITY;
#pragma unroll
        for (int u = 0; u < k_row_batch; u++) mx = p0 + u == 0 ? b[u] : (p0 + u < np ? fmaxf(mx, b[u]) : mx);
    }
    for (int p = threadIdx.x; p < np; p += blockDim.x) w_sh[p] = expf(ml[2 * p] - mx);
    __syncthreads();
    float l = 0.0f;
    for (int p0 = 0; p0 < np; p0 += k_row_batch) {
        float b[k_row_batch];
#pragma unroll
        for (int u = 0; u < k_row_batch; u++) b[u] = p0 + u < np ? ml[2 * (p0 + u) + 1] : 0.0f;
#pragma unroll
        for (int u = 0; u < k_row_batch; u++) {
            if (p0 + u < np) l += b[u] * w_sh[p0 + u];
        }
    }
    const float inv = 1.0f / l;
    float* o = out + (r * s.n_head + h) * HD;
    for (int64_t e = threadIdx.x; e < HD; e += blockDim.x) {
        float sum = 0.0f;
        for (int p0 = 0; p0 < np; p0 += k_row_batch) {
            float b[k_row_batch];
#pragma unroll
            for (int u = 0; u < k_row_batch; u++) b[u] = p0 + u < np ? acc[(p0 + u) * HD + e] : 0.0f;
#pragma unroll
            for (int u = 0; u < k_row_batch; u++) {
                if (p0 + u < np) sum += b[u] * w_sh[p0 + u];
            }
        }
        o[e] = sum * inv;
    }
}

unsigned grid_for(int64_t n) {
    const int64_t blocks = (n + 255) / 256;
    return unsigned(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

void cuda_rms_norm(float* x, const float* add, const int32_t* idx, const float* w, float* y, int64_t n_rows,
                   int64_t n, float eps, cudaStream_t stream) {
    if (n_rows <= 0) return;
    rms_norm_kernel<<<unsigned(n_rows), k_row_threads, 0, stream>>>(x, add, idx, w, y, n, eps);
    cuda_check(cudaGetLastError(), "rms_norm_kernel launch");
}

void cuda_swiglu(float* gate, const float* up, int64_t n_rows, int64_t n_ff, cudaStream_t stream) {
    if (n_rows * n_ff <= 0) return;
    swiglu_kernel<<<grid_for(n_rows * n_ff), 256, 0, stream>>>(gate, up, n_rows * n_ff);
    cuda_check(cudaGetLastError(), "swiglu_kernel launch");
}

void cuda_qkv_post(float* q, float* k, float* v, const float* bq, const float* bk, const float* bv,
                   const float* q_norm, const float* k_norm, const float* rope_cs, const cuda_dev_row* rows,
                   int64_t n_rows, int64_t layer, const cuda_shape& s, cudaStream_t stream) {
    if (n_rows <= 0) return;
    qkv_post_kernel<<<unsigned(n_rows), k_row_threads, 0, stream>>>(q, k, v, bq, bk, bv, q_norm, k_norm, rope_cs,
                                                                    rows, layer, s);
    cuda_check(cudaGetLastError(), "qkv_post_kernel launch");
}

int64_t cuda_attention_scratch_floats(int64_t max_rows, int64_t n_head, int64_t n_head_kv, int64_t head_dim) {
    if (n_head_kv <= 0) return 0;
    return max_rows * n_head * int64_t(attention_parts(n_head, n_head_kv)) * (head_dim + 2);
}

void cuda_attention(const float* q, float* out, const cuda_dev_row* rows, int64_t n_rows, int64_t layer,
                    const cuda_shape& s, float* scratch, cudaStream_t stream) {
    if (n_rows <= 0) return;
    if (s.head_dim > k_max_head_dim || s.head_dim <= 0 || s.head_dim % 2 != 0) {
        throw cuda_error("attention: head size " + std::to_string(s.head_dim) + " is not an even size up to the CUDA kernel's " +
                         std::to_string(k_max_head_dim));
    }
    if (s.n_head_kv <= 0 || s.n_head % s.n_head_kv != 0) {
        throw cuda_error("attention: " + std::to_string(s.n_head) + " query heads do not group over " +
                         std::to_string(s.n_head_kv) + " KV heads");
    }
    if (s.kv_type == TYPE_Q8_0 && s.head_dim % 32 != 0) {
        throw cuda_error("attention: q8_0 KV needs a head size that is a multiple of 32, not " +
                         std::to_string(s.head_dim));
    }
    if (!scratch) throw cuda_error("attention: no scratch for the partial sums (cuda_attention_scratch_floats)");
    const int n_parts = attention_parts(s.n_head, s.n_head_kv);
    float* part_acc = scratch;
    float* part_ml = scratch + n_rows * s.n_head * n_parts * s.head_dim;
    const dim3 grid(unsigned(n_rows), unsigned(s.n_head_kv * attention_query_groups(s.n_head, s.n_head_kv)),
                    unsigned(n_parts));
    const float scale = 1.0f / std::sqrt(float(s.head_dim));   // as forward.cpp
    if (s.kv_type == TYPE_F16) {
        launch_attention_parts<TYPE_F16>(grid, stream, q, rows, layer, s, scale, n_parts, part_acc, part_ml);
    } else if (s.kv_type == TYPE_F32) {
        launch_attention_parts<TYPE_F32>(grid, stream, q, rows, layer, s, scale, n_parts, part_acc, part_ml);
    } else if (s.kv_type == TYPE_Q8_0) {
        launch_attention_parts<TYPE_Q8_0>(grid, stream, q, rows, layer, s, scale, n_parts, part_acc, part_ml);
    } else {
        throw cuda_error("attention: unsupported KV type id " + std::to_string(s.kv_type));
    }
    cuda_check(cudaGetLastError(), "attention_part_kernel launch");
    attention_merge_kernel<<<dim3(unsigned(n_rows), unsigned(s.n_head)), k_merge_threads, 0, stream>>>(
        out, rows, s, n_parts, part_acc, part_ml);
    cuda_check(cudaGetLastError(), "attention_merge_kernel launch");
}

}  // namespace strata
