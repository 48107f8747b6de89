// AVX2 products over row-interleaved Q4_1 / Q8_0 / IQ4_NL / Q4_K / Q5_K / Q6_K weights (layout: quants-packed.h),
// for the CPUs without AVX-512 VNNI (Intel Core consumer chips, AMD Zen 2/3). A tile is one half of a
// group of 16 rows (8 rows: one 256-bit vector, lane r holding four quant bytes of row r) x nt <= 8
// tokens: per block the half's quants are loaded (Q4_1 / IQ4_NL: split into nibbles, IQ4_NL's looked
// up in its signed table by a vpshufb) once; per token, 8 maddubs against the token's four activation
// bytes broadcast give in int32 lane r the dot of row r's whole block, then one convert and one FMA
// by (8 row scales x the token's scale), plus for Q4_1 one FMA of the 8 row minimums by the token's
// block sum. Lane r accumulates row r in block order: no horizontal reduction, and the row scales
// are applied 8 rows at a time (the GGUF-layout kernels of quants-avx2.cpp do both per row).
//
// Integer products (no dpbusd): Q4_1's unsigned nibbles (<= 15) against activations |x| <= 127 give
// maddubs pair sums <= 3810, so the 8 of a block add in int16 (<= 30480) before one madd to int32.
// Q8_0 and IQ4_NL are signed (Q8_0 stored + 128: xor 0x80 gives w back), so the sign trick: maddubs
// of |w| (<= 128) with x carrying w's sign, each (pair sums <= 32512: no room to add two) widened by
// a madd; the activations' -128 * sum word is not needed. The integer sums are exact, and the float
// steps are those of quants-packed-avx512.cpp in the same order, so a (token, row) result is the
// same float as the AVX-512 build's packed product.
//
// The K-quants, one super-block of 256 a packed block, in the AVX-512 file's steps with its integers:
// Q4_K a sub-block of 32 a step, its 8 maddubs (Q8_K activations |x| <= 128: pair sums <= 3840) added in
// int16 (<= 30720), then one madd by the row's 6-bit scale (held in both int16 halves of the lane) into the
// int32 super-block sum; the mins by 4 madd of the row's int16 min pairs with the token's sub-block sums;
// then per super-block one FMA by d and one by dmin. Q5_K as Q4_K, each quant byte taking its fifth bit from
// qh (q <= 31: pair sums <= 7936, so 4 add in int16, 2 madd a sub-block). Q6_K's q in [0, 63]: pair sums
// <= 16128, two added in int16 (<= 32256) and widened by a madd; a sub-block's sum starts from the token's
// -32 * bsum (the q - 32 offset) and a mullo multiplies it by the row's int8 scale; per super-block one FMA
// by d. Exact integer sums, the AVX-512 file's float steps: the same floats.
//
// Every (row, token) goes through the same per-lane instructions whatever nt, the half, the row range
// or n_tok (quants.h's bitwise rule). Compiled only for an AVX2 build without AVX-512 VNNI (the
// macros of quants-kernels.h); Q3_K, Q2_K and IQ4_XS keep the GGUF-layout kernels there. Also here:
// the activations quantized straight into prepared rows for Q4_1 / Q8_0 / IQ4_NL (quantize_act_row_packed's
// fast path, below the products; the K-quants' Q8_K rows are quantized then prepared). Not here: packing or
// argument checks (quants-packed.cpp).
#include "quants-kernels.h"

#if defined(STRATA_SIMD_AVX2)

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "act-quant-avx2.h"
#include "quants-blocks.h"
#include "quants-packed.h"
#include "quants.h"

