// AVX2 + FMA + F16C products for every weight type, compiled only when the compiler targets AVX2
// but not the AVX-512 set of quants-avx512.cpp (the macro test is in quants-kernels.h).
//
// Same register tiles as the AVX-512 file (quants-tiling.h), 8 float lanes per (row, token) pair.
// Integer products: maddubs (u8 x s8 pairs -> s16, never saturating for these value ranges) then
// madd with ones or with the sub-block scales (-> s32). Q8_0 weights use the sign trick (|w| times
// x with w's sign); 4/5-bit weights (MXFP4: its table values + 12) are unsigned with their offset
// removed through the activation sums. Not here: the scalar reference (quants-generic.cpp) or
// argument checks (quants.cpp).
#include "quants-kernels.h"

#if defined(STRATA_SIMD_AVX2)

#include <immintrin.h>

#include <cmath>

#include "act-quant-avx2.h"
#include "quants-blocks.h"
#include "quants-tiling.h"
#include "quants.h"

namespace strata {
namespace {

// ---------------------------------------------------------------- small helpers

struct ymm_acc {
    using acc_t = __m256;
    static __m256 zero() { return _mm256_setzero_ps(); }
    static float reduce(__m256 v) {   // one fixed order: halves, then pairs, then the last two
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
};

inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// (32,) u8 x (32,) s8 -> (8,) s32, each lane the sum of 4 products.
inline __m256i dot_u8s8(__m256i u, __m256i x) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)); }

// (32,) bytes, bit j of `bits` set -> byte j = 0xFF.
inline __m256i spread_bits(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), shuf);
    const __m256i sel = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
}

inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// ---------------------------------------------------------------- 32-element block types
// A step is two blocks held as two byte vectors with one lane -> block map: "lo" = [elements 0-15
// of blocks A, B], "hi" = [elements 16-31 of A, B]; their products add into one int32 vector
// whose lanes 0-3 belong to A and 4-7 to B, so one convert + scale + FMA covers two blocks. The
// activations are rearranged once per token and call (PREPARE). An odd last block is a partial
// step whose B half is zero.

enum q32_kind { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_Q8_0, K_MXFP4, K_IQ4_NL };

// (32,) u8 x (32,) s8 twice -> (8,) s32 (u <= 31 so the int16 pair sums of lo + hi cannot overflow).
inline __m256i dot_lo_hi(__m256i ulo, __m256i xlo, __m256i uhi, __m256i xhi) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ulo, xlo), uhi, xhi);
#else
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(ulo, xlo), _mm256_maddubs_epi16(uhi, xhi));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

// Headers (fp16 d, then m or s or 2 unused bytes) of blocks A, B -> f32 [dA mA dB mB].
template <bool FULL>
inline __m128 header_pair(const uint8_t* a, size_t stride) {
    const __m128i h = _mm_setr_epi32(int(load_u32(a)), FULL ? int(load_u32(a + stride)) : 0, 0, 0);
    return _mm_cvtph_ps(h);
}
// 2^(e - 128) for every E8M0 byte e, the values e8m0_to_fp32_half builds (0 and 1: denormals), made
// at compile time by exact doublings and halvings of 1.
struct e8m0_half_table {
    float v[256];
    constexpr e8m0_half_table() : v() {
        float up = 1.0f, down = 0.5f;
        for (int i = 0; i < 128; ++i) {
            v[128 + i] = up;
            v[127 - i] = down;
            if (i < 127) up *= 2.0f, down *= 0.5f;
        }
    }
};
constexpr e8m0_half_table E8M0_HALF{};

// The scales of a step's MXFP4 blocks A, B: lanes 0-3 = dA, 4-7 = dB (scale_pair's layout); a partial
// step has A only.
template <bool FULL>
inline __m256 e8m0_scale_pair(const uint8_t* a, size_t stride) {
    const __m128 da = _mm_set1_ps(E8M0_HALF.v[a[0]]);
    const __m128 db = FULL ? _mm_set1_ps(E8M0_HALF.v[a[stride]]) : _mm_setzero_ps();
    return _mm256_insertf128_ps(_mm256_castps128_ps256(da), db, 1);
}
inline __m256 scale_pair(__m128 hdr) {   // lanes 0-3 = dA, 4-7 = dB
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(hdr), _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
}
inline __m256 second_pair(__m128 hdr) {  // lane 0 = mA (or sA), lane 4 = mB, zero elsewhere
    const __m256 v = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(hdr), _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3));
    return _mm256_blend_ps(_mm256_setzero_ps(), v, 0x11);
}
// Two runs of 32 int8 (blocks A at p, B at p + stride) -> lo / hi.
template <bool FULL>
inline void split_pair_32(const uint8_t* p, size_t stride, __m256i& lo, __m256i& hi) {
    const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
    const __m128i b0 = FULL ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + stride)) : _mm_setzero_si128();
    const __m128i b1 = FULL ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + stride + 16)) : _mm_setzero_si128();
    lo = _mm256_inserti128_si256(_mm256_castsi128_si256(a0), b0, 1);
    hi = _mm256_inserti128_si256(_mm256_castsi128_si256(a1), b1, 1);
}

