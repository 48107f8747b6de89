// AVX-512 VNNI products over row-interleaved Q3_K, Q2_K and IQ4_XS weights (layout: quants-packed.h), the
// super-block types of few bits a weight whose quants are assembled from bit fields or a table. As quants-packed-avx512.cpp's K-quants, a tile
// is one group of 16 rows x nt <= 8 tokens, lane r of every vector row r's, one super-block a step of
// the outer loop, integer sums exact per super-block, then one FMA by (the 16 rows' d x the token's d).
//
// Q3_K: per 32 elements (half h, group g: elements 128h + 32g ..), sub-blocks 8h + 2g and 8h + 2g + 1;
// each quant q = ((qs >> 2g) & 3) + 4 (bit 4h + g of hmask) in [0, 7] (a shift, an and, a vptestmb and a
// masked add a vector of 4 x 16), and 4 vpdpbusd start from the token's -4 * bsum, giving sum x (q - 4) (|.| <= 16 *
// 4 * 128: an int16), which one vpdpwssd multiplies by the row's scale (int16 in the low half, zero
// above) into the super-block's int32 sum.
//
// Every (row, token) goes through the same per-lane instructions whatever nt, the row range or n_tok
// (quants.h's bitwise rule). Compiled only for AVX-512 VNNI. Not here: packing, activation preparation,
// argument checks (quants-packed.cpp), the shared tile driver (quants-packed-tiles.h).
#include "quants-kernels.h"

#if defined(STRATA_SIMD_AVX512)

#include <immintrin.h>

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

constexpr size_t LOWBIT_PREFETCH_BYTES = 12288;   // as Q4_K's distance (not measured apart)

inline __m128i shift_count(int n) { return _mm_cvtsi32_si128(n); }
// (16,) int8 at p -> int32 lanes holding the value as int16 in the low half, zero in the high half:
// vpdpwssd with a lane sum that fits int16 then adds sum * value.
inline __m512i scale_lo16(const uint8_t* p) {
    return _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), _mm512_set1_epi32(0xFFFF));
}

struct q3_K_tiles {
    static constexpr size_t BLOCK = PACKED_Q3_K_BLOCK_BYTES, ACT = PACKED_ACT_Q6_K_BLOCK_BYTES;
    static constexpr size_t STEP_LINES = 4 * 64;   // 8 steps x 4 lines cover the block's 29

    template <int NT>
    static void tile(const uint8_t* g, int64_t nb, const uint8_t* x, size_t xrb, float* y, int64_t ys, __mmask16 keep,
                     bool prefetch) {
        __m512 acc[NT];
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
        const __m512i low2 = _mm512_set1_epi8(0x03), four = _mm512_set1_epi8(0x04);
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = g + size_t(b) * BLOCK;
            const uint8_t* xb = x + size_t(b) * ACT;
            __m512i isum[NT];   // (NT, 16) int32: sum over sub-blocks of scale * sum x (q - 4), per row lane
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 1
            for (int u = 0; u < 8; ++u) {   // step u: half h = u / 4, group gr = u % 4
                const int h = u >> 2, gr = u & 3, s = 8 * h + 2 * gr, bit = 4 * h + gr;
                if (prefetch) prefetch_lines(blk, LOWBIT_PREFETCH_BYTES, size_t(u) * STEP_LINES, size_t(u + 1) * STEP_LINES, BLOCK);
                const __m512i sc0 = scale_lo16(blk + PACKED_Q3_K_SC + 16 * s);
                const __m512i sc1 = scale_lo16(blk + PACKED_Q3_K_SC + 16 * (s + 1));
                const __m128i q_shift = shift_count(2 * gr);
                const __m512i hbit = _mm512_set1_epi8(char(1 << bit));
                __m512i w[8];   // (8, 16) lane r: 4 quants of row r (w[c]: sub-block s, elements 4c..; w[4 + c]: s + 1)
#pragma GCC unroll 8
                for (int c = 0; c < 8; ++c) {
                    // the high bit through a byte mask and a masked add (ports 5 and 0/5, leaving port 0 to the
                    // shifts and products; shifting hmask into place: decode 10.4 / 10.9 GB/s, this 11.3 / 11.2)
                    const __m512i lo = _mm512_and_si512(_mm512_srl_epi16(_mm512_loadu_si512(blk + 64 * (8 * h + c)), q_shift), low2);
                    const __mmask64 hi = _mm512_test_epi8_mask(_mm512_loadu_si512(blk + PACKED_Q3_K_HMASK + 64 * c), hbit);
                    w[c] = _mm512_mask_add_epi8(lo, hi, lo, four);
                }
#pragma GCC unroll 8
                for (int t = 0; t < NT; ++t) {
                    const uint8_t* a = xb + size_t(t) * xrb;
                    const uint8_t* xl = a + 128 * h + 32 * gr;   // sub-block s's 16; + 16: s + 1's
                    __m512i dl = bcast_u32(a + QK_K + 4 * s);
                    __m512i dh = bcast_u32(a + QK_K + 4 * (s + 1));
#pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) {
                        dl = dpbusd_bcast(dl, w[c], xl + 4 * c);
                        dh = dpbusd_bcast(dh, w[4 + c], xl + 16 + 4 * c);
                    }
                    isum[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[t], dl, sc0), dh, sc1);
                }
            }
            const __m512 dw = load_f16x16(blk + PACKED_Q3_K_D);
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                const __m512 dx = bcast_f32(xb + size_t(t) * xrb + PACKED_ACT_Q6_K_D);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ys, keep, acc[t]);
    }
};