namespace strata {
namespace {

constexpr int MAX_NT = 8;                      // tokens per tile (the accumulators past the registers spill)
constexpr int HALF_ROWS = 8;                   // rows of a tile: one 256-bit vector of int32 / float lanes
constexpr size_t ACT_TILE_BYTES = 256 * 1024;  // prepared activations kept in L2 across all groups
// Weights 16 KiB ahead into L2, as the AVX-512 file (its measurements); only the first half's pass
// prefetches: the second reads the same lines (the other 32 bytes of each 64), by then in L1 / L2.
constexpr size_t PREFETCH_BYTES = 16384;

inline __m256i bcast_u32(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
inline __m256 bcast_f32(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_ps(v);
}
inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// (8,) fp16 at p -> floats
inline __m256 load_f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// Y[t * ys + lane] = acc[t] for t < NT, lanes >= keep not stored.
template <int NT>
inline void store_tile(const __m256* acc, float* y, int64_t ys, int keep) {
    if (keep >= HALF_ROWS) {
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * ys, acc[t]);
    } else {
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(keep), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) _mm256_maskstore_ps(y + t * ys, mask, acc[t]);
    }
}

// Block b (at blk) of one half (h: rows 8h..8h+7) of one group, added into acc[t] for t < NT: x is the first
// token's prepared row. Shared by packed_tile and packed_tile_pair.
template <int KIND, int NT>
inline __attribute__((always_inline)) void packed_block(const uint8_t* blk, int64_t b, int h, const uint8_t* x, size_t xrb,
                                                        __m256* acc, bool prefetch) {
    using F = packed_format<KIND>;
    const size_t half = size_t(32 * h);   // the half's bytes in each 64-byte quant vector
    constexpr bool Q4 = F::NIBBLES, IQ4 = KIND == PACKED_IQ4_NL, SIGNED = KIND != PACKED_Q4_1;
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    // IQ4_NL: its 16 signed table values, in each 128-bit lane for vpshufb
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(KVALUES_IQ4NL)));
    if (prefetch) {
#pragma GCC unroll 9
        for (size_t o = 0; o < F::BLOCK; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + PREFETCH_BYTES + o), _MM_HINT_T1);
    }
    __m256i w[8];   // (8, 8) lane r: 4 quants of row 8h + r, elements 4j..4j+3 of the block (Q4_1: unsigned;
                    // else |w|)
    __m256i sgn[8];  // Q8_0 / IQ4_NL: the signed quants (their signs go onto the activations)
    if (Q4) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            const __m256i v = load256(blk + 64 * j + half);
            w[j] = _mm256_and_si256(v, low4);
            w[4 + j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        }
    } else {
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) w[j] = _mm256_xor_si256(load256(blk + 64 * j + half), _mm256_set1_epi8(char(0x80)));
    }
    if (SIGNED) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            sgn[j] = IQ4 ? _mm256_shuffle_epi8(table, w[j]) : w[j];
            w[j] = _mm256_abs_epi8(sgn[j]);
        }
    }
    const __m256 dw = load_f16x8(blk + F::QS + 16 * h);
    __m256 mw = _mm256_setzero_ps();
    if (F::HAS_MIN) mw = load_f16x8(blk + F::QS + 32 + 16 * h);
    const uint8_t* xb = x + size_t(b) * PACKED_ACT_BLOCK_BYTES;
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
        const uint8_t* a = xb + size_t(t) * xrb;   // qs (32,), float d, float s | int32 corr (unused)
        __m256i d0;
        if (SIGNED) {   // each pair sum up to 32512: widened one by one
            d0 = _mm256_madd_epi16(_mm256_maddubs_epi16(w[0], _mm256_sign_epi8(bcast_u32(a), sgn[0])), ones);
#pragma GCC unroll 8
            for (int j = 1; j < 8; ++j) {
                const __m256i p = _mm256_maddubs_epi16(w[j], _mm256_sign_epi8(bcast_u32(a + 4 * j), sgn[j]));
                d0 = _mm256_add_epi32(d0, _mm256_madd_epi16(p, ones));
            }
        } else {        // the block's 8 pair sums add in int16 (<= 30480)
            __m256i p = _mm256_maddubs_epi16(w[0], bcast_u32(a));
#pragma GCC unroll 8
            for (int j = 1; j < 8; ++j) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w[j], bcast_u32(a + 4 * j)));
            d0 = _mm256_madd_epi16(p, ones);
        }
        const __m256 dot = _mm256_cvtepi32_ps(d0);
        acc[t] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dw, bcast_f32(a + 32)), acc[t]);
        if (F::HAS_MIN) acc[t] = _mm256_fmadd_ps(mw, bcast_f32(a + 36), acc[t]);
    }
}

// Y[t * ys + lane] for t < NT over one half (h: rows 8h..8h+7) of one group: g is its first packed
// block, x the first token's prepared row; lanes >= keep are not stored.
template <int KIND, int NT>
void packed_tile(const uint8_t* g, int64_t nb, int h, const uint8_t* x, size_t xrb, float* y, int64_t ys, int keep,
                 bool prefetch) {
    using F = packed_format<KIND>;
    __m256 acc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) packed_block<KIND, NT>(g + size_t(b) * F::BLOCK, b, h, x, xrb, acc, prefetch);
    store_tile<NT>(acc, y, ys, keep);
}

