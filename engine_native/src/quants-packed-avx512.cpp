// AVX-512 VNNI products over row-interleaved Q4_1 / Q8_0 / IQ4_NL / Q4_K / Q5_K / Q6_K weights (layout:
// quants-packed.h; Q3_K, Q2_K and IQ4_XS: quants-packed-lowbit-avx512.cpp). A tile
// is one group of 16 weight rows x nt <= 8 tokens: per block, the group's quants are loaded (and
// for Q4_1 / IQ4_NL split into nibbles, IQ4_NL's looked up in its table + 128 by a vpshufb) once; per token, 8 vpdpbusd with the token's four activation bytes
// broadcast give in int32 lane r the dot of row r's whole block, then one convert and one FMA by
// (16 row scales x the token's scale), plus for Q4_1 one FMA of the 16 row minimums by the token's
// block sum (Q8_0 and IQ4_NL start from the token's -128 * sum instead). Lane r accumulates row r in
// block order, so no reduction is needed at the end.
//
// Q4_K (one super-block of 256 a packed block): per 16 elements of two sub-blocks, 4 + 4 vpdpbusd
// give each row's int32 sums (|.| <= 16 * 15 * 128, so exact in int16), which one vpdpwssd each
// multiplies by the row's 6-bit scale into an int32 super-block sum; the mins go through four
// vpdpwssd with the token's sub-block sums; then per super-block one FMA by d and one by dmin.
// Q5_K as Q4_K, each quant byte taking its fifth bit from qh (a shift and a vpternlogd); with q up to
// 31 a 16-element sum is no int16, so the row scale's vpdpwssd comes after each 2 vpdpbusd (8
// elements: |.| <= 8 * 31 * 128 < 2^15).
//
// Q6_K: per 16 elements of a sub-block, the 6-bit quants q in [0, 63] are assembled from ql's
// nibbles and qh's 2-bit fields (an and, a shift and a vpternlogd each), and 4 vpdpbusd start from
// the token's -32 * bsum, giving sum x (q - 32) (|.| <= 16 * 32 * 128: not an int16, so one
// vpmulld by the row's int8 scale); per super-block one FMA by d. Integer sums exact, as GGUF's.
//
// Every (row, token) goes through the same per-lane instructions whatever nt, the row range or
// n_tok, so the result does not depend on batching (quants.h's bitwise rule). Compiled only when
// the compiler targets AVX-512 VNNI; other builds get a table of nullptr. Not here: packing,
// activation preparation or argument checks (quants-packed.cpp).
#include "quants-kernels.h"

#if defined(STRATA_SIMD_AVX512)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "quants-blocks.h"
#include "quants-packed-tiles.h"
#include "quants-packed.h"
#include "quants.h"

// GCC 12's intrinsic headers self-initialise their "undefined" vectors and warn when inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__GNUC__) && !defined(__clang__)   // a GCC-only warning (clang warns of the unknown name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace strata {
namespace {

using namespace packed_tiles;

// Weights 16 KiB ahead, into L2 (T1): a T0 prefetch holds one of L1's few fill buffers until its line
// arrives, which on a mesh Xeon (session 13's VM, lines from a far L3 slice) capped one thread's stream:
// Q4_1 / Q8_0 streamed 96 MiB at 1 token 21-22 -> 25-30 G weights/s, 4 tokens 14-19 -> 18-26;
// Q4_K / Q5_K below likewise (+10-20% at 1 token); Q6_K measured no better and keeps T0.
constexpr size_t PREFETCH_BYTES = 16384;

// The blocks of 32 (packed_format, quants-packed.h): Q4_1, Q8_0 and IQ4_NL (Q4_1's nibbles, looked up in
// the table + 128 by a vpshufb; the +128 goes out through the activations' -128 * sum, as Q8_0's).

// Y[t * ys + lane] for t < NT over one group: g is its first packed block, x the first token's
// prepared row; lanes outside `keep` are not stored.
template <int KIND, int NT>
void packed_tile(const uint8_t* g, int64_t nb, const uint8_t* x, size_t xrb, float* y, int64_t ys, __mmask16 keep,
                 bool prefetch) {
    using F = packed_format<KIND>;
    constexpr bool Q4 = F::NIBBLES, IQ4 = KIND == PACKED_IQ4_NL;
    __m512 acc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    // IQ4_NL: the 16 table values + 128 (1 .. 241), in each 128-bit lane for vpshufb
    const __m512i table = _mm512_broadcast_i32x4(_mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(KVALUES_IQ4NL)),
                                                              _mm_set1_epi8(char(0x80))));
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = g + size_t(b) * F::BLOCK;
        if (prefetch) {
#pragma GCC unroll 9
            for (size_t o = 0; o < F::BLOCK; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + PREFETCH_BYTES + o), _MM_HINT_T1);
        }
        __m512i w[8];   // (8, 16) lane r: 4 unsigned quants of row r, elements 4j..4j+3 of the block
        if (Q4) {
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
                const __m512i v = _mm512_loadu_si512(blk + 64 * j);
                w[j] = _mm512_and_si512(v, low4);
                w[4 + j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                if (IQ4) {
                    w[j] = _mm512_shuffle_epi8(table, w[j]);
                    w[4 + j] = _mm512_shuffle_epi8(table, w[4 + j]);
                }
            }
        } else {
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) w[j] = _mm512_loadu_si512(blk + 64 * j);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + F::QS)));
        __m512 mw = _mm512_setzero_ps();
        if (F::HAS_MIN) mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + F::QS + 32)));
        const uint8_t* xb = x + size_t(b) * PACKED_ACT_BLOCK_BYTES;
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            const uint8_t* a = xb + size_t(t) * xrb;   // qs (32,), float d, float s | int32 corr
            __m512i d0 = F::HAS_MIN ? _mm512_setzero_si512() : bcast_u32(a + 36);
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) d0 = dpbusd_bcast(d0, w[j], a + 4 * j);
            const __m512 dot = _mm512_cvtepi32_ps(d0);
            acc[t] = _mm512_fmadd_ps(dot, _mm512_mul_ps(dw, bcast_f32(a + 32)), acc[t]);
            if (F::HAS_MIN) acc[t] = _mm512_fmadd_ps(mw, bcast_f32(a + 36), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ys, keep, acc[t]);
}