template <int KIND>
struct q32_format : ymm_acc {
    static constexpr int NR = 2, NT = 4;
    static constexpr bool PREPARE = true;
    static constexpr bool HAS_MIN = KIND == K_Q4_1 || KIND == K_Q5_1;
    // Q8_0 and IQ4_NL (its table values, signed): sign trick instead; MXFP4: table values + 12 (0 .. 24) are
    // the unsigned quants
    static constexpr bool SIGNED = KIND == K_Q8_0 || KIND == K_IQ4_NL;
    static constexpr int OFFSET = KIND == K_Q4_0 ? 8 : KIND == K_Q5_0 ? 16 : KIND == K_MXFP4 ? 12 : 0;
    static constexpr size_t WB = KIND == K_Q4_0 ? sizeof(block_q4_0) : KIND == K_Q4_1 ? sizeof(block_q4_1)
                               : KIND == K_Q5_0 ? sizeof(block_q5_0) : KIND == K_Q5_1 ? sizeof(block_q5_1)
                               : KIND == K_MXFP4 ? sizeof(block_mxfp4) : KIND == K_IQ4_NL ? sizeof(block_iq4_nl)
                               : sizeof(block_q8_0);
    static constexpr size_t W_QS = KIND == K_Q4_0 ? 2 : KIND == K_Q4_1 ? 4 : KIND == K_Q5_0 ? 6 : KIND == K_Q5_1 ? 8
                                 : KIND == K_MXFP4 ? 1 : 2;
    static constexpr size_t W_QH = KIND == K_Q5_0 ? 2 : 4;
    static constexpr size_t XB = HAS_MIN ? sizeof(block_q8_1) : sizeof(block_q8_0);
    static constexpr size_t X_QS = HAS_MIN ? 4 : 2;
    static constexpr size_t W_STEP = 2 * WB;

    struct xs_t {
        __m256i lo, hi;  // (32,) int8 each: elements 0-15 / 16-31 of blocks A, B
        __m256 dx;       // lanes 0-3: A's scale, 4-7: B's
        __m256 s;        // Q8_1 block sums in lanes 0 and 4
        __m256i corr;    // -OFFSET * (sum of each lane's 8 activations)
    };
    struct ws_t {
        __m256i lo, hi;  // unsigned quants (Q8_0: signed), same layout
        __m256 dw;       // scales, lanes as dx
        __m256 m;        // minimums in lanes 0 and 4, zero elsewhere
    };

    static int64_t full_steps(int64_t n) { return n / 64; }
    static bool has_tail(int64_t n) { return (n / 32) % 2 == 1; }