// One token over the same half of two groups ga and gb, their blocks alternated in one loop: two sequential
// streams in flight instead of one (session 37: a single packed stream stalls at ~13.5 GB/s on a Zen 3, where
// two far-apart streams decode the default model ~11% faster). Each group's lanes go through packed_block's
// instructions in block order, as in packed_tile<KIND, 1>: the same floats.
template <int KIND>
void packed_tile_pair(const uint8_t* ga, const uint8_t* gb, int64_t nb, int h, const uint8_t* x, float* ya, float* yb,
                      bool prefetch) {
    using F = packed_format<KIND>;
    __m256 acca[1] = {_mm256_setzero_ps()}, accb[1] = {_mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
        packed_block<KIND, 1>(ga + size_t(b) * F::BLOCK, b, h, x, 0, acca, prefetch);
        packed_block<KIND, 1>(gb + size_t(b) * F::BLOCK, b, h, x, 0, accb, prefetch);
    }
    store_tile<1>(acca, ya, 0, HALF_ROWS);
    store_tile<1>(accb, yb, 0, HALF_ROWS);
}

// The K-quants' weights 12 KiB ahead into L2, a few lines each of a super-block's 8 steps (quants-packed-avx512.cpp's
// distance and spread: a burst of all lines at a block's start stalled decode there); only the first half's pass.
constexpr size_t K_PREFETCH_BYTES = 12288;
// Far weight streams a one-token K-quant product walks at once (packed_tile_streams_K)
constexpr int K_STREAMS = 2;
inline void prefetch_step(const uint8_t* blk, int u, size_t step_bytes, size_t block_bytes) {
    for (size_t o = size_t(u) * step_bytes; o < std::min(block_bytes, size_t(u + 1) * step_bytes); o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(blk + K_PREFETCH_BYTES + o), _MM_HINT_T1);
    }
}

// Q4_K (Q5 false) and Q5_K over one half of a group, one super-block a step (layout: quants-packed.h). Step s:
// sub-block s (32 elements), the low (s even) or high nibbles of quant vectors 8(s / 2) .. + 7. Per token, its
// maddubs pair sums (<= 15 * 128 * 2 = 3840) add in int16, all 8 of a sub-block (<= 30720; Q5_K's, <= 31 * 128 * 2
// = 7936, 4 at a time: <= 31744), then one madd by the row's scale (in both int16 halves of its lane) gives the
// int32 dot * scale: the integers of the AVX-512 build's vpdpwssd, so the same float steps give its floats.
// Super-block blk of one half (h) of one group, added into acc[t] for t < NT: xb is the first token's prepared
// block. Shared by packed_tile_q45_K and the one-token pair tile.
template <bool Q5, int NT>
inline __attribute__((always_inline)) void q45_K_block(const uint8_t* blk, const uint8_t* xb, size_t xrb, int h, __m256* acc,
                                                       bool prefetch) {
    constexpr size_t BLOCK = Q5 ? PACKED_Q5_K_BLOCK_BYTES : PACKED_Q4_K_BLOCK_BYTES;
    constexpr size_t STEP_BYTES = Q5 ? 384 : 320;   // 8 steps cover the block's 37 (Q5_K: 45) lines
    const __m256i low4 = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    const size_t half = size_t(32 * h);
    __m256i isum[NT];   // (NT, 8) int32: sum over sub-blocks of scale * dot, per row lane
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int s = 0; s < 8; ++s) {
        const int q = s >> 1;
        if (prefetch) prefetch_step(blk, s, STEP_BYTES, BLOCK);
        const __m256i sc1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + PACKED_Q4_K_SC + 16 * s + 8 * h)));
        const __m256i sc = _mm256_or_si256(sc1, _mm256_slli_epi32(sc1, 16));
        const __m128i shift = _mm_cvtsi32_si128(s);
        __m256i w[8];   // (8, 8) lane r: 4 unsigned quants of row 8h + r, elements 4j .. 4j + 3 of sub-block s
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const __m256i v = load256(blk + 64 * (8 * q + j) + half);
            w[j] = _mm256_and_si256((s & 1) ? _mm256_srli_epi16(v, 4) : v, low4);
            if (Q5) {   // bit s of qh byte 4j + i: the fifth bit, moved to bit 4 (inside its byte: s <= 7)
                const __m256i hb = _mm256_srl_epi16(load256(blk + PACKED_Q5_K_QH + 64 * j + half), shift);
                w[j] = _mm256_or_si256(w[j], _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit4));
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            const uint8_t* xl = xb + size_t(t) * xrb + 32 * s;
            if (Q5) {
                __m256i p0 = _mm256_maddubs_epi16(w[0], bcast_u32(xl));
                __m256i p1 = _mm256_maddubs_epi16(w[4], bcast_u32(xl + 16));
#pragma GCC unroll 3
                for (int j = 1; j < 4; ++j) {
                    p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(w[j], bcast_u32(xl + 4 * j)));
                    p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(w[4 + j], bcast_u32(xl + 16 + 4 * j)));
                }
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_madd_epi16(p0, sc), _mm256_madd_epi16(p1, sc)));
                continue;
            }
            __m256i p = _mm256_maddubs_epi16(w[0], bcast_u32(xl));
