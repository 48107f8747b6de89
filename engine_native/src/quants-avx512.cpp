// AVX-512 (F, BW, VL, VNNI) products for every weight type, compiled only when the compiler targets
// that set (-march=native on such a CPU; the macro test is in quants-kernels.h).
//
// One register tile computes a block of nr weight rows x nt tokens; each (row, token) pair owns one
// 16-lane float accumulator and goes through exactly the same instructions whatever nr, nt or the
// row range, so matmul equals matvec bit for bit (quants.h). Weights are unpacked once per tile
// step and reused for nt tokens; activations once and reused for nr rows.
//
// Integer products use VNNI dpbusd (u8 x s8 -> s32). Signed weights become unsigned by an offset
// (q - 8 stored as q; MXFP4's table values v stored as v + 12), removed by starting the accumulator
// at -offset * sum(x) (computed once per token). Not here: the scalar reference (quants-generic.cpp) or argument checks (quants.cpp).
#include "quants-kernels.h"

#if defined(STRATA_SIMD_AVX512)

#include <immintrin.h>

#include <algorithm>

#include "quants-blocks.h"
#include "quants-tiling.h"
#include "quants.h"

// GCC 12's intrinsic headers self-initialise their "undefined" vectors (__Y = __Y) and then warn
// about them when inlined here; the values are never used.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__GNUC__) && !defined(__clang__)   // a GCC-only warning (clang warns of the unknown name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace strata {
namespace {

// ---------------------------------------------------------------- small helpers

// Every format's accumulator: 16 float lanes, summed at the end in one fixed order.
struct zmm_acc {
    using acc_t = __m512;
    static __m512 zero() { return _mm512_setzero_ps(); }
    static float reduce(__m512 v) { return _mm512_reduce_add_ps(v); }
};

inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// ---------------------------------------------------------------- 32-element block types
// A step is four blocks (128 elements) held as two byte vectors with the same lane -> block map:
// "lo" = [elements 0-15 of blocks 0, 1, 2, 3], "hi" = [elements 16-31 of the same], so that the
// two dpbusd results add into one int32 vector whose lanes 4b..4b+3 belong to block b, and one
// convert + scale + multiply-add covers four blocks. The activations are rearranged the same way
// (once per token, reused by every row). A partial last step (1-3 blocks) reads zeros for the rest.

enum q32_kind { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_Q8_0, K_MXFP4, K_IQ4_NL };

// Byte offset of block b of a step: in a partial step (nv < 4 blocks) the missing blocks read the
// last present one again (always mapped memory, no branches) and are zeroed by masks afterwards.
template <bool FULL>
inline size_t block_at(int b, int nv, size_t stride) { return size_t(FULL ? b : std::min(b, nv - 1)) * stride; }

// The 4-byte headers of four blocks (fp16 d, then m or s or 2 unused bytes) -> f32
// [d0 m0 d1 m1 d2 m2 d3 m3] in the low 256 bits; missing blocks read as 0.
template <bool FULL>
inline __m512 header_quad(const uint8_t* p, size_t stride, int nv) {
    __m128i h = _mm_cvtsi32_si128(int(load_u32(p)));
    h = _mm_insert_epi32(h, int(load_u32(p + block_at<FULL>(1, nv, stride))), 1);
    h = _mm_insert_epi32(h, int(load_u32(p + block_at<FULL>(2, nv, stride))), 2);
    h = _mm_insert_epi32(h, int(load_u32(p + block_at<FULL>(3, nv, stride))), 3);
    if (!FULL) h = _mm_maskz_mov_epi32(__mmask8((1u << nv) - 1), h);
    return _mm512_castps256_ps512(_mm256_cvtph_ps(h));
}
// MXFP4's E8M0 exponents (int32 lanes, 0..255) -> 2^(e - 128), built as e8m0_to_fp32_half builds it.
inline __m512 e8m0_half_ps(__m512i e) {
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23);          // e >= 2
    const __m512i denormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);   // e < 2: 2^-128, 2^-127
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, one), denormal, normal));
}
// The scales of a step's four MXFP4 blocks, lanes 4b..4b+3 = d of block b (scale_quad's layout).
// A full step: its blocks' 1-byte headers are bytes 0, 17, 34, 51 of its first 64, byte b of 128-bit
// lane b, so one pshufb spreads each over its lane. A partial step reads them one by one (missing: 0).
template <bool FULL>
inline __m512 e8m0_scale_quad(const uint8_t* p, size_t stride, int nv) {
    __m512i e;
    if (FULL) {
        static_assert(3 * sizeof(block_mxfp4) < 64, "the fourth header must lie in the first 64 bytes");
        const __m512i pick = _mm512_setr_epi32(-256, -256, -256, -256, -255, -255, -255, -255,   // bytes [b, 0x80 x3]
                                               -254, -254, -254, -254, -253, -253, -253, -253);
        e = _mm512_shuffle_epi8(_mm512_loadu_si512(p), pick);
    } else {
        e = _mm512_castsi128_si512(_mm_setr_epi32(p[0], p[block_at<FULL>(1, nv, stride)], p[block_at<FULL>(2, nv, stride)],
                                                  p[block_at<FULL>(3, nv, stride)]));
        e = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), e);
    }
    __m512 d = e8m0_half_ps(e);
    if (!FULL) d = _mm512_maskz_mov_ps(__mmask16((1u << (4 * nv)) - 1), d);
    return d;
}
inline __m512 scale_quad(__m512 hdr) {   // lanes 4b..4b+3 = d of block b
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6), hdr);
}
inline __m512 second_quad(__m512 hdr) {  // lane 4b = m (or s) of block b, zero elsewhere
    return _mm512_maskz_permutexvar_ps(0x1111, _mm512_setr_epi32(1, 0, 0, 0, 3, 0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0), hdr);
}
// Four runs of 32 int8 (at p, p + stride, ...) -> lo / hi vectors as described above.
template <bool FULL>
inline void split_quad_32(const uint8_t* p, size_t stride, int nv, __m512i& lo, __m512i& hi) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + block_at<FULL>(1, nv, stride)));
    const __m256i b2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + block_at<FULL>(2, nv, stride)));
    const __m256i b3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + block_at<FULL>(3, nv, stride)));
    const __m512i x01 = _mm512_inserti64x4(_mm512_castsi256_si512(b0), b1, 1);
    const __m512i x23 = _mm512_inserti64x4(_mm512_castsi256_si512(b2), b3, 1);
    lo = _mm512_permutex2var_epi64(x01, _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), x23);
    hi = _mm512_permutex2var_epi64(x01, _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15), x23);
    if (!FULL) {   // block b owns bytes 16b .. 16b + 15 of each
        const __mmask64 k = (uint64_t(1) << (16 * nv)) - 1;
        lo = _mm512_maskz_mov_epi8(k, lo);
        hi = _mm512_maskz_mov_epi8(k, hi);
    }
}