// Q4_K prefetch distance, spread over the steps of a block: measured (one thread, 96 MiB streamed,
// n = 2048 / 5632) decode 39 / 45 GB/s at 8 KiB, 37 / 45 at 12 KiB, 37 / 42 at 16 KiB; 4 tokens
// 182 / 265, 190 / 315, 200 / 320 GMAC/s. All 37 lines at the block's start: 28 / 30 GB/s.
constexpr size_t Q4_K_PREFETCH_BYTES = 12288;
// Q4_K (Q5 false) and Q5_K: as packed_tile, one super-block a step (layout: quants-packed.h).
template <bool Q5, int NT>
void packed_tile_q45_K(const uint8_t* g, int64_t nb, const uint8_t* x, size_t xrb, float* y, int64_t ys, __mmask16 keep,
                       bool prefetch) {
    constexpr size_t BLOCK = Q5 ? PACKED_Q5_K_BLOCK_BYTES : PACKED_Q4_K_BLOCK_BYTES, ACT = PACKED_ACT_Q8_K_BLOCK_BYTES;
    constexpr size_t STEP_LINES = Q5 ? 384 : 320;   // 8 steps cover the block's 37 (Q5_K: 45) lines
    __m512 acc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = g + size_t(b) * BLOCK;
        const uint8_t* xb = x + size_t(b) * ACT;
        __m512i isum[NT];   // (NT, 16) int32: sum over sub-blocks of scale * dot, per row lane
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
        // step u: elements 16h..16h+15 (h = u % 2) of sub-blocks 2q (low nibbles) and 2q + 1 (high), q = u / 2
#pragma GCC unroll 1
        for (int u = 0; u < 8; ++u) {
            const int q = u >> 1, h = u & 1;
            if (prefetch) {   // the block 12 KiB ahead, 5 of its 37 lines a step (Q5_K: 6 of 45; a burst stalls decode)
                for (size_t o = size_t(u) * STEP_LINES; o < std::min<size_t>(BLOCK, size_t(u) * STEP_LINES + STEP_LINES); o += 64) {
                    _mm_prefetch(reinterpret_cast<const char*>(blk + Q4_K_PREFETCH_BYTES + o), _MM_HINT_T1);
                }
            }
            // (16,) int32 lane r: scale of row r (high int16 zero, so vpdpwssd adds dot * scale)
            const __m512i sc_lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + PACKED_Q4_K_SC + 32 * q)));
            const __m512i sc_hi = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + PACKED_Q4_K_SC + 32 * q + 16)));
            __m512i w[8];   // (8, 16) lane r: 4 unsigned quants of row r