    template <bool FULL>
    static void load_x(const uint8_t* row, int64_t s, xs_t& xs, int64_t) {
        const uint8_t* a = row + size_t(2 * s) * XB;
        split_pair_32<FULL>(a + X_QS, XB, xs.lo, xs.hi);
        const __m128 hdr = header_pair<FULL>(a, XB);
        xs.dx = scale_pair(hdr);
        if (HAS_MIN) xs.s = second_pair(hdr);
        if (OFFSET) {
            const __m256i off = _mm256_set1_epi8(char(OFFSET));
            xs.corr = _mm256_sub_epi32(_mm256_setzero_si256(), dot_lo_hi(off, xs.lo, off, xs.hi));
        }
    }

    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t) {
        const uint8_t* a = row + size_t(2 * s) * WB;
        if (KIND == K_Q8_0) {
            split_pair_32<FULL>(a + W_QS, WB, ws.lo, ws.hi);
        } else {
            const __m128i qa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + W_QS));
            const __m128i qb = FULL ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + WB + W_QS)) : _mm_setzero_si128();
            const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(qa), qb, 1);
            const __m256i low4 = _mm256_set1_epi8(0x0F);
            ws.lo = _mm256_and_si256(v, low4);
            ws.hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if (KIND == K_Q5_0 || KIND == K_Q5_1) {   // bit j of qh is element j
                const uint32_t ha = load_u32(a + W_QH), hb = FULL ? load_u32(a + WB + W_QH) : 0;
                const __m256i bit4 = _mm256_set1_epi8(16);
                ws.lo = _mm256_or_si256(ws.lo, _mm256_and_si256(spread_bits((ha & 0xFFFF) | (hb << 16)), bit4));
                ws.hi = _mm256_or_si256(ws.hi, _mm256_and_si256(spread_bits((ha >> 16) | (hb & 0xFFFF0000u)), bit4));
            }
            if (KIND == K_MXFP4) {   // nibble -> KVALUES_MXFP4[nibble] + OFFSET (a missing B block's zeros meet zero activations)
                const __m128i values = _mm_loadu_si128(reinterpret_cast<const __m128i*>(KVALUES_MXFP4));
                const __m256i table = _mm256_broadcastsi128_si256(_mm_add_epi8(values, _mm_set1_epi8(char(OFFSET))));
                ws.lo = _mm256_shuffle_epi8(table, ws.lo);
                ws.hi = _mm256_shuffle_epi8(table, ws.hi);
            }
            if (KIND == K_IQ4_NL) {   // nibble -> KVALUES_IQ4NL[nibble], signed (a missing B block's zeros meet zero activations)
                const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(KVALUES_IQ4NL)));
                ws.lo = _mm256_shuffle_epi8(table, ws.lo);
                ws.hi = _mm256_shuffle_epi8(table, ws.hi);
            }
        }
        if (KIND == K_MXFP4) {
            ws.dw = e8m0_scale_pair<FULL>(a, WB);
            return;
        }
        const __m128 hdr = header_pair<FULL>(a, WB);
        ws.dw = scale_pair(hdr);
        if (HAS_MIN) ws.m = second_pair(hdr);
    }

    static void madd(const ws_t& ws, const xs_t& xs, __m256& acc) {
        __m256i dot;
        if (SIGNED) {   // |w| * (x with w's sign), lo and hi summed in int32 (int16 could overflow)
            dot = _mm256_add_epi32(dot_u8s8(_mm256_sign_epi8(ws.lo, ws.lo), _mm256_sign_epi8(xs.lo, ws.lo)),
                                   dot_u8s8(_mm256_sign_epi8(ws.hi, ws.hi), _mm256_sign_epi8(xs.hi, ws.hi)));
        } else {
            dot = dot_lo_hi(ws.lo, xs.lo, ws.hi, xs.hi);
            if (OFFSET) dot = _mm256_add_epi32(dot, xs.corr);
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(ws.dw, xs.dx), acc);
        if (HAS_MIN) acc = _mm256_fmadd_ps(ws.m, xs.s, acc);
    }
};

// ---------------------------------------------------------------- K-quants (super-blocks of 256)

struct q8K_x {
    const int8_t* q;     // (256,)
    __m256i bsums;       // (16,) int16
    float d;
};

inline void load_q8K(const uint8_t* row, int64_t s, q8K_x& xs) {
    const block_q8_K* b = reinterpret_cast<const block_q8_K*>(row) + s;
    xs.q = b->qs;
    xs.bsums = load256(b->bsums);
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
struct q45K_format : ymm_acc, super_block_steps {
    static constexpr int NR = 1, NT = 4;
    using block = typename std::conditional<Q5, block_q5_K, block_q4_K>::type;
    static constexpr size_t W_STEP = sizeof(block);
    struct ws_t {
        __m256i u[8];   // (8, 32) unsigned quants of the 8 sub-blocks (unpacked once, used by nt tokens)
        int16_t sc[8];  // sub-block scales
        __m256i mins;   // (16,) int16: min of sub-block j at 2j and 2j + 1
        float d, dmin;
    };


    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t) {
        const block* b = reinterpret_cast<const block*>(row) + s;
        alignas(16) uint8_t mm[16];
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, m;
            scale_min_k4(j, b->scales, &sc, &m);
            ws.sc[j] = sc;
            mm[2 * j] = mm[2 * j + 1] = m;
        }
        ws.mins = _mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(mm)));
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        __m256i qh = _mm256_setzero_si256();
        if (Q5) qh = load256(reinterpret_cast<const block_q5_K*>(b)->qh);
        for (int g = 0; g < 4; ++g) {
            const __m256i q = load256(b->qs + 32 * g);
            __m256i lo = _mm256_and_si256(q, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            if (Q5) {   // bit 2g of qh[l] (low half), 2g + 1 (high half)
                const __m256i one = _mm256_set1_epi8(1);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g + 1)), one), 4));
            }
            ws.u[2 * g] = lo;
            ws.u[2 * g + 1] = hi;
        }
        ws.d = half_to_float(b->d);
        ws.dmin = half_to_float(b->dmin);
    }

    static void madd(const ws_t& ws, const xs_t& xs, __m256& acc) {
        __m256i isum = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
            const __m256i p = _mm256_maddubs_epi16(ws.u[j], load256(xs.q + 32 * j));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_set1_epi16(ws.sc[j])));
        }
        const __m256i msum = _mm256_madd_epi16(ws.mins, xs.bsums);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(ws.d * xs.d), acc);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(-(ws.dmin * xs.d)), acc);
    }
};