#pragma GCC unroll 7
            for (int j = 1; j < 8; ++j) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w[j], bcast_u32(xl + 4 * j)));
            isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sc));
        }
    }
    __m256i mins[4];   // (4, 8) lane r: int16 mins of sub-blocks 2k, 2k + 1 of row 8h + r
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
        mins[k] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + PACKED_Q4_K_MIN + 32 * k + 16 * h)));
    }
    const __m256 dw = load_f16x8(blk + PACKED_Q4_K_D + 16 * h);
    const __m256 mw = load_f16x8(blk + PACKED_Q4_K_DMIN + 16 * h);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
        const uint8_t* a = xb + size_t(t) * xrb;   // qs (256,), float d, int16 sums (8,)
        __m256i ms = _mm256_madd_epi16(mins[0], bcast_u32(a + QK_K + 4));
#pragma GCC unroll 3
        for (int k = 1; k < 4; ++k) ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mins[k], bcast_u32(a + QK_K + 4 + 4 * k)));
        const __m256 dx = bcast_f32(a + QK_K);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, dx), acc[t]);
        acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(mw, dx), acc[t]);
    }
}

template <bool Q5, int NT>
void packed_tile_q45_K(const uint8_t* g, int64_t nb, int h, const uint8_t* x, size_t xrb, float* y, int64_t ys, int keep,
                       bool prefetch) {
    constexpr size_t BLOCK = Q5 ? PACKED_Q5_K_BLOCK_BYTES : PACKED_Q4_K_BLOCK_BYTES, ACT = PACKED_ACT_Q8_K_BLOCK_BYTES;
    __m256 acc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) q45_K_block<Q5, NT>(g + size_t(b) * BLOCK, x + size_t(b) * ACT, xrb, h, acc, prefetch);
    store_tile<NT>(acc, y, ys, keep);
}

