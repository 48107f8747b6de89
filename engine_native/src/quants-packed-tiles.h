// What the AVX-512 VNNI packed products share (quants-packed-avx512.cpp: Q4_1, Q8_0, IQ4_NL, Q4_K, Q5_K,
// Q6_K; quants-packed-lowbit-avx512.cpp: Q3_K, Q2_K, IQ4_XS): broadcast helpers, the tile signature, a
// table of one type's tiles for 1..MAX_NT tokens, and the driver that walks a row range's groups of 16
// rows and its token tiles. A tile computes one group x nt tokens over all blocks, lane r of every
// vector belonging to row r of the group, so a (row, token) result never depends on nt or the range.
//
// Include only where STRATA_SIMD_AVX512 is defined. Not here: any type's arithmetic.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "quants-kernels.h"
#include "quants-packed.h"

namespace strata {
namespace packed_tiles {

constexpr int MAX_NT = 8;                      // tokens per tile: 8 accumulators + 8 weight vectors
constexpr size_t ACT_TILE_BYTES = 256 * 1024;  // prepared activations kept in L2 across all groups

inline __m512i bcast_u32(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}
// acc + dpbusd(w, the four bytes at p broadcast): one instruction with an embedded broadcast
// (GCC does not fold _mm512_set1_epi32 of a load into the instruction; a separate vpbroadcastd per
// product costs an extra uop).
inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const uint8_t* p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
    return acc;
}
inline __m512 bcast_f32(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_ps(v);
}
// (16,) fp16 at p -> floats
inline __m512 load_f16x16(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

// One group (g: its first packed block, nb blocks) x NT tokens (x: the first token's prepared row, rows
// xrb apart): Y[t * ys + lane] for the lanes in `keep`; prefetch: the first token tile of the group.
using tile_fn = void (*)(const uint8_t* g, int64_t nb, const uint8_t* x, size_t xrb, float* y, int64_t ys, __mmask16 keep,
                         bool prefetch);
using tile_table = std::array<tile_fn, MAX_NT>;

// tiles_of<T>(): T::tile<1> .. T::tile<MAX_NT>.
template <class T, size_t... I>
constexpr tile_table tiles_of(std::index_sequence<I...>) {
    return {{&T::template tile<int(I) + 1>...}};
}
template <class T>
constexpr tile_table tiles_of() {
    return tiles_of<T>(std::make_index_sequence<MAX_NT>());
}

// The groups of rows [r0, r1) x n_tok tokens, in token tiles whose prepared activations fit ACT_TILE_BYTES
// (each group's weights stream once a token tile) and tiles of up to MAX_NT tokens.
inline void run_tiles(const tile_table& tiles, size_t block_bytes, size_t act_block_bytes, const uint8_t* packed, int64_t nb,
                      const uint8_t* xp, size_t xrb, int64_t n_tok, float* y, int64_t ys, int64_t r0, int64_t r1) {
    const size_t group_bytes = size_t(nb) * block_bytes;
    const int64_t g0 = r0 / PACK_ROWS, g1 = (r1 + PACK_ROWS - 1) / PACK_ROWS;
    const int64_t row_bytes = nb * int64_t(act_block_bytes);
    const int64_t tok_tile = std::max<int64_t>(MAX_NT, int64_t(ACT_TILE_BYTES) / row_bytes / MAX_NT * MAX_NT);
    for (int64_t tb = 0; tb < n_tok; tb += tok_tile) {
        const int64_t te = std::min(n_tok, tb + tok_tile);
        for (int64_t g = g0; g < g1; ++g) {
            const int64_t left = r1 - g * PACK_ROWS;   // rows of this group to store
            const __mmask16 keep = left >= PACK_ROWS ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
            for (int64_t t = tb; t < te; t += MAX_NT) {
                const int64_t nt = std::min<int64_t>(MAX_NT, te - t);
                tiles[size_t(nt - 1)](packed + size_t(g) * group_bytes, nb, xp + size_t(t) * xrb, xrb, y + t * ys + g * PACK_ROWS,
                                      ys, keep, t == tb);
            }
        }
    }
}

// Prefetch (into L2) the lines [from, to) of the block `ahead` bytes past blk, clipped to the block.
inline void prefetch_lines(const uint8_t* blk, size_t ahead, size_t from, size_t to, size_t block_bytes) {
    for (size_t o = from; o < std::min(block_bytes, to); o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(blk + ahead + o), _MM_HINT_T1);
    }
}

}  // namespace packed_tiles

// The products of quants-packed-lowbit-avx512.cpp (Q3_K, Q2_K, IQ4_XS), or nullptr for another type.
packed_matmul_fn packed_lowbit_matmul_for(int32_t weight_type);

}  // namespace strata
