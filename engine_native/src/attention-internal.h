// Shared by attention.cpp, attention-grouped.cpp, attention-q8.cpp and kv-layout.cpp, not part of the
// engine's interface (attention.h is): the layouts' constants, the unroll pragma, the window check,
// the prefetch helper and the tiled softmax, and the q8_0 KV pieces that kv-layout.cpp's store and the
// entry points call.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "attention.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace strata::attn_detail {

constexpr int k_qk = 32;     // Q8_0 block
constexpr int64_t k_tile = k_kv_tile;
constexpr int64_t k_max_rep = 64;

// The loops over a block's accumulators must unroll (else GCC keeps the accumulators in memory).
#if defined(__GNUC__) || defined(__clang__)
#define STRATA_UNROLL _Pragma("GCC unroll 32")
#else
#define STRATA_UNROLL
#endif

// window: 0 (none) or the positions a row sees; `who` names the entry point in the message
inline void check_window(const char* who, int64_t window) {
    if (window < 0) {
        throw std::invalid_argument(std::string(who) + ": window " + std::to_string(window) +
                                    " is negative (0: no window, else the positions a row sees)");
    }
}

// Software prefetch of the cache lines of [p, p + bytes) (no-op off x86): attention reads each
// row's K tiles and V rows of one kv head, strided by the other heads' data, from memory at batched
// decode (several contexts' caches do not stay in L3 next to the weights). Into L2 (T1), as the
// packed weight products: a T0 prefetch holds an L1 fill buffer for the whole trip to a far L3
// slice (4 rows x 1,500 positions decoded 6-10% faster on session 13's mesh Xeon, 1 row the same).
inline void prefetch_bytes(const void* p, size_t bytes) {
#if defined(__x86_64__) || defined(_M_X64)
    const char* c = static_cast<const char*>(p);
    for (size_t b = 0; b < bytes; b += 64) _mm_prefetch(c + b, _MM_HINT_T1);
#else
    (void)p;
    (void)bytes;
#endif
}
constexpr int64_t k_prefetch_tiles = 4;       // K tiles ahead (2 KiB each for a 64-dim head in f16)
constexpr int64_t k_prefetch_rows = 48;       // V rows ahead

// One query's scores -> softmax weights in place, returns 1 / their sum (attention.cpp); positions
// [0, n_skip) (a window's start inside its first tile) and [n_pos, n_pad) get weight exactly 0; a sink
// logit above -INFINITY joins the max and the sum.
float softmax_tiled(float* sc, int64_t n_pos, int64_t n_pad, int64_t n_skip = 0, float sink = -INFINITY);

// A row's window in tiled coordinates: its positions [w0, n_pos) lie in tiles [first_tile, ...);
// base = first_tile * k_tile is the position the kernels' view of K, V and the scores starts at.
struct tile_window {
    int64_t w0, first_tile, base;
};
inline tile_window tile_window_of(int64_t n_pos, int64_t window) {
    const int64_t w0 = attention_window_start(n_pos, window);
    return {w0, w0 / k_kv_tile, w0 / k_kv_tile * k_kv_tile};
}

// ---- q8_0 (llama.cpp's blocks: 32 int8 and an fp16 scale). K tiled: per tile of 16 positions and per
// block of 32 dimensions, 544 bytes (the size of the 16 positions' row blocks): quants [j][r][i] =
// k[r][4j + i] + 128 (8 vectors of 16 positions x 4 dimensions, unsigned so that vpdpbusd applies),
// then the 16 positions' fp16 scales. V as rows. The query heads are quantized to q8_0 once per call
// (as llama.cpp's q8_0 K products do): a score is sum_b float(int32 dot of block b) * (d_k * d_q) in
// block order, then times scale; an output is sum_t (p_t * d_v) * float(v_q) in position order. The
// int32 dots are exact, so every build (VNNI, plain AVX-512 / AVX2, scalar) gives the same floats.

constexpr size_t k_q8_block = 2 + k_qk;                // 34 bytes
constexpr size_t k_q8_tile_block = k_tile * k_q8_block;   // 544 bytes
constexpr size_t k_q8_scales = k_tile * k_qk;          // offset of the scales in a tile block


// Position r of a K tile <-> one row block (34 bytes)
inline void q8_block_to_tile(const uint8_t* blk, uint8_t* tb, int64_t r) {
    for (int j = 0; j < k_qk / 4; j++)
        for (int i = 0; i < 4; i++) tb[j * 64 + r * 4 + i] = uint8_t(blk[2 + 4 * j + i] ^ 0x80);
    std::memcpy(tb + k_q8_scales + 2 * r, blk, 2);
}
inline void q8_tile_to_block(const uint8_t* tb, int64_t r, uint8_t* blk) {
    std::memcpy(blk, tb + k_q8_scales + 2 * r, 2);
    for (int j = 0; j < k_qk / 4; j++)
        for (int i = 0; i < 4; i++) blk[2 + 4 * j + i] = uint8_t(tb[j * 64 + r * 4 + i] ^ 0x80);
}

// The query heads of one call quantized to q8_0: qs (n_rep, head_dim) int8; per head and block of 32,
// d (the float amax / 127, not rounded to fp16) and bias = -128 * sum(qs) (removes K's + 128 exactly)
constexpr int64_t k_q8_max_head_dim = 256;
struct q8_query {
    alignas(64) int8_t qs[k_max_rep][k_q8_max_head_dim];
    float d[k_max_rep][k_q8_max_head_dim / k_qk];
    int32_t bias[k_max_rep][k_q8_max_head_dim / k_qk];
};

// The n_rep query heads of one call, quantized (a per-thread buffer)
const q8_query& quantize_queries(const float* q, int64_t n_rep, int64_t hd);
// scores[h][t] of the n_rep heads over tiles [tile0, tile1) of kv head g
void scores_q8_heads(const kv_layout& L, const uint8_t* k, const q8_query& qq, int64_t g, int64_t n_rep,
                     int64_t tile0, int64_t tile1, int64_t n_pad, float scale, float* scores);
// All of kv head g's output dimensions for its n_rep query heads
void values_q8_all(const kv_layout& L, const uint8_t* v, int64_t g, int64_t n_rep, const float* p, int64_t n_pad,
                   int64_t n_pos, const float* inv_sum, float* out);
// attention_row_group's q8_0 case (head sizes 32, 64, 128): each row's outputs bitwise those of
// attention_q8_tiled for the row alone; scratch as attention_rows_scratch_floats gives
bool attention_q8_grouped(const kv_layout& L);
void attention_rows_q8_tiled(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t q_stride,
                             int64_t g, int64_t n_rep, int64_t n_rows, const int64_t* n_pos, float scale, float* out,
                             int64_t out_stride, float* scratch, int64_t window, const float* sinks);
// One row's attention over a q8_0 KV (attention_group's q8_0 case)
void attention_q8_tiled(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t g,
                        int64_t n_rep, int64_t n_pos, float scale, float* out, float* scores, int64_t window,
                        const float* sinks);

}  // namespace strata::attn_detail