// Pass PASS of one (hf, i_hi) of q6_K_block over one half: sub-blocks s_lo = 8 hf + 2 PASS + i_hi and s_lo + 4, added
// into isum[t] for t < NT. ql / qh: the half's first quant vectors of the (hf, i_hi) (pass 0's ql; pass 1's are 512
// bytes on), sc: s_lo's 8 scales, x: the first token's prepared block + 128 hf + 16 i_hi, bs: its -32 * bsum of s_lo.
template <int NT, int PASS>
inline __attribute__((always_inline)) void q6_K_pass(const uint8_t* ql, const uint8_t* qh, const uint8_t* sc, const uint8_t* x,
                                                     const uint8_t* bs, size_t xrb, __m256i* isum, const uint8_t* pf) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30), ones = _mm256_set1_epi16(1);
    if (pf) {
#pragma GCC unroll 7
        for (int i = 0; i < 7; ++i) _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * i), _MM_HINT_T1);
    }
    const __m256i sc_lo = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 32 * PASS)));
    const __m256i sc_hi = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 32 * PASS + 64)));
    __m256i w[8];   // (8, 8) lane r: 4 quants q of row 8h + r (w[c]: sub-block s_lo, w[4 + c]: s_lo + 4)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
        const __m256i l = load256(ql + 512 * PASS + 64 * c);
        const __m256i hq = load256(qh + 64 * c);
        // field 2 PASS (for the low nibbles) and 2 PASS + 2 (high) of each qh byte, moved to bits 4..5
        const __m256i h_lo = PASS ? _mm256_slli_epi16(hq, 2) : _mm256_slli_epi16(hq, 4);
        const __m256i h_hi = PASS ? _mm256_srli_epi16(hq, 2) : hq;
        w[c] = _mm256_or_si256(_mm256_and_si256(l, low4), _mm256_and_si256(h_lo, bits45));
        w[4 + c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), low4), _mm256_and_si256(h_hi, bits45));
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
        const uint8_t* xl = x + size_t(t) * xrb + 32 * PASS;   // s_lo's 16; + 64: s_lo + 4's
        const uint8_t* b = bs + size_t(t) * xrb + 8 * PASS;
        const __m256i l01 = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], bcast_u32(xl)), _mm256_maddubs_epi16(w[1], bcast_u32(xl + 4)));
        const __m256i l23 = _mm256_add_epi16(_mm256_maddubs_epi16(w[2], bcast_u32(xl + 8)), _mm256_maddubs_epi16(w[3], bcast_u32(xl + 12)));
        const __m256i h01 = _mm256_add_epi16(_mm256_maddubs_epi16(w[4], bcast_u32(xl + 64)), _mm256_maddubs_epi16(w[5], bcast_u32(xl + 68)));
        const __m256i h23 = _mm256_add_epi16(_mm256_maddubs_epi16(w[6], bcast_u32(xl + 72)), _mm256_maddubs_epi16(w[7], bcast_u32(xl + 76)));
        const __m256i dl = _mm256_add_epi32(bcast_u32(b), _mm256_add_epi32(_mm256_madd_epi16(l01, ones), _mm256_madd_epi16(l23, ones)));
        const __m256i dh = _mm256_add_epi32(bcast_u32(b + 16), _mm256_add_epi32(_mm256_madd_epi16(h01, ones), _mm256_madd_epi16(h23, ones)));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(_mm256_mullo_epi32(dl, sc_lo), _mm256_mullo_epi32(dh, sc_hi)));
    }
}

// Q6_K over one half of a group, one super-block a step (layout: quants-packed.h), in the steps of the AVX-512
// build (u = 2k + pass: half hf = k / 2, i_hi = k % 2; sub-blocks s_lo and s_lo + 4). The 6-bit quants
// q in [0, 63] against activations |x| <= 128: maddubs pair sums <= 16128, two added in int16 (<= 32256), then
// widened by a madd; a sub-block's int32 sum starts from the token's -32 * bsum (the q - 32 offset) and one
// mullo multiplies it by the row's int8 scale: the AVX-512 build's integers. A loop over k with both passes in its
// body, their shifts and offsets constants: the loop over u spent about a third of its instructions on scalar
// address arithmetic and pass branches (x1.2-1.25 in L2 without them). Fully unrolled steps measured slower (their
// prefetches hoisted into one burst; pinned in place, still 0.8x in L2), and so did prefetches held behind a
// pass's values by asm (x0.8 streamed): the prefetches stay plain, 7 lines at the start of each pass.
template <int NT>
inline __attribute__((always_inline)) void q6_K_block(const uint8_t* blk, const uint8_t* xb, size_t xrb, int h, __m256* acc,
                                                      bool prefetch) {
    __m256i isum[NT];   // (NT, 8) int32: sum over sub-blocks of scale * sum x (q - 32), per row lane
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    const uint8_t* pf = prefetch ? blk + K_PREFETCH_BYTES : nullptr;   // 7 lines a pass: 56 >= the block's 53
#pragma GCC unroll 1
    for (int k = 0; k < 4; ++k) {
        const int hf = k >> 1, i_hi = k & 1;
        const uint8_t* ql = blk + 1024 * hf + 256 * i_hi + 32 * h;
        const uint8_t* qh = blk + PACKED_Q6_K_QH + 256 * k + 32 * h;
        const uint8_t* sc = blk + PACKED_Q6_K_SC + 16 * (8 * hf + i_hi) + 8 * h;
        const uint8_t* x = xb + 128 * hf + 16 * i_hi;
        const uint8_t* bs = xb + QK_K + 4 * (8 * hf + i_hi);
        q6_K_pass<NT, 0>(ql, qh, sc, x, bs, xrb, isum, pf ? pf + 896 * k : nullptr);
        q6_K_pass<NT, 1>(ql, qh, sc, x, bs, xrb, isum, pf ? pf + 896 * k + 448 : nullptr);
    }
    const __m256 dw = load_f16x8(blk + PACKED_Q6_K_D + 16 * h);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
        const __m256 dx = bcast_f32(xb + size_t(t) * xrb + PACKED_ACT_Q6_K_D);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, dx), acc[t]);
    }
}