template <int KIND>
struct q32_format : zmm_acc {
    static constexpr int NR = 4, NT = 4;
    static constexpr bool PREPARE = true;   // the lo/hi rearrangement is done once per token and call
    static constexpr bool HAS_MIN = KIND == K_Q4_1 || KIND == K_Q5_1;        // w = d q + m
    // MXFP4: table values + 12 (0 .. 24) are the unsigned quants; IQ4_NL: table values + 128 (1 .. 241)
    static constexpr int OFFSET = KIND == K_Q4_0 ? 8 : KIND == K_Q5_0 ? 16 : KIND == K_Q8_0 ? 128 : KIND == K_MXFP4 ? 12
                                : KIND == K_IQ4_NL ? 128 : 0;
    static constexpr size_t WB = KIND == K_Q4_0 ? sizeof(block_q4_0) : KIND == K_Q4_1 ? sizeof(block_q4_1)
                               : KIND == K_Q5_0 ? sizeof(block_q5_0) : KIND == K_Q5_1 ? sizeof(block_q5_1)
                               : KIND == K_MXFP4 ? sizeof(block_mxfp4) : KIND == K_IQ4_NL ? sizeof(block_iq4_nl)
                               : sizeof(block_q8_0);
    static constexpr size_t W_QS = KIND == K_Q4_0 ? 2 : KIND == K_Q4_1 ? 4 : KIND == K_Q5_0 ? 6 : KIND == K_Q5_1 ? 8
                                 : KIND == K_MXFP4 ? 1 : 2;
    static constexpr size_t W_QH = KIND == K_Q5_0 ? 2 : 4;                   // Q5 only
    static constexpr size_t XB = HAS_MIN ? sizeof(block_q8_1) : sizeof(block_q8_0);
    static constexpr size_t X_QS = HAS_MIN ? 4 : 2;
    static constexpr size_t W_STEP = 4 * WB;