// IQ4_XS: a step is one super-block; sub-block j's 32 signed table values once per row (sign trick:
// |w| * (x with w's sign), |w| <= 127, so maddubs pairs stay within int16), its int32 sums times ls - 32.
struct iq4xs_format : ymm_acc, super_block_steps {
    static constexpr int NR = 1, NT = 4;
    static constexpr size_t W_STEP = sizeof(block_iq4_xs);
    struct ws_t {
        __m256i w[8];   // (8, 32) table values of sub-block j, elements in order
        int sc[8];      // ls - 32
        float d;
    };


    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t) {
        const block_iq4_xs* b = reinterpret_cast<const block_iq4_xs*>(row) + s;
        const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(KVALUES_IQ4NL)));
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        for (int j = 0; j < 8; ++j) {
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16 * j));
            const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
            ws.w[j] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
            ws.sc[j] = iq4_xs_scale(*b, j);
        }
        ws.d = half_to_float(b->d);
    }

    static void madd(const ws_t& ws, const xs_t& xs, __m256& acc) {
        __m256i isum = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
            const __m256i x = load256(xs.q + 32 * j);
            const __m256i p = dot_u8s8(_mm256_sign_epi8(ws.w[j], ws.w[j]), _mm256_sign_epi8(x, ws.w[j]));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(p, _mm256_set1_epi32(ws.sc[j])));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(ws.d * xs.d), acc);
    }
};

// Q6_K, Q3_K and Q2_K: 16 sub-blocks of 16 with small integer scales; quants q in [0, 63] (Q6_K, offset
// 32), [0, 7] (Q3_K, offset 4) or [0, 3] (Q2_K, a min per sub-block instead) in eight runs of 32 elements,
// run v holding sub-blocks 2v and 2v + 1.
template <int KIND>
struct k16_format : ymm_acc, super_block_steps {
    static constexpr int NR = 1, NT = 4;
    static constexpr size_t W_STEP = k16_block_bytes(KIND);
    static constexpr int OFFSET_SHIFT = k16_offset_shift(KIND);   // the quants' offset, 4 or 32, as a shift (not Q2_K)
    struct ws_t {
        __m256i u[8];   // (8, 32) quants of the 8 runs of 32 (unpacked once, used by nt tokens)
        __m256i sc[8];  // (8, 16) int16: scale of run v's first 16 elements in lanes 0-7, second 16 in 8-15
        __m256i sc16;   // (16,) int16 scales, for the offset through bsums (Q2_K: the mins)
        float d, dmin;
    };