template <int NT>
void packed_tile_q6_K(const uint8_t* g, int64_t nb, int h, const uint8_t* x, size_t xrb, float* y, int64_t ys, int keep,
                      bool prefetch) {
    constexpr size_t BLOCK = PACKED_Q6_K_BLOCK_BYTES, ACT = PACKED_ACT_Q6_K_BLOCK_BYTES;
    __m256 acc[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) q6_K_block<NT>(g + size_t(b) * BLOCK, x + size_t(b) * ACT, xrb, h, acc, prefetch);
    store_tile<NT>(acc, y, ys, keep);
}

// One token over both halves of S K-quant groups g, g + apart, ... (all their rows), their super-blocks alternated:
// packed_tile_pair's far streams, and each super-block read from memory once and used by both halves while it is
// in L1 (the one-group tiles read a group twice, the second half's pass from L2 with no memory traffic in flight:
// memory busy about half the time). Each block's prefetch_step spread is issued by its first half, per stream.
// Each half's lanes go through the one-group tile's instructions in block order: the same floats.
template <packed_kind K, int S>
void packed_tile_streams_K(const uint8_t* g, size_t apart, int64_t nb, const uint8_t* x, float* y, int64_t y_apart) {
    constexpr size_t BLOCK = K == PACKED_Q4_K   ? PACKED_Q4_K_BLOCK_BYTES
                             : K == PACKED_Q5_K ? PACKED_Q5_K_BLOCK_BYTES
                                                : PACKED_Q6_K_BLOCK_BYTES;
    constexpr size_t ACT = K == PACKED_Q6_K ? PACKED_ACT_Q6_K_BLOCK_BYTES : PACKED_ACT_Q8_K_BLOCK_BYTES;
    __m256 acc[2 * S][1];   // [2k + h]: group k's half h
#pragma GCC unroll 8
    for (int i = 0; i < 2 * S; ++i) acc[i][0] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* xb = x + size_t(b) * ACT;
#pragma GCC unroll 4
        for (int k = 0; k < S; ++k) {
            const uint8_t* blk = g + size_t(k) * apart + size_t(b) * BLOCK;
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                if constexpr (K == PACKED_Q6_K) q6_K_block<1>(blk, xb, 0, h, acc[2 * k + h], h == 0);
                else q45_K_block<K == PACKED_Q5_K, 1>(blk, xb, 0, h, acc[2 * k + h], h == 0);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 2 * S; ++i) store_tile<1>(acc[i], y + (i >> 1) * y_apart + HALF_ROWS * (i & 1), 0, HALF_ROWS);
}

using tile_fn = void (*)(const uint8_t* g, int64_t nb, int h, const uint8_t* x, size_t xrb, float* y, int64_t ys, int keep,
                         bool prefetch);
using tile_table = std::array<tile_fn, MAX_NT>;

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

// The groups of rows [r0, r1) x n_tok tokens, in token tiles whose prepared activations fit ACT_TILE_BYTES
// (each group's weights stream once a token tile), each group a half at a time, tiles of up to MAX_NT tokens.
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
    const size_t group_bytes = size_t(nb) * block_bytes;
    const int64_t g0 = r0 / PACK_ROWS, g1 = (r1 + PACK_ROWS - 1) / PACK_ROWS;
    const int64_t row_bytes = nb * int64_t(act_block_bytes);
    const int64_t tok_tile = std::max<int64_t>(MAX_NT, int64_t(ACT_TILE_BYTES) / row_bytes / MAX_NT * MAX_NT);
    int64_t gs = g0;   // the groups before gs are done in pairs
    if (n_tok == 1) {   // decode: group i with groups i + m, i + 2m, ... of the range's whole groups (S streams m
                        // groups apart); the adjacent pairing (i, i + 1) measured slower
        constexpr bool KQ = K == PACKED_Q4_K || K == PACKED_Q5_K || K == PACKED_Q6_K;
        constexpr int S = KQ ? K_STREAMS : 2;
        const int64_t gfull = g0 + (r1 - g0 * PACK_ROWS) / PACK_ROWS;   // groups whose 16 rows are all stored
        const int64_t m = (gfull - g0) / S;
        for (int64_t i = 0; i < m; ++i) {
            const int64_t ga = g0 + i, gb = g0 + m + i;
            if constexpr (KQ) {   // both halves at once
                packed_tile_streams_K<K, S>(packed + size_t(ga) * group_bytes, size_t(m) * group_bytes, nb, xp, y + ga * PACK_ROWS,
                                            m * PACK_ROWS);
                continue;
            }
            for (int h = 0; h < 2; ++h) {
                packed_tile_pair<K>(packed + size_t(ga) * group_bytes, packed + size_t(gb) * group_bytes, nb, h, xp,
                                    y + ga * PACK_ROWS + HALF_ROWS * h, y + gb * PACK_ROWS + HALF_ROWS * h, h == 0);
            }
        }
        gs = g0 + S * m;
    }
    for (int64_t tb = 0; tb < n_tok; tb += tok_tile) {
        const int64_t te = std::min(n_tok, tb + tok_tile);
        for (int64_t g = gs; g < g1; ++g) {
            for (int h = 0; h < 2; ++h) {
                const int64_t left = r1 - g * PACK_ROWS - HALF_ROWS * h;   // rows of this half to store
                if (left <= 0) break;
                for (int64_t t = tb; t < te; t += MAX_NT) {
                    const int64_t nt = std::min<int64_t>(MAX_NT, te - t);
                    tiles[size_t(nt - 1)](packed + size_t(g) * group_bytes, nb, h, xp + size_t(t) * xrb, xrb,
                                          y + t * ys + g * PACK_ROWS + HALF_ROWS * h, ys, int(std::min<int64_t>(left, HALF_ROWS)),
                                          h == 0 && t == tb);
                }
            }
        }
    }
}