    struct xs_t {
        __m512i lo, hi;  // (64,) int8 each: elements 0-15 / 16-31 of four blocks
        __m512 dx;       // lanes 4b..4b+3: block b's scale
        __m512 s;        // Q8_1 block sums d * sum(q) in lanes 4b
        __m512i corr;    // -OFFSET * (sum of each lane's 8 activations)
    };
    struct ws_t {
        __m512i lo, hi;  // (64,) unsigned quants each, same layout
        __m512 dw;       // scales, lanes as dx
        __m512 m;        // minimums in lanes 4b, zero elsewhere
    };

    static int64_t full_steps(int64_t n) { return n / 128; }
    static bool has_tail(int64_t n) { return (n / 32) % 4 != 0; }
    template <bool FULL>
    static int blocks_in(int64_t s, int64_t n) { return FULL ? 4 : int(n / 32 - 4 * s); }

    template <bool FULL>
    static void load_x(const uint8_t* row, int64_t s, xs_t& xs, int64_t n) {
        const int nv = blocks_in<FULL>(s, n);
        const uint8_t* a = row + size_t(4 * s) * XB;
        split_quad_32<FULL>(a + X_QS, XB, nv, xs.lo, xs.hi);
        const __m512 hdr = header_quad<FULL>(a, XB, nv);
        xs.dx = scale_quad(hdr);
        if (HAS_MIN) xs.s = second_quad(hdr);
        if (OFFSET) {
            const __m512i off = _mm512_set1_epi8(char(OFFSET));
            const __m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xs.lo), off, xs.hi);
            xs.corr = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
        }
    }

    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t n) {
        const int nv = blocks_in<FULL>(s, n);
        const uint8_t* a = row + size_t(4 * s) * WB;
        if (KIND == K_Q8_0) {
            split_quad_32<FULL>(a + W_QS, WB, nv, ws.lo, ws.hi);
            ws.lo = _mm512_xor_si512(ws.lo, _mm512_set1_epi8(char(0x80)));   // w + 128, unsigned
            ws.hi = _mm512_xor_si512(ws.hi, _mm512_set1_epi8(char(0x80)));
        } else {
            // byte j of a block's qs holds elements j (low nibble) and j + 16 (high nibble)
            const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + W_QS));
            const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + block_at<FULL>(1, nv, WB) + W_QS));
            const __m128i q2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + block_at<FULL>(2, nv, WB) + W_QS));
            const __m128i q3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + block_at<FULL>(3, nv, WB) + W_QS));
            __m512i v = _mm512_inserti32x4(_mm512_castsi128_si512(q0), q1, 1);
            v = _mm512_inserti32x4(_mm512_inserti32x4(v, q2, 2), q3, 3);
            const __m512i low4 = _mm512_set1_epi8(0x0F);
            ws.lo = _mm512_and_si512(v, low4);
            ws.hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            if (KIND == K_Q5_0 || KIND == K_Q5_1) {   // fifth bits: bit j of qh is element j
                uint64_t lo_bits = 0, hi_bits = 0;
                for (int b = 0; b < 4; ++b) {
                    const uint32_t qh = load_u32(a + block_at<FULL>(b, nv, WB) + W_QH);
                    lo_bits |= uint64_t(qh & 0xFFFF) << (16 * b);
                    hi_bits |= uint64_t(qh >> 16) << (16 * b);
                }
                const __m512i bit4 = _mm512_set1_epi8(16);
                ws.lo = _mm512_mask_add_epi8(ws.lo, __mmask64(lo_bits), ws.lo, bit4);
                ws.hi = _mm512_mask_add_epi8(ws.hi, __mmask64(hi_bits), ws.hi, bit4);
            }
            if (KIND == K_MXFP4 || KIND == K_IQ4_NL) {   // nibble -> table[nibble] + OFFSET, one lookup per vector
                const __m128i values = _mm_loadu_si128(reinterpret_cast<const __m128i*>(KIND == K_MXFP4 ? KVALUES_MXFP4
                                                                                                         : KVALUES_IQ4NL));
                const __m512i table = _mm512_broadcast_i32x4(_mm_add_epi8(values, _mm_set1_epi8(char(OFFSET))));
                ws.lo = _mm512_shuffle_epi8(table, ws.lo);
                ws.hi = _mm512_shuffle_epi8(table, ws.hi);
            }
            if (!FULL) {   // block b owns bytes 16b .. 16b + 15 of each
                const __mmask64 k = (uint64_t(1) << (16 * nv)) - 1;
                ws.lo = _mm512_maskz_mov_epi8(k, ws.lo);
                ws.hi = _mm512_maskz_mov_epi8(k, ws.hi);
            }
        }
        if (KIND == K_MXFP4) {
            ws.dw = e8m0_scale_quad<FULL>(a, WB, nv);
            return;
        }
        const __m512 hdr = header_quad<FULL>(a, WB, nv);
        ws.dw = scale_quad(hdr);
        if (HAS_MIN) ws.m = second_quad(hdr);
    }

    static void madd(const ws_t& ws, const xs_t& xs, __m512& acc) {
        const __m512i start = OFFSET ? xs.corr : _mm512_setzero_si512();
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, ws.lo, xs.lo), ws.hi, xs.hi);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws.dw, xs.dx), acc);
        if (HAS_MIN) acc = _mm512_fmadd_ps(ws.m, xs.s, acc);
    }
};