    static void unpack_q6(const block_q6_K* b, ws_t& ws, int8_t sc[16]) {
        const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
        for (int h = 0; h < 2; ++h) {
            const __m256i l0 = load256(b->ql + 64 * h), l1 = load256(b->ql + 64 * h + 32);
            const __m256i qh = load256(b->qh + 32 * h);
            ws.u[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, low2), 4));
            ws.u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), low2), 4));
            ws.u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), low2), 4));
            ws.u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), low2), 4));
        }
        std::memcpy(sc, b->scales, 16);
        ws.d = half_to_float(b->d);
    }

    // Q3_K: run v = 4h + g: bytes (qs[32h ..] >> 2g) & 3, plus 4 where bit 4h + g of hmask[k] is set.
    static void unpack_q3(const block_q3_K* b, ws_t& ws, int8_t sc[16]) {
        const __m256i hm = load256(b->hmask);
        const __m256i low2 = _mm256_set1_epi8(0x03);
        for (int h = 0; h < 2; ++h) {
            const __m256i q = load256(b->qs + 32 * h);
            for (int g = 0; g < 4; ++g) {
                const __m256i u = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * g)), low2);
                const __m256i bit = _mm256_set1_epi8(char(1 << (4 * h + g)));
                const __m256i high = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit), _mm256_set1_epi8(4));
                ws.u[4 * h + g] = _mm256_or_si256(u, high);
            }
        }
        _mm_store_si128(reinterpret_cast<__m128i*>(sc), q3_K_scales_x16(b->scales));
        ws.d = half_to_float(b->d);
    }

    // Q2_K: as Q3_K without the high bit; scales[j] & 15 multiplies, scales[j] >> 4 is the min.
    static void unpack_q2(const block_q2_K* b, ws_t& ws, int8_t sc[16]) {
        const __m256i low2 = _mm256_set1_epi8(0x03);
        for (int h = 0; h < 2; ++h) {
            const __m256i q = load256(b->qs + 32 * h);
            for (int g = 0; g < 4; ++g) ws.u[4 * h + g] = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * g)), low2);
        }
        const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales));
        _mm_store_si128(reinterpret_cast<__m128i*>(sc), _mm_and_si128(sm, _mm_set1_epi8(0x0F)));
        ws.sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F)));
        ws.d = half_to_float(b->d);
        ws.dmin = half_to_float(b->dmin);
    }

    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t) {
        alignas(16) int8_t sc[16];
        if (KIND == K16_Q3) {
            unpack_q3(reinterpret_cast<const block_q3_K*>(row) + s, ws, sc);
        } else if (KIND == K16_Q2) {
            unpack_q2(reinterpret_cast<const block_q2_K*>(row) + s, ws, sc);
        } else {
            unpack_q6(reinterpret_cast<const block_q6_K*>(row) + s, ws, sc);
        }
        for (int v = 0; v < 8; ++v) {   // run v: scale groups 2v, 2v + 1
            const int16_t s0 = sc[2 * v], s1 = sc[2 * v + 1];
            ws.sc[v] = _mm256_setr_epi16(s0, s0, s0, s0, s0, s0, s0, s0, s1, s1, s1, s1, s1, s1, s1, s1);
        }
        if (KIND != K16_Q2) ws.sc16 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)));
    }

    static void madd(const ws_t& ws, const xs_t& xs, __m256& acc) {
        __m256i isum = _mm256_setzero_si256();
        for (int v = 0; v < 8; ++v) {
            const __m256i p = _mm256_maddubs_epi16(ws.u[v], load256(xs.q + 32 * v));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, ws.sc[v]));
        }
        const __m256i msum = _mm256_madd_epi16(ws.sc16, xs.bsums);   // (8,) int32: sum sc * bsum (Q2_K: m * bsum)
        if (KIND == K16_Q2) {
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(ws.d * xs.d), acc);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(-(ws.dmin * xs.d)), acc);
            return;
        }
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(msum, OFFSET_SHIFT));   // offset * sum sc * bsum
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(ws.d * xs.d), acc);
    }
};

// ---------------------------------------------------------------- float weights, f32 activations

enum float_kind { K_F32, K_F16, K_BF16 };

template <int KIND>
struct float_format : ymm_acc {
    static constexpr int NR = 4, NT = 2;
    static constexpr size_t ES = KIND == K_F32 ? 4 : 2;
    static constexpr size_t W_STEP = 8 * ES;
    struct xs_t { __m256 x; };
    struct ws_t { __m256 w; };

    static int64_t full_steps(int64_t n) { return n / 8; }
    static bool has_tail(int64_t n) { return n % 8 != 0; }