// IQ4_XS (one super-block a step of the outer loop): per sub-block of 32, the 4 x 64 quant bytes are split
// into nibbles and looked up in the table + 128 (1 .. 241, unsigned for vpdpbusd) by a vpshufb; 8 vpdpbusd
// start from the token's -128 * sum of the sub-block, giving sum x t (|.| <= 32 * 127 * 128: no int16),
// which one vpmulld by the row's int8 scale ls - 32 adds to the super-block's int32 sum (|.| <= 8 * 32 *
// 520192 < 2^31).
struct iq4_xs_tiles {
    static constexpr size_t BLOCK = PACKED_IQ4_XS_BLOCK_BYTES, ACT = PACKED_ACT_IQ4_XS_BLOCK_BYTES;
    static constexpr size_t STEP_LINES = 5 * 64;   // 8 steps x 5 lines cover the block's 35

    template <int NT>
    static void tile(const uint8_t* g, int64_t nb, const uint8_t* x, size_t xrb, float* y, int64_t ys, __mmask16 keep,
                     bool prefetch) {
        __m512 acc[NT];
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        const __m512i table = _mm512_broadcast_i32x4(
            _mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(KVALUES_IQ4NL)), _mm_set1_epi8(char(0x80))));
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = g + size_t(b) * BLOCK;
            const uint8_t* xb = x + size_t(b) * ACT;
            __m512i isum[NT];   // (NT, 16) int32: sum over sub-blocks of scale * sum x t, per row lane
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 1
            for (int s = 0; s < 8; ++s) {   // sub-block s: qs bytes 16s .. 16s + 15, elements 32s ..
                if (prefetch) prefetch_lines(blk, LOWBIT_PREFETCH_BYTES, size_t(s) * STEP_LINES, size_t(s + 1) * STEP_LINES, BLOCK);
                const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + PACKED_IQ4_XS_SC + 16 * s)));
                __m512i w[8];   // (8, 16) lane r: 4 table values + 128 of row r (w[c]: elements 4c.., w[4 + c]: 16 + 4c..)
#pragma GCC unroll 4
                for (int c = 0; c < 4; ++c) {
                    const __m512i v = _mm512_loadu_si512(blk + 64 * (4 * s + c));
                    w[c] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low4));
                    w[4 + c] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
                }
#pragma GCC unroll 8
                for (int t = 0; t < NT; ++t) {
                    const uint8_t* a = xb + size_t(t) * xrb;
                    const uint8_t* xl = a + 32 * s;
                    __m512i d = bcast_u32(a + QK_K + 4 * s);
#pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) {
                        d = dpbusd_bcast(d, w[c], xl + 4 * c);
                        d = dpbusd_bcast(d, w[4 + c], xl + 16 + 4 * c);
                    }
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(d, sc));
                }
            }
            const __m512 dw = load_f16x16(blk + PACKED_IQ4_XS_D);
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                const __m512 dx = bcast_f32(xb + size_t(t) * xrb + PACKED_ACT_IQ4_XS_D);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ys, keep, acc[t]);
    }
};

// Q2_K: steps as Q3_K's, each quant q = (qs >> 2g) & 3 in [0, 3] (a shift and an and); 4 vpdpbusd from
// zero give sum x q (|.| <= 16 * 3 * 128: an int16), one vpdpwssd by the row's 4-bit scale; per
// super-block the mins (the scale bytes' high nibbles, two sub-blocks an int32 lane) go through 8
// vpdpwssd with the token's int16 bsums, then one FMA by d and one by dmin.
struct q2_K_tiles {
    static constexpr size_t BLOCK = PACKED_Q2_K_BLOCK_BYTES, ACT = PACKED_ACT_Q2_K_BLOCK_BYTES;
    static constexpr size_t STEP_LINES = 3 * 64;   // 8 steps x 3 lines cover the block's 21