// ---------------------------------------------------------------- K-quants (super-blocks of 256)
// A step is one super-block. Sub-block scales multiply the int32 lane sums (exact), then one float
// multiply-add per super-block; the Q4_K/Q5_K mins go through Q8_K's 16-element sums.

// int16 index vector for permutexvar_epi16 over 8 sub-block scales: in 128-bit lane i, four copies
// of scale a0 (i < 2) or a1 (i >= 2), then four of b0 or b1: packs_epi32 of groups holding
// sub-blocks (a0, a1) and (b0, b1) in their lanes 0-7 / 8-15.
inline __m512i pack_index(short a0, short b0, short a1, short b1) {
    alignas(64) const short idx[32] = {a0, a0, a0, a0, b0, b0, b0, b0, a0, a0, a0, a0, b0, b0, b0, b0,
                                       a1, a1, a1, a1, b1, b1, b1, b1, a1, a1, a1, a1, b1, b1, b1, b1};
    return _mm512_load_si512(idx);
}

struct q8K_x {
    const int8_t* q;     // (256,) activations of the super-block
    __m256i bsums;       // (16,) int16 sums of 16
    float d;
};

inline void load_q8K(const uint8_t* row, int64_t s, q8K_x& xs) {
    const block_q8_K* b = reinterpret_cast<const block_q8_K*>(row) + s;
    xs.q = b->qs;
    xs.bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->bsums));
    xs.d = b->d;
}

// What every super-block format (one step: 256 elements, Q8_K activations) shares: the tiling's step count,
// no partial step, and the activations of a step.
struct super_block_steps {
    using xs_t = q8K_x;
    static int64_t full_steps(int64_t n) { return n / QK_K; }
    static bool has_tail(int64_t) { return false; }
    template <bool FULL>
    static void load_x(const uint8_t* row, int64_t s, xs_t& xs, int64_t) { load_q8K(row, s, xs); }
};