#pragma GCC unroll 4
            for (int j = 0; j < 4; ++j) {
                const __m512i v = _mm512_loadu_si512(blk + 64 * (8 * q + 4 * h + j));
                w[j] = _mm512_and_si512(v, low4);
                w[4 + j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                if (Q5) {   // qh bytes 16h + 4j ..: bit 2q (sub-block 2q) and 2q + 1 moved to bit 4; 0xF8: a | (b & c)
                    const __m512i hb = _mm512_srl_epi16(_mm512_loadu_si512(blk + PACKED_Q5_K_QH + 64 * (4 * h + j)), _mm_cvtsi32_si128(2 * q));
                    w[j] = _mm512_ternarylogic_epi32(w[j], _mm512_slli_epi16(hb, 4), bit4, 0xF8);
                    w[4 + j] = _mm512_ternarylogic_epi32(w[4 + j], _mm512_slli_epi16(hb, 3), bit4, 0xF8);
                }
            }
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                const uint8_t* xl = xb + size_t(t) * xrb + 64 * q + 16 * h;   // sub-block 2q's 16; + 32: 2q + 1's
                if (Q5) {   // int16 only over 8 elements: a vpdpwssd each 2 vpdpbusd
#pragma GCC unroll 2
                    for (int j = 0; j < 4; j += 2) {
                        const __m512i dl = dpbusd_bcast(dpbusd_bcast(_mm512_setzero_si512(), w[j], xl + 4 * j), w[j + 1], xl + 4 * j + 4);
                        const __m512i dh = dpbusd_bcast(dpbusd_bcast(_mm512_setzero_si512(), w[4 + j], xl + 32 + 4 * j), w[5 + j],
                                                        xl + 36 + 4 * j);
                        isum[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[t], dl, sc_lo), dh, sc_hi);
                    }
                    continue;
                }
                __m512i dl = _mm512_setzero_si512(), dh = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int j = 0; j < 4; ++j) {
                    dl = dpbusd_bcast(dl, w[j], xl + 4 * j);
                    dh = dpbusd_bcast(dh, w[4 + j], xl + 32 + 4 * j);
                }
                isum[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[t], dl, sc_lo), dh, sc_hi);
            }
        }
        __m512i mins[4];   // (4, 16) lane r: int16 mins of sub-blocks 2k, 2k + 1 of row r
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            mins[k] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + PACKED_Q4_K_MIN + 32 * k)));
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + PACKED_Q4_K_D)));
        const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + PACKED_Q4_K_DMIN)));
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            const uint8_t* a = xb + size_t(t) * xrb;   // qs (256,), float d, int16 sums (8,)
            __m512i ms = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; ++k) ms = _mm512_dpwssd_epi32(ms, mins[k], bcast_u32(a + QK_K + 4 + 4 * k));
            const __m512 dx = bcast_f32(a + QK_K);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(mw, dx), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ys, keep, acc[t]);
}

// Q6_K prefetch distance, as Q4_K's (not measured apart).
constexpr size_t Q6_K_PREFETCH_BYTES = 12288;
// Q6_K: as packed_tile, one super-block a step (layout: quants-packed.h).
template <int NT>
void packed_tile_q6_K(const uint8_t* g, int64_t nb, const uint8_t* x, size_t xrb, float* y, int64_t ys, __mmask16 keep,
                      bool prefetch) {
    constexpr size_t BLOCK = PACKED_Q6_K_BLOCK_BYTES, ACT = PACKED_ACT_Q6_K_BLOCK_BYTES;
    constexpr size_t STEP_LINES = 7 * 64;   // 8 steps x 7 lines cover the block's 53
    __m512 acc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = g + size_t(b) * BLOCK;
        const uint8_t* xb = x + size_t(b) * ACT;
        __m512i isum[NT];   // (NT, 16) int32: sum over sub-blocks of scale * sum x (q - 32), per row lane
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
        // step u: half hf = u / 4 (128 elements), i_hi = u / 2 % 2, pass = u % 2: ql bytes 64 hf + 32 pass
        // + 16 i_hi .. + 15, whose low nibbles are elements 128 hf + 32 pass + 16 i_hi .. (sub-block s_lo)
        // and high nibbles the same + 64 (sub-block s_lo + 4); qh's fields 2 pass and 2 pass + 2.
#pragma GCC unroll 1
        for (int u = 0; u < 8; ++u) {
            const int hf = u >> 2, i_hi = (u >> 1) & 1, pass = u & 1;
            if (prefetch) {
                for (size_t o = size_t(u) * STEP_LINES; o < std::min<size_t>(BLOCK, size_t(u) * STEP_LINES + STEP_LINES); o += 64) {
                    _mm_prefetch(reinterpret_cast<const char*>(blk + Q6_K_PREFETCH_BYTES + o), _MM_HINT_T0);
                }
            }
            const int s_lo = 8 * hf + 2 * pass + i_hi;
            const __m512i sc_lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + PACKED_Q6_K_SC + 16 * s_lo)));
            const __m512i sc_hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + PACKED_Q6_K_SC + 16 * (s_lo + 4))));
            __m512i w[8];   // (8, 16) lane r: 4 quants q of row r (w[c]: sub-block s_lo, w[4 + c]: s_lo + 4)
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
                const int i = 4 * i_hi + c;
                const __m512i l = _mm512_loadu_si512(blk + 64 * (16 * hf + 8 * pass + i));
                const __m512i h = _mm512_loadu_si512(blk + PACKED_Q6_K_QH + 64 * (8 * hf + i));
                // field 2 pass (for the low nibbles) and 2 pass + 2 (high) of each qh byte, moved to bits 4..5
                const __m512i h_lo = pass ? _mm512_slli_epi16(h, 2) : _mm512_slli_epi16(h, 4);
                const __m512i h_hi = pass ? _mm512_srli_epi16(h, 2) : h;
                // 0xF8: a | (b & c)
                w[c] = _mm512_ternarylogic_epi32(_mm512_and_si512(l, low4), h_lo, bits45, 0xF8);
                w[4 + c] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4), h_hi, bits45, 0xF8);
            }
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                const uint8_t* a = xb + size_t(t) * xrb;
                const uint8_t* xl = a + 128 * hf + 32 * pass + 16 * i_hi;   // s_lo's 16; + 64: s_lo + 4's
                __m512i dl = bcast_u32(a + QK_K + 4 * s_lo);
                __m512i dh = bcast_u32(a + QK_K + 4 * (s_lo + 4));