    template <int NT>
    static void tile(const uint8_t* g, int64_t nb, const uint8_t* x, size_t xrb, float* y, int64_t ys, __mmask16 keep,
                     bool prefetch) {
        __m512 acc[NT];
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
        const __m512i low2 = _mm512_set1_epi8(0x03), low4_32 = _mm512_set1_epi32(0x0F);
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* blk = g + size_t(b) * BLOCK;
            const uint8_t* xb = x + size_t(b) * ACT;
            __m512i isum[NT];   // (NT, 16) int32: sum over sub-blocks of scale * sum x q, per row lane
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) isum[t] = _mm512_setzero_si512();
#pragma GCC unroll 1
            for (int u = 0; u < 8; ++u) {   // step u: half h = u / 4, group gr = u % 4: sub-blocks 2u, 2u + 1
                const int h = u >> 2, gr = u & 3;
                if (prefetch) prefetch_lines(blk, LOWBIT_PREFETCH_BYTES, size_t(u) * STEP_LINES, size_t(u + 1) * STEP_LINES, BLOCK);
                // (16,) int32 lane r: scale bytes 2u (low int16) and 2u + 1 (high) of row r -> their low nibbles
                const __m512i pair = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + PACKED_Q2_K_SC + 32 * u)));
                const __m512i sc0 = _mm512_and_si512(pair, low4_32);
                const __m512i sc1 = _mm512_and_si512(_mm512_srli_epi32(pair, 16), low4_32);
                const __m128i q_shift = shift_count(2 * gr);
                __m512i w[8];   // (8, 16) lane r: 4 quants of row r (w[c]: sub-block 2u, elements 4c..; w[4 + c]: 2u + 1)
#pragma GCC unroll 8
                for (int c = 0; c < 8; ++c) {
                    w[c] = _mm512_and_si512(_mm512_srl_epi16(_mm512_loadu_si512(blk + 64 * (8 * h + c)), q_shift), low2);
                }
#pragma GCC unroll 8
                for (int t = 0; t < NT; ++t) {
                    const uint8_t* xl = xb + size_t(t) * xrb + 128 * h + 32 * gr;   // sub-block 2u's 16; + 16: 2u + 1's
                    __m512i dl = _mm512_setzero_si512(), dh = _mm512_setzero_si512();
#pragma GCC unroll 4
                    for (int c = 0; c < 4; ++c) {
                        dl = dpbusd_bcast(dl, w[c], xl + 4 * c);
                        dh = dpbusd_bcast(dh, w[4 + c], xl + 16 + 4 * c);
                    }
                    isum[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[t], dl, sc0), dh, sc1);
                }
            }
            __m512i mins[8];   // (8, 16) lane r: int16 mins of sub-blocks 2k, 2k + 1 of row r
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                mins[k] = _mm512_srli_epi16(
                    _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + PACKED_Q2_K_SC + 32 * k))), 4);
            }
            const __m512 dw = load_f16x16(blk + PACKED_Q2_K_D), mw = load_f16x16(blk + PACKED_Q2_K_DMIN);
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                const uint8_t* a = xb + size_t(t) * xrb;   // qs (256,), int16 bsums (16,), float d
                __m512i ms = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int k = 0; k < 8; ++k) ms = _mm512_dpwssd_epi32(ms, mins[k], bcast_u32(a + QK_K + 4 * k));
                const __m512 dx = bcast_f32(a + PACKED_ACT_Q2_K_D);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, dx), acc[t]);
                acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(mw, dx), acc[t]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * ys, keep, acc[t]);
    }
};

template <class T>
void lowbit_matmul(const uint8_t* packed, int64_t nb, const uint8_t* xp, size_t xrb, int64_t n_tok, float* y, int64_t ys,
                   int64_t r0, int64_t r1) {
    static constexpr tile_table tiles = tiles_of<T>();
    run_tiles(tiles, T::BLOCK, T::ACT, packed, nb, xp, xrb, n_tok, y, ys, r0, r1);
}

}  // namespace

packed_matmul_fn packed_lowbit_matmul_for(int32_t weight_type) {
    switch (weight_type) {
        case TYPE_Q3_K: return lowbit_matmul<q3_K_tiles>;
        case TYPE_IQ4_XS: return lowbit_matmul<iq4_xs_tiles>;
        case TYPE_Q2_K: return lowbit_matmul<q2_K_tiles>;
        default: return nullptr;
    }
}

}  // namespace strata

#endif  // STRATA_SIMD_AVX512