template <bool Q5>
struct q45K_format : zmm_acc, super_block_steps {
    static constexpr int NR = 4, NT = 4;
    struct ws_t {
        __m512i u[4];     // (4, 64) unsigned quants of the 4 groups of 64
        __m512i sc[2];    // (2, 32) int16 scales laid out as packs_epi32 of groups (0, 1) / (2, 3) leaves their sums
        __m256i mins;     // (16,) int16: min of sub-block j at 2j and 2j + 1 (pairs of bsums)
        float d, dmin;
    };
    using block = typename std::conditional<Q5, block_q5_K, block_q4_K>::type;
    static constexpr size_t W_STEP = sizeof(block);


    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t) {
        const block* b = reinterpret_cast<const block*>(row) + s;
        // The 12 packed bytes as three words: 6-bit scales / mins of sub-blocks 0-3 in the low 6
        // bits of words 0 / 1; those of 4-7 in word 2's nibbles plus the top 2 bits of words 0 / 1.
        const uint32_t u0 = load_u32(b->scales), u1 = load_u32(b->scales + 4), u2 = load_u32(b->scales + 8);
        const uint64_t sc8 = uint64_t(u0 & 0x3f3f3f3fu) | uint64_t((u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4)) << 32;
        const uint64_t m8 = uint64_t(u1 & 0x3f3f3f3fu) | uint64_t(((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4)) << 32;
        const __m512i scv = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(sc8))));
        const __m128i m = _mm_cvtsi64_si128(int64_t(m8));
        ws.mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m, m));
        __m512i qh2 = _mm512_setzero_si512();
        if (Q5) {
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const block_q5_K*>(b)->qh));
            qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
        }
        // packs_epi32(D_a, D_b) puts, in 128-bit lane i, D_a's lanes 4i..4i+3 then D_b's; lanes 0-7
        // of group g's D hold sub-block 2g, lanes 8-15 sub-block 2g + 1.
        ws.sc[0] = _mm512_permutexvar_epi16(pack_index(0, 2, 1, 3), scv);
        ws.sc[1] = _mm512_permutexvar_epi16(pack_index(4, 6, 5, 7), scv);
        for (int g = 0; g < 4; ++g) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * g));
            const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
            ws.u[g] = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)), _mm512_set1_epi8(0x0F));
            if (Q5) {   // bit 2g of qh[l] for the low half, bit 2g + 1 for the high half
                const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8(char(1 << (2 * g))), _mm256_set1_epi8(char(1 << (2 * g + 1))), 1);
                ws.u[g] = _mm512_mask_add_epi8(ws.u[g], _mm512_test_epi8_mask(qh2, sel), ws.u[g], _mm512_set1_epi8(16));
            }
        }
        ws.d = half_to_float(b->d);
        ws.dmin = half_to_float(b->dmin);
    }

    static void madd(const ws_t& ws, const xs_t& xs, __m512& acc) {
        __m512i d[4];     // (4, 16) int32: 4-element sums, |.| <= 4 * 31 * 127, so they pack to int16
        for (int g = 0; g < 4; ++g) d[g] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ws.u[g], _mm512_loadu_si512(xs.q + 64 * g));
        const __m512i isum = _mm512_add_epi32(_mm512_madd_epi16(_mm512_packs_epi32(d[0], d[1]), ws.sc[0]),
                                              _mm512_madd_epi16(_mm512_packs_epi32(d[2], d[3]), ws.sc[1]));
        const __m256i msum = _mm256_madd_epi16(ws.mins, xs.bsums);       // (8,) int32
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(ws.d * xs.d), acc);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(msum)), _mm512_set1_ps(-(ws.dmin * xs.d)), acc);
    }
};

// Q6_K, Q3_K and Q2_K: 16 sub-blocks of 16 with small integer scales; quants q in [0, 63] (Q6_K, offset 32),
// [0, 7] (Q3_K, offset 4) or [0, 3] (Q2_K, no offset but a min per sub-block), unpacked into element order,
// so vector v's lanes 4k..4k+3 hold sub-block 4v + k.
template <int KIND>
struct k16_format : zmm_acc, super_block_steps {
    static constexpr int NR = 4, NT = 4;
    static constexpr size_t W_STEP = k16_block_bytes(KIND);
    static constexpr int OFFSET_SHIFT = k16_offset_shift(KIND);   // the quants' offset, 4 or 32, as a shift (not Q2_K)
    struct ws_t {
        __m512i u[4];     // (4, 64) quants of elements 64v .. 64v + 63
        __m512i sc[2];    // (2, 32) int16 scales laid out as packs_epi32 of vectors (0, 1) / (2, 3) leaves their sums
        __m256i sc16;     // (16,) int16 scales, for the offset through bsums (Q2_K: the mins)
        float d, dmin;
    };


