// The CUDA backend's per-row kernels: RMSNorm (+ residual add), residual add, SwiGLU, the Q/K/V
// post-processing (biases, Q/K norms, RoPE, K/V store in the cache format) and causal grouped-query
// attention over the KV cache of each row's own context (rows of one batch may have any lengths).
//
// Not here: products (cuda-matmul.cu), buffers and the layer loop (cuda-backend.cu). Bitwise rule:
// each block works on one row (and one head), every reduction has a fixed tree that depends only on
// the row's own length, so a row's result never depends on the other rows of the batch.
#include <cmath>
#include <cstdint>

#include <cuda_fp16.h>

#include "cuda-dequant.cuh"
#include "cuda-kernels.cuh"
#include "quants.h"

namespace strata {
namespace {

constexpr int k_row_threads = 256;   // per-row kernels: one block of 256 threads per row
constexpr int k_att_threads = 128;   // attention: one block of 128 threads per (row, query head)
constexpr int k_max_head_dim = 2 * k_att_threads;   // each attention thread owns <= 2 output dims

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

__device__ float block_max(float v, float* sh) {
    v = warp_max(v);
    const int w = threadIdx.x / 32, n_warps = blockDim.x / 32;
    __syncthreads();
    if (threadIdx.x % 32 == 0) sh[w] = v;
    __syncthreads();
    float r = sh[0];
    for (int i = 1; i < n_warps; i++) r = fmaxf(r, sh[i]);
    return r;
}

// ---------------------------------------------------------------- norms and element-wise

// Mirrors forward.cpp rms_norm (plus the residual add before the FFN norm).
// Launch: grid (n_rows), block (k_row_threads).
__global__ void rms_norm_kernel(float* x, const float* add, const int32_t* idx, const float* w, float* y, int64_t n,
                                float eps) {
    __shared__ float sh[32];
    const int64_t j = blockIdx.x;
    const int64_t src = idx ? idx[j] : j;
    float* xr = x + src * n;
    if (add) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xr[i] += add[src * n + i];
    }
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];   // same thread wrote xr[i]
    const float total = block_sum(ss, sh);
    const float scale = 1.0f / sqrtf(total / float(n) + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[j * n + i] = (xr[i] * scale) * w[i];
}

// Launch: grid-stride, 256 threads a block.
__global__ void add_kernel(float* x, const float* add, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        x[i] += add[i];
    }
}