// ---- activations straight into prepared rows (quants-packed.h's 40-byte blocks), 8 blocks at a time: the
// 8 amax of a group reduced into one vector, one vector division for the 8 d and one for the 8 1/d, the
// fp16 roundings of d and s as one vcvtps2ph each (quantize_act_row did them block by block, a scalar
// division chain and two conversions each, and then prepare_act_row_packed widened them again). Per
// element the same instructions as quants-avx2.cpp's quant_act_q8_0_avx2 (x * 1/d, rounded half away
// from zero), and every division, product and rounding is IEEE's, so the bytes are those of
// prepare_act_row_packed(quantize_act_row(x)) (tests/native/test_kernels_packed_act.py).

constexpr int ACT_GROUP = 8;   // blocks a group: one float lane each

using act_avx2::abs8;
using act_avx2::pack_32_i8;
using act_avx2::round_away8;

// Lane k of the result: the max of r[k]'s 8 lanes, paired and ordered as quants-avx2.cpp's hmax8 pairs them
// (lanes i and i + 4, then i and i + 2, then 0 and 1; the lower lane the first operand). The max of floats
// is exact, but a NaN lane is kept or dropped by its place (maxps returns the second operand where either
// is NaN), so any other tree gives another amax for a block holding NaN.
inline __m256 hmax8x8(const __m256* r) {
    __m256 a[4];
    for (int i = 0; i < 4; ++i) {   // lanes 0-3: r[i]'s max(lane j, lane j + 4); lanes 4-7: r[i + 4]'s
        a[i] = _mm256_max_ps(_mm256_permute2f128_ps(r[i], r[i + 4], 0x20), _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
    // max(lane j, lane j + 2) of each block's 4: lanes (0, 1) r[0], (2, 3) r[1], (4, 5) r[4], (6, 7) r[5] (b1: r[2], r[3], r[6], r[7])
    const __m256 b0 = _mm256_max_ps(_mm256_shuffle_ps(a[0], a[1], 0x44), _mm256_shuffle_ps(a[0], a[1], 0xEE));
    const __m256 b1 = _mm256_max_ps(_mm256_shuffle_ps(a[2], a[3], 0x44), _mm256_shuffle_ps(a[2], a[3], 0xEE));
    return _mm256_max_ps(_mm256_shuffle_ps(b0, b1, 0x88), _mm256_shuffle_ps(b0, b1, 0xDD));   // max(lane 0, lane 1): r[0..7]
}

// WITH_SUM (Q4_1's Q8_1): float s = the fp16 of sum(q) * d, widened; else (Q8_0, IQ4_NL) int32 -128 * sum(q).
template <bool WITH_SUM>
void quant_act_packed(const float* x, uint8_t* dst, int64_t n) {
    const int64_t nb = n / 32;
    for (int64_t b0 = 0; b0 < nb; b0 += ACT_GROUP) {
        const int nk = int(std::min<int64_t>(ACT_GROUP, nb - b0));
        const float* xg = x + 32 * b0;
        __m256 m[ACT_GROUP];
        for (int k = 0; k < ACT_GROUP; ++k) {
            m[k] = _mm256_setzero_ps();   // blocks past the row: amax 0, never stored
            if (k >= nk) continue;
            const float* xb = xg + 32 * k;
            m[k] = _mm256_max_ps(_mm256_max_ps(abs8(_mm256_loadu_ps(xb)), abs8(_mm256_loadu_ps(xb + 8))),
                                 _mm256_max_ps(abs8(_mm256_loadu_ps(xb + 16)), abs8(_mm256_loadu_ps(xb + 24))));
        }
        const __m256 d = _mm256_div_ps(hmax8x8(m), _mm256_set1_ps(127.0f));
        const __m256 nonzero = _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_UQ);
        const __m256 id = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), d), nonzero);   // 1/d, or 0 where d is 0 (as d != 0.0f)
        alignas(32) float ids[ACT_GROUP], dh[ACT_GROUP];
        alignas(32) int32_t sums[ACT_GROUP] = {};   // zero past the row's last block: the vector below reads all 8
        _mm256_store_ps(ids, id);
        _mm256_store_ps(dh, _mm256_cvtph_ps(_mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT)));   // d through fp16
        for (int k = 0; k < nk; ++k) {
            const float* xb = xg + 32 * k;
            const __m256 s = _mm256_set1_ps(ids[k]);
            __m256i q[4];
            for (int u = 0; u < 4; ++u) q[u] = _mm256_cvtps_epi32(round_away8(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * u), s)));
            uint8_t* out = dst + size_t(b0 + k) * PACKED_ACT_BLOCK_BYTES;
            const __m256i qs = pack_32_i8(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), qs);
            if (WITH_SUM) {   // Q8_1's sum: of the int32 quants, as quant_act_q8_0_avx2
                const __m256i t = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
                __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
                sums[k] = _mm_cvtsi128_si32(h);
            } else {   // prepare's: of the stored int8 (an overflowed quant saturates to -128): (q + 128) summed, - 4096
                const __m256i t = _mm256_sad_epu8(_mm256_xor_si256(qs, _mm256_set1_epi8(char(0x80))), _mm256_setzero_si256());
                const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
                sums[k] = int32_t(_mm_cvtsi128_si32(h) + _mm_extract_epi32(h, 2)) - 32 * 128;
            }
            std::memcpy(out + 32, &dh[k], 4);
        }
        alignas(32) int32_t tail[ACT_GROUP];   // s (float bits) or -128 * sum, per block
        if (WITH_SUM) {   // |sum| <= 4064: exact as a float; the product rounded once, then to fp16
            const __m256 sd = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sums))), d);
            _mm256_store_ps(reinterpret_cast<float*>(tail), _mm256_cvtph_ps(_mm256_cvtps_ph(sd, _MM_FROUND_TO_NEAREST_INT)));
        } else {
            _mm256_store_si256(reinterpret_cast<__m256i*>(tail),
                               _mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(sums)), _mm256_set1_epi32(-128)));
        }
        for (int k = 0; k < nk; ++k) std::memcpy(dst + size_t(b0 + k) * PACKED_ACT_BLOCK_BYTES + 36, &tail[k], 4);
    }
}

}  // namespace

packed_act_fn simd_packed_act_quantizer_for(int32_t weight_type) {
    switch (weight_type) {
        case TYPE_Q4_1: return quant_act_packed<true>;
        case TYPE_Q8_0:
        case TYPE_IQ4_NL: return quant_act_packed<false>;
        default: return nullptr;
    }
}

packed_matmul_fn simd_packed_matmul_for(int32_t weight_type) {
    switch (weight_type) {
        case TYPE_Q4_1: return packed_matmul<PACKED_Q4_1>;
        case TYPE_Q8_0: return packed_matmul<PACKED_Q8_0>;
        case TYPE_IQ4_NL: return packed_matmul<PACKED_IQ4_NL>;
        case TYPE_Q4_K: return packed_matmul<PACKED_Q4_K>;
        case TYPE_Q5_K: return packed_matmul<PACKED_Q5_K>;
        case TYPE_Q6_K: return packed_matmul<PACKED_Q6_K>;
        default: return nullptr;   // Q3_K, Q2_K, IQ4_XS: the GGUF-layout kernels of quants-avx2.cpp
    }
}

}  // namespace strata

#endif  // STRATA_SIMD_AVX2