    static void unpack_q6(const block_q6_K* b, ws_t& ws) {
        const __m512i low4 = _mm512_set1_epi8(0x0F), low2 = _mm512_set1_epi8(0x03);
        for (int h = 0; h < 2; ++h) {
            const __m512i l = _mm512_loadu_si512(b->ql + 64 * h);
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h));
            const __m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            const __m512i h23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(qh, 4)), _mm256_srli_epi16(qh, 6), 1);
            ws.u[2 * h] = _mm512_or_si512(_mm512_and_si512(l, low4), _mm512_slli_epi16(_mm512_and_si512(h01, low2), 4));
            ws.u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                                              _mm512_slli_epi16(_mm512_and_si512(h23, low2), 4));
        }
        ws.sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)));
        ws.d = half_to_float(b->d);
    }

    // Q3_K: vector v = 2h + p holds groups 2p, 2p + 1 of half h: bytes (qs[32h ..] >> 2g) & 3, plus 4 where
    // bit 4h + g of hmask[k] is set.
    static void unpack_q3(const block_q3_K* b, ws_t& ws) {
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->hmask)));
        const __m512i low2 = _mm512_set1_epi8(0x03), four = _mm512_set1_epi8(4);
        for (int h = 0; h < 2; ++h) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * h)));
            for (int p = 0; p < 2; ++p) {
                const int g = 2 * p;
                const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi64(2 * g), _mm256_set1_epi64x(2 * g + 2), 1);
                const __m512i u = _mm512_and_si512(_mm512_srlv_epi64(q, shift), low2);
                const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(char(1 << (4 * h + g))),
                                                       _mm256_set1_epi8(char(1 << (4 * h + g + 1))), 1);
                ws.u[2 * h + p] = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(hm, bit), u, four);
            }
        }
        ws.sc16 = _mm256_cvtepi8_epi16(q3_K_scales_x16(b->scales));
        ws.d = half_to_float(b->d);
    }

    // Q2_K: as Q3_K without the high bit; scales[j] & 15 multiplies, scales[j] >> 4 is the min.
    static void unpack_q2(const block_q2_K* b, ws_t& ws, __m256i& scales) {
        const __m512i low2 = _mm512_set1_epi8(0x03);
        for (int h = 0; h < 2; ++h) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * h)));
            for (int p = 0; p < 2; ++p) {
                const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi64(4 * p), _mm256_set1_epi64x(4 * p + 2), 1);
                ws.u[2 * h + p] = _mm512_and_si512(_mm512_srlv_epi64(q, shift), low2);
            }
        }
        const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales));
        scales = _mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(0x0F)));
        ws.sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F)));
        ws.d = half_to_float(b->d);
        ws.dmin = half_to_float(b->dmin);
    }

    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t) {
        __m256i scales;   // (16,) int16 sub-block scales
        if (KIND == K16_Q3) {
            unpack_q3(reinterpret_cast<const block_q3_K*>(row) + s, ws);
            scales = ws.sc16;
        } else if (KIND == K16_Q2) {
            unpack_q2(reinterpret_cast<const block_q2_K*>(row) + s, ws, scales);
        } else {
            unpack_q6(reinterpret_cast<const block_q6_K*>(row) + s, ws);
            scales = ws.sc16;
        }
        // vector v's lanes 4k..4k+3 hold group 4v + k; packs_epi32(D_a, D_b) puts, in 128-bit lane
        // i, D_a's lanes 4i..4i+3 (group 4a + i) then D_b's (group 4b + i).
        const __m512i scv = _mm512_castsi256_si512(scales);
        alignas(64) static const short idx01[32] = {0, 0, 0, 0, 4, 4, 4, 4, 1, 1, 1, 1, 5, 5, 5, 5,
                                                    2, 2, 2, 2, 6, 6, 6, 6, 3, 3, 3, 3, 7, 7, 7, 7};
        alignas(64) static const short idx23[32] = {8, 8, 8, 8, 12, 12, 12, 12, 9, 9, 9, 9, 13, 13, 13, 13,
                                                    10, 10, 10, 10, 14, 14, 14, 14, 11, 11, 11, 11, 15, 15, 15, 15};
        ws.sc[0] = _mm512_permutexvar_epi16(_mm512_load_si512(idx01), scv);
        ws.sc[1] = _mm512_permutexvar_epi16(_mm512_load_si512(idx23), scv);
    }

    static void madd(const ws_t& ws, const xs_t& xs, __m512& acc) {
        __m512i d[4];     // (4, 16) int32: 4-element sums, |.| <= 4 * 63 * 127 < 2^15, so they pack to int16
        for (int v = 0; v < 4; ++v) d[v] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ws.u[v], _mm512_loadu_si512(xs.q + 64 * v));
        __m512i isum = _mm512_add_epi32(_mm512_madd_epi16(_mm512_packs_epi32(d[0], d[1]), ws.sc[0]),
                                        _mm512_madd_epi16(_mm512_packs_epi32(d[2], d[3]), ws.sc[1]));
        const __m256i msum = _mm256_madd_epi16(ws.sc16, xs.bsums);   // (8,) int32: sum sc * bsum (Q2_K: m * bsum)
        if (KIND == K16_Q2) {
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(ws.d * xs.d), acc);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_zextsi256_si512(msum)), _mm512_set1_ps(-(ws.dmin * xs.d)), acc);
            return;
        }
        isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(msum, OFFSET_SHIFT)));   // offset * ...
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(ws.d * xs.d), acc);
    }
};