#pragma GCC unroll 4
                for (int c = 0; c < 4; ++c) {
                    dl = dpbusd_bcast(dl, w[c], xl + 4 * c);
                    dh = dpbusd_bcast(dh, w[4 + c], xl + 64 + 4 * c);
                }
                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(dl, sc_lo), _mm512_mullo_epi32(dh, sc_hi)));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + PACKED_Q6_K_D)));
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            const __m512 dx = bcast_f32(xb + size_t(t) * xrb + PACKED_ACT_Q6_K_D);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ys, keep, acc[t]);
}

template <packed_kind K, int NT>
constexpr tile_fn tile_for() {
    if constexpr (K == PACKED_Q4_K) return &packed_tile_q45_K<false, NT>;
    else if constexpr (K == PACKED_Q5_K) return &packed_tile_q45_K<true, NT>;
    else if constexpr (K == PACKED_Q6_K) return &packed_tile_q6_K<NT>;
    else return &packed_tile<K, NT>;
}

template <packed_kind K, size_t... I>
constexpr tile_table make_tiles(std::index_sequence<I...>) {
    return {{tile_for<K, int(I) + 1>()...}};
}

template <packed_kind K>
void packed_matmul(const uint8_t* packed, int64_t nb, const uint8_t* xp, size_t xrb, int64_t n_tok, float* y, int64_t ys,
                   int64_t r0, int64_t r1) {
    static constexpr tile_table tiles = make_tiles<K>(std::make_index_sequence<MAX_NT>());
    const size_t block_bytes = K == PACKED_Q4_K   ? PACKED_Q4_K_BLOCK_BYTES
                               : K == PACKED_Q5_K ? PACKED_Q5_K_BLOCK_BYTES
                               : K == PACKED_Q6_K ? PACKED_Q6_K_BLOCK_BYTES
                                                  : packed_format<K>::BLOCK;
    const size_t act_block_bytes = K == PACKED_Q4_K || K == PACKED_Q5_K ? PACKED_ACT_Q8_K_BLOCK_BYTES
                                   : K == PACKED_Q6_K ? PACKED_ACT_Q6_K_BLOCK_BYTES
                                                      : PACKED_ACT_BLOCK_BYTES;
    run_tiles(tiles, block_bytes, act_block_bytes, packed, nb, xp, xrb, n_tok, y, ys, r0, r1);
}

}  // namespace

packed_matmul_fn simd_packed_matmul_for(int32_t weight_type) {
    switch (weight_type) {
        case TYPE_Q4_1: return packed_matmul<PACKED_Q4_1>;
        case TYPE_Q8_0: return packed_matmul<PACKED_Q8_0>;
        case TYPE_Q4_K: return packed_matmul<PACKED_Q4_K>;
        case TYPE_Q5_K: return packed_matmul<PACKED_Q5_K>;
        case TYPE_Q6_K: return packed_matmul<PACKED_Q6_K>;
        case TYPE_IQ4_NL: return packed_matmul<PACKED_IQ4_NL>;
        default: return packed_lowbit_matmul_for(weight_type);   // Q3_K, Q2_K, IQ4_XS, or nullptr
    }
}

}  // namespace strata

#elif !defined(STRATA_SIMD_AVX2)  // neither AVX-512 VNNI nor AVX2 (quants-packed-avx2.cpp): the GGUF-layout kernels only

namespace strata {
packed_matmul_fn simd_packed_matmul_for(int32_t) { return nullptr; }
}  // namespace strata

#endif  // STRATA_SIMD_AVX512