    // The partial last step goes through a zero-padded copy (elements of es bytes).
    template <bool FULL>
    static const uint8_t* step_ptr(const uint8_t* row, int64_t s, int64_t n, size_t es, uint8_t* pad) {
        const uint8_t* p = row + size_t(8 * s) * es;
        if (FULL) return p;
        std::memset(pad, 0, 8 * es);
        std::memcpy(pad, p, size_t(n % 8) * es);
        return pad;
    }
    template <bool FULL>
    static void load_x(const uint8_t* row, int64_t s, xs_t& xs, int64_t n) {   // f32 activations
        alignas(32) uint8_t pad[32];
        xs.x = _mm256_loadu_ps(reinterpret_cast<const float*>(step_ptr<FULL>(row, s, n, 4, pad)));
    }
    template <bool FULL>
    static void load_w(const uint8_t* row, int64_t s, ws_t& ws, int64_t n) {
        alignas(32) uint8_t pad[32];
        const uint8_t* p = step_ptr<FULL>(row, s, n, ES, pad);
        if (KIND == K_F32) {
            ws.w = _mm256_loadu_ps(reinterpret_cast<const float*>(p));
        } else {
            const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
            ws.w = KIND == K_F16 ? _mm256_cvtph_ps(h) : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
    }
    static void madd(const ws_t& ws, const xs_t& xs, __m256& acc) { acc = _mm256_fmadd_ps(ws.w, xs.x, acc); }
};

// ---------------------------------------------------------------- activation quantizers
// Byte-identical to quants-generic.cpp's: the same IEEE operations per element, eight at a time.

using act_avx2::abs8;
using act_avx2::pack_32_i8;
using act_avx2::round_away8;

// max is exact, but a NaN lane is kept or dropped by its place (maxps returns its second operand where either
// is NaN): quants-packed-avx2.cpp's hmax8x8 pairs the lanes as this does
inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

inline int hsum8_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

template <bool WITH_SUM>
void quant_act_q8_0_avx2(const float* x, void* dst, int64_t n) {
    uint8_t* out = static_cast<uint8_t*>(dst);
    const size_t bb = WITH_SUM ? sizeof(block_q8_1) : sizeof(block_q8_0);
    for (int64_t i = 0; i < n / 32; ++i, x += 32) {
        __m256 v[4];
        for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
        const float amax = hmax8(_mm256_max_ps(_mm256_max_ps(abs8(v[0]), abs8(v[1])), _mm256_max_ps(abs8(v[2]), abs8(v[3]))));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        __m256i q[4];
        for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(round_away8(_mm256_mul_ps(v[k], _mm256_set1_ps(id))));
        uint8_t* blk = out + size_t(i) * bb;
        const uint16_t dh = float_to_half(d);
        std::memcpy(blk, &dh, 2);
        if (WITH_SUM) {
            const int sum = hsum8_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
            const uint16_t sh = float_to_half(float(sum) * d);
            std::memcpy(blk + 2, &sh, 2);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + (WITH_SUM ? 4 : 2)), pack_32_i8(q[0], q[1], q[2], q[3]));
    }
}

void quant_act_q8_K_avx2(const float* x, void* dst, int64_t n) {
    block_q8_K* y = static_cast<block_q8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 32; ++k) m = _mm256_max_ps(m, abs8(_mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax8(m);
        if (amax == 0.0f) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        float max = 0.0f;   // the first element of largest magnitude, with its sign
        for (int j = 0; j < QK_K; ++j) {
            if (std::fabs(x[j]) == amax) {
                max = x[j];
                break;
            }
        }
        const float iscale = -127.0f / max;
        for (int k = 0; k < 8; ++k) {   // 32 elements, two bsums
            __m256i q[4];
            for (int u = 0; u < 4; ++u) {
                const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * k + 8 * u), _mm256_set1_ps(iscale)),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[u] = _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + 32 * k), pack_32_i8(q[0], q[1], q[2], q[3]));
            y[i].bsums[2 * k] = int16_t(hsum8_epi32(_mm256_add_epi32(q[0], q[1])));
            y[i].bsums[2 * k + 1] = int16_t(hsum8_epi32(_mm256_add_epi32(q[2], q[3])));
        }
        y[i].d = 1.0f / iscale;
    }
}

}  // namespace

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

quant_act_fn simd_act_quantizer_for(int32_t act_type) {
    switch (act_type) {
        case TYPE_Q8_0: return quant_act_q8_0_avx2<false>;
        case TYPE_Q8_1: return quant_act_q8_0_avx2<true>;
        case TYPE_Q8_K: return quant_act_q8_K_avx2;
        default: return nullptr;
    }
}

const char* simd_build_name() { return "avx2"; }

int64_t simd_int8_probe(int64_t n_iter, int32_t* sink) {
    constexpr int CHAINS = 8;
    __m256i acc[CHAINS];
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm256_set1_epi32(c);
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
    for (int64_t i = 0; i < n_iter; ++i) {
#pragma GCC unroll 8
        for (int c = 0; c < CHAINS; ++c) acc[c] = _mm256_add_epi32(acc[c], dot_u8s8(a, b));
#if defined(__GNUC__)
        __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]));   // keep the chains
#endif
    }
    __m256i t = acc[0];
    for (int c = 1; c < CHAINS; ++c) t = _mm256_add_epi32(t, acc[c]);
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), t);
    *sink = lanes[0];
    return n_iter * CHAINS * 32;
}

}  // namespace strata

#endif  // STRATA_SIMD_AVX2