// IQ4_XS: a step is one super-block. Sub-blocks 2v and 2v + 1 are vector v: the 32 bytes of their nibbles
// spread as [low of bytes 0-15, high of 0-15, low of 16-31, high of 16-31] are elements 64v .. 64v + 63 in
// order, looked up as the signed table values t. dpbusd takes the activations + 128 (unsigned) against t,
// from -128 * (each lane's sum of t) (once per row), which leaves each lane's exact sum of t * x; lanes
// 0-7 belong to sub-block 2v and 8-15 to 2v + 1, converted and scaled by d * (ls - 32) in float, then
// one multiply-add by the activations' scale per super-block.
struct iq4xs_format : zmm_acc, super_block_steps {
    static constexpr int NR = 4, NT = 4;
    static constexpr size_t W_STEP = sizeof(block_iq4_xs);
    struct ws_t {
        __m512i t[4];      // (4, 64) int8 table values of elements 64v .. 64v + 63
        __m512i corr[4];   // (4, 16) int32: -128 * the sum of each lane's four t
        __m512 sc[4];      // d * (ls - 32) of sub-block 2v in lanes 0-7, of 2v + 1 in 8-15
    };


    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t) {
        const block_iq4_xs* b = reinterpret_cast<const block_iq4_xs*>(row) + s;
        const float d = half_to_float(b->d);
        const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(KVALUES_IQ4NL)));
        const __m512i low4 = _mm512_set1_epi8(0x0F), off = _mm512_set1_epi8(char(0x80));
        const __m512i spread = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
        const __m512i shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
        for (int v = 0; v < 4; ++v) {
            const __m512i q = _mm512_permutexvar_epi64(spread, _mm512_castsi256_si512(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * v))));
            ws.t[v] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi64(q, shift), low4));
            ws.corr[v] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, ws.t[v]));
            ws.sc[v] = _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(d * float(iq4_xs_scale(*b, 2 * v))),
                                            _mm512_set1_ps(d * float(iq4_xs_scale(*b, 2 * v + 1))));
        }
    }

    static void madd(const ws_t& ws, const xs_t& xs, __m512& acc) {
        const __m512i off = _mm512_set1_epi8(char(0x80));
        __m512 f = _mm512_setzero_ps();
        for (int v = 0; v < 4; ++v) {
            const __m512i x = _mm512_xor_si512(_mm512_loadu_si512(xs.q + 64 * v), off);   // x + 128, unsigned
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(ws.corr[v], x, ws.t[v])), ws.sc[v], f);
        }
        acc = _mm512_fmadd_ps(f, _mm512_set1_ps(xs.d), acc);
    }
};

// ---------------------------------------------------------------- float weights, f32 activations
// A step is 16 elements; the last one is masked.

enum float_kind { K_F32, K_F16, K_BF16 };

template <int KIND>
struct float_format : zmm_acc {
    static constexpr int NR = 4, NT = 4;
    static constexpr size_t ES = KIND == K_F32 ? 4 : 2;
    static constexpr size_t W_STEP = 16 * ES;
    struct xs_t { __m512 x; };
    struct ws_t { __m512 w; };

    static int64_t full_steps(int64_t n) { return n / 16; }
    static bool has_tail(int64_t n) { return n % 16 != 0; }
    // FULL: 16 elements from step s; else the n % 16 left at the end.
    static __mmask16 mask(int64_t n) { return __mmask16((1u << (n % 16)) - 1); }
    template <bool FULL>
    static void load_x(const uint8_t* row, int64_t s, xs_t& xs, int64_t n) {
        const float* p = reinterpret_cast<const float*>(row) + 16 * s;
        xs.x = FULL ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask(n), p);
    }
    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t n) {
        if (KIND == K_F32) {
            const float* p = reinterpret_cast<const float*>(row) + 16 * s;
            ws.w = FULL ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask(n), p);
        } else {
            const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + 16 * s;
            const __m256i h = FULL ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskz_loadu_epi16(mask(n), p);
            ws.w = KIND == K_F16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
    }
    static void madd(const ws_t& ws, const xs_t& xs, __m512& acc) { acc = _mm512_fmadd_ps(ws.w, xs.x, acc); }
};

// ---------------------------------------------------------------- activation quantizers
// Byte-identical to quants-generic.cpp's: the same IEEE operations per element (max of |x|,
// d = amax / 127, id = 1 / d, x * id, then the same rounding), only sixteen at a time.

// roundf of each lane (half away from zero), as round_half_away in quants-generic.cpp.
inline __m512 round_away(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));   // copysign(1, v)
    return _mm512_mask_add_ps(t, up, t, one);
}