// Mirrors forward.cpp's SwiGLU loop: g = g / (1 + exp(-g)) * u. Launch: grid-stride.
__global__ void swiglu_kernel(float* gate, const float* up, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// ---------------------------------------------------------------- Q/K/V post-processing and KV store

// The q8_0 KV row format of attention.cpp kv_store_row: per 32 values, fp16 d = amax / 127, then
// qs = clamp(round_half_even(x / d), -127, 127).
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
// rope_head on every Q and K head, kv_store_row of K and V at the row's position.
// Launch: grid (n_rows), block (k_row_threads).
__global__ void qkv_post_kernel(float* Q, float* K, float* V, const float* bq, const float* bk, const float* bv,
                                const float* q_norm, const float* k_norm, const float* rope_cs,
                                const cuda_dev_row* rows, int64_t layer, cuda_shape s) {
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

// Element e of a cache row in the KV format KVT.
template <int KVT>
__device__ __forceinline__ float kv_elem(const uint8_t* row, int64_t e) {
    if constexpr (KVT == TYPE_F16) {
        return __half2float(__ushort_as_half(reinterpret_cast<const unsigned short*>(row)[e]));
    } else if constexpr (KVT == TYPE_F32) {
        return reinterpret_cast<const float*>(row)[e];
    } else {
        const uint8_t* blk = row + (e / 32) * 34;
        return float(int8_t(blk[2 + e % 32])) * cuda_dq::f16_at(blk);
    }
}

// Causal attention of query head h of row r over positions [0, pos]; mirrors attention.cpp
// attention_group (scores = q.k * scale, softmax, weighted sum of V) with a one-pass softmax over
// tiles of k_att_threads positions in increasing order (the running max rescales the partial sums).
// Launch: grid (n_rows, n_head), block (k_att_threads); head_dim <= k_max_head_dim.
template <int KVT>
__global__ void attention_kernel(const float* Q, float* out, const cuda_dev_row* rows, int64_t layer, cuda_shape s,
                                 float scale) {
    __shared__ float q_sh[k_max_head_dim];
    __shared__ float p_sh[k_att_threads];
    __shared__ float red[32];
    const int64_t r = blockIdx.x, h = blockIdx.y, HD = s.head_dim;
    const int64_t n_rep = s.n_head / s.n_head_kv, g = h / n_rep;
    const int tid = threadIdx.x;
    const float* q = Q + r * s.n_head * HD + h * HD;
    for (int64_t i = tid; i < HD; i += blockDim.x) q_sh[i] = q[i];
    const cuda_dev_row row = rows[r];
    const size_t rb = s.kv_row_bytes;
    const uint8_t* kbase = row.kv + size_t(2 * layer) * size_t(row.capacity) * rb;
    const uint8_t* vbase = kbase + size_t(row.capacity) * rb;
    const int64_t n_pos = row.pos + 1, e0 = g * HD;
    __syncthreads();

    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t t0 = 0; t0 < n_pos; t0 += k_att_threads) {
        const int64_t t = t0 + tid;
        float sc = -INFINITY;
        if (t < n_pos) {
            const uint8_t* krow = kbase + size_t(t) * rb;
            float dot = 0.0f;
            for (int64_t d = 0; d < HD; d++) dot += q_sh[d] * kv_elem<KVT>(krow, e0 + d);
            sc = dot * scale;
        }
        const float m_new = fmaxf(m, block_max(sc, red));   // finite: the tile has >= 1 position
        const float p = t < n_pos ? expf(sc - m_new) : 0.0f;
        p_sh[tid] = p;
        const float p_sum = block_sum(p, red);   // its barriers also publish p_sh
        const float corr = expf(m - m_new);      // 0 on the first tile (m = -inf)
        l = l * corr + p_sum;
        acc0 *= corr;
        acc1 *= corr;
        const int64_t nt = min(int64_t(k_att_threads), n_pos - t0);
        for (int64_t j = 0; j < nt; j++) {
            const uint8_t* vrow = vbase + size_t(t0 + j) * rb;
            const float pj = p_sh[j];
            if (tid < HD) acc0 += pj * kv_elem<KVT>(vrow, e0 + tid);
            if (tid + k_att_threads < HD) acc1 += pj * kv_elem<KVT>(vrow, e0 + tid + k_att_threads);
        }
        m = m_new;
        __syncthreads();   // p_sh is rewritten by the next tile
    }
    const float inv = 1.0f / l;
    float* o = out + r * s.n_head * HD + h * HD;
    if (tid < HD) o[tid] = acc0 * inv;
    if (tid + k_att_threads < HD) o[tid + k_att_threads] = acc1 * inv;
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

void cuda_add(float* x, const float* add, int64_t n_rows, int64_t n, cudaStream_t stream) {
    if (n_rows * n <= 0) return;
    add_kernel<<<grid_for(n_rows * n), 256, 0, stream>>>(x, add, n_rows * n);
    cuda_check(cudaGetLastError(), "add_kernel launch");
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

void cuda_attention(const float* q, float* out, const cuda_dev_row* rows, int64_t n_rows, int64_t layer,
                    const cuda_shape& s, cudaStream_t stream) {
    if (n_rows <= 0) return;
    if (s.head_dim > k_max_head_dim) {
        throw cuda_error("attention: head size " + std::to_string(s.head_dim) + " exceeds the CUDA kernel's " +
                         std::to_string(k_max_head_dim));
    }
    const dim3 grid(unsigned(n_rows), unsigned(s.n_head));
    const float scale = 1.0f / std::sqrt(float(s.head_dim));   // as forward.cpp
    if (s.kv_type == TYPE_F16) {
        attention_kernel<TYPE_F16><<<grid, k_att_threads, 0, stream>>>(q, out, rows, layer, s, scale);
    } else if (s.kv_type == TYPE_F32) {
        attention_kernel<TYPE_F32><<<grid, k_att_threads, 0, stream>>>(q, out, rows, layer, s, scale);
    } else if (s.kv_type == TYPE_Q8_0) {
        attention_kernel<TYPE_Q8_0><<<grid, k_att_threads, 0, stream>>>(q, out, rows, layer, s, scale);
    } else {
        throw cuda_error("attention: unsupported KV type id " + std::to_string(s.kv_type));
    }
    cuda_check(cudaGetLastError(), "attention_kernel launch");
}

}  // namespace strata