template <bool WITH_SUM>
void quant_act_q8_0_avx512(const float* x, void* dst, int64_t n) {
    uint8_t* out = static_cast<uint8_t*>(dst);
    const size_t bb = WITH_SUM ? sizeof(block_q8_1) : sizeof(block_q8_0);
    for (int64_t i = 0; i < n / 32; ++i, x += 32) {
        const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m512i qa = _mm512_cvtps_epi32(round_away(_mm512_mul_ps(a, _mm512_set1_ps(id))));
        const __m512i qb = _mm512_cvtps_epi32(round_away(_mm512_mul_ps(b, _mm512_set1_ps(id))));
        uint8_t* blk = out + size_t(i) * bb;
        const uint16_t dh = float_to_half(d);
        std::memcpy(blk, &dh, 2);
        if (WITH_SUM) {
            const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
            const uint16_t sh = float_to_half(float(sum) * d);
            std::memcpy(blk + 2, &sh, 2);
        }
        uint8_t* qs = blk + (WITH_SUM ? 4 : 2);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtepi32_epi8(qb));
    }
}

void quant_act_q8_K_avx512(const float* x, void* dst, int64_t n) {
    block_q8_K* y = static_cast<block_q8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        __m512 m = _mm512_setzero_ps();
        for (int k = 0; k < 16; ++k) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)));
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.0f) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        float max = 0.0f;   // the first element of largest magnitude, with its sign
        for (int k = 0; k < 16; ++k) {
            const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (hit) {
                max = x[16 * k + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        for (int k = 0; k < 16; ++k) {
            const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * k), _mm512_set1_ps(iscale)),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(127));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * k), _mm512_cvtepi32_epi8(q));
            y[i].bsums[k] = int16_t(_mm512_reduce_add_epi32(q));
        }
        y[i].d = 1.0f / iscale;
    }
}

}  // namespace

quant_act_fn simd_act_quantizer_for(int32_t act_type) {
    switch (act_type) {
        case TYPE_Q8_0: return quant_act_q8_0_avx512<false>;
        case TYPE_Q8_1: return quant_act_q8_0_avx512<true>;
        case TYPE_Q8_K: return quant_act_q8_K_avx512;
        default: return nullptr;
    }
}

matmul_fn simd_matmul_for(int32_t weight_type) {
    switch (weight_type) {
        case TYPE_F32: return tiling::matmul_tiled<float_format<K_F32>>;
        case TYPE_F16: return tiling::matmul_tiled<float_format<K_F16>>;
        case TYPE_BF16: return tiling::matmul_tiled<float_format<K_BF16>>;
        case TYPE_Q4_0: return tiling::matmul_tiled<q32_format<K_Q4_0>>;
        case TYPE_Q4_1: return tiling::matmul_tiled<q32_format<K_Q4_1>>;
        case TYPE_Q5_0: return tiling::matmul_tiled<q32_format<K_Q5_0>>;
        case TYPE_Q5_1: return tiling::matmul_tiled<q32_format<K_Q5_1>>;
        case TYPE_Q8_0: return tiling::matmul_tiled<q32_format<K_Q8_0>>;
        case TYPE_Q4_K: return tiling::matmul_tiled<q45K_format<false>>;
        case TYPE_Q5_K: return tiling::matmul_tiled<q45K_format<true>>;
        case TYPE_Q2_K: return tiling::matmul_tiled<k16_format<K16_Q2>>;
        case TYPE_Q3_K: return tiling::matmul_tiled<k16_format<K16_Q3>>;
        case TYPE_Q6_K: return tiling::matmul_tiled<k16_format<K16_Q6>>;
        case TYPE_MXFP4: return tiling::matmul_tiled<q32_format<K_MXFP4>>;
        case TYPE_IQ4_NL: return tiling::matmul_tiled<q32_format<K_IQ4_NL>>;
        case TYPE_IQ4_XS: return tiling::matmul_tiled<iq4xs_format>;
        default: return nullptr;
    }
}

const char* simd_build_name() { return "avx512-vnni"; }

int64_t simd_int8_probe(int64_t n_iter, int32_t* sink) {
    constexpr int CHAINS = 12;   // enough independent dpbusd chains to cover their latency
    __m512i acc[CHAINS];
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_set1_epi32(c);
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (int64_t i = 0; i < n_iter; ++i) {
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
        __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]), "+v"(acc[4]), "+v"(acc[5]));
    }
    __m512i t = acc[0];
    for (int c = 1; c < CHAINS; ++c) t = _mm512_add_epi32(t, acc[c]);
    *sink = _mm512_reduce_add_epi32(t);
    return n_iter * CHAINS * 64;
}

}  // namespace strata

#endif  // STRATA_SIMD_AVX512
