// GGUF / ggml quantized block layouts, byte for byte, so a memory-mapped tensor is used in place.
// Each struct's size is static_assert'ed against ggml's. Fields use raw uint16_t for fp16 halves.
//
// Not here: the arithmetic (quants-generic.cpp, quants-avx512.cpp, quants-avx2.cpp) or dispatch
// (quants.cpp). Layout reference: ggml-common.h in llama.cpp (facts only, no code copied).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace strata {

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK_MXFP4 = 32;
constexpr int QK4_NL = 32;
constexpr int QK_K = 256;           // K-quant super-block
constexpr int K_SCALE_SIZE = 12;    // packed 6-bit scales and mins of Q4_K / Q5_K

// w = d * (q - 8), q in [0, 15]; element j < 16 is qs[j] & 15, element j + 16 is qs[j] >> 4.
struct block_q4_0 {
    uint16_t d;              // fp16 scale
    uint8_t qs[QK4_0 / 2];   // (32,) nibbles
};
static_assert(sizeof(block_q4_0) == 2 + QK4_0 / 2, "block_q4_0 must be 18 bytes");

// w = d * q + m, q in [0, 15]; same nibble order as Q4_0.
struct block_q4_1 {
    uint16_t d;              // fp16 scale
    uint16_t m;              // fp16 minimum
    uint8_t qs[QK4_1 / 2];   // (32,) nibbles
};
static_assert(sizeof(block_q4_1) == 4 + QK4_1 / 2, "block_q4_1 must be 20 bytes");

// w = d * (q - 16), q = nibble | (bit j of qh) << 4, q in [0, 31].
struct block_q5_0 {
    uint16_t d;              // fp16 scale
    uint8_t qh[4];           // (32,) fifth bits, little-endian uint32
    uint8_t qs[QK5_0 / 2];   // (32,) nibbles
};
static_assert(sizeof(block_q5_0) == 2 + 4 + QK5_0 / 2, "block_q5_0 must be 22 bytes");

// w = d * q + m, q in [0, 31].
struct block_q5_1 {
    uint16_t d;              // fp16 scale
    uint16_t m;              // fp16 minimum
    uint8_t qh[4];           // (32,) fifth bits
    uint8_t qs[QK5_1 / 2];   // (32,) nibbles
};
static_assert(sizeof(block_q5_1) == 4 + 4 + QK5_1 / 2, "block_q5_1 must be 24 bytes");

// w = KVALUES_MXFP4[q] * e8m0_half(e), q in [0, 15]; same nibble order as Q4_0. The table holds
// twice the E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), so the scale is halved:
// e8m0_half(e) = 2^(e - 128), for every e in [0, 255] (0 and 1 are float denormals; no NaN).
struct block_mxfp4 {
    uint8_t e;                  // E8M0 exponent
    uint8_t qs[QK_MXFP4 / 2];   // (32,) nibbles, indices into KVALUES_MXFP4
};
static_assert(sizeof(block_mxfp4) == 1 + QK_MXFP4 / 2, "block_mxfp4 must be 17 bytes");

constexpr int8_t KVALUES_MXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as ggml's e8m0_to_fp32_half builds it: denormal bit patterns for e < 2.
inline float e8m0_to_fp32_half(uint8_t e) {
    const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// IQ4_NL and IQ4_XS: 4-bit indices into one non-linear table of int8 values.
constexpr int8_t KVALUES_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// w = d * KVALUES_IQ4NL[q], q in [0, 15]; same layout and nibble order as Q4_0.
struct block_iq4_nl {
    uint16_t d;               // fp16 scale
    uint8_t qs[QK4_NL / 2];   // (32,) nibbles
};
static_assert(sizeof(block_iq4_nl) == 2 + QK4_NL / 2, "block_iq4_nl must be 18 bytes");

// 8 sub-blocks of 32: w = d * (ls[j] - 32) * KVALUES_IQ4NL[q], ls[j] 6 bits: its low 4 in scales_l
// (sub-block j: nibble j % 2 of byte j / 2), its high 2 in bits 2j, 2j + 1 of scales_h. Sub-block j's
// 16 bytes qs[16j ..] hold its elements l (low nibble) and l + 16 (high nibble), as IQ4_NL.
struct block_iq4_xs {
    uint16_t d;                     // fp16 super-block scale
    uint16_t scales_h;              // (8,) high 2 bits of the sub-block scales
    uint8_t scales_l[QK_K / 64];    // (8,) low 4 bits
    uint8_t qs[QK_K / 2];           // (256,) nibbles
};
static_assert(sizeof(block_iq4_xs) == 4 + QK_K / 64 + QK_K / 2, "block_iq4_xs must be 136 bytes");

inline int iq4_xs_scale(const block_iq4_xs& b, int j) {   // ls[j] - 32, in [-32, 31]
    return int(((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4)) - 32;
}

// w = d * q, q in [-127, 127] (weights, and the activations of Q4_0 / Q5_0 / Q8_0 products).
struct block_q8_0 {
    uint16_t d;              // fp16 scale
    int8_t qs[QK8_0];        // (32,)
};
static_assert(sizeof(block_q8_0) == 2 + QK8_0, "block_q8_0 must be 34 bytes");

// Activations of Q4_1 / Q5_1 products: as Q8_0 plus s = d * sum(qs).
struct block_q8_1 {
    uint16_t d;              // fp16 scale
    uint16_t s;              // fp16 d * sum(qs)
    int8_t qs[QK8_1];        // (32,)
};
static_assert(sizeof(block_q8_1) == 4 + QK8_1, "block_q8_1 must be 36 bytes");

// 8 sub-blocks of 32: w = d * sc[j] * q - dmin * m[j], q in [0, 15], sc/m 6-bit packed in scales.
// Element 64g + l (l < 32) is qs[32g + l] & 15 (sub-block 2g); 64g + 32 + l is qs[32g + l] >> 4.
struct block_q4_K {
    uint16_t d;                     // fp16 super-block scale of the scales
    uint16_t dmin;                  // fp16 super-block scale of the mins
    uint8_t scales[K_SCALE_SIZE];   // (8 scales + 8 mins) x 6 bits
    uint8_t qs[QK_K / 2];           // (256,) nibbles
};
static_assert(sizeof(block_q4_K) == 4 + K_SCALE_SIZE + QK_K / 2, "block_q4_K must be 144 bytes");

// As Q4_K with a fifth bit: element of sub-block j at position l takes bit j of qh[l].
struct block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];           // (32,) bit j = sub-block j
    uint8_t qs[QK_K / 2];           // (256,) nibbles
};
static_assert(sizeof(block_q5_K) == 4 + K_SCALE_SIZE + QK_K / 8 + QK_K / 2, "block_q5_K must be 176 bytes");

// 16 sub-blocks of 16: w = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q in [0, 3]: for element
// e = 128h + 32g + k (half h, group g of four, k < 32), (qs[32h + k] >> 2g) & 3; sub-block j = e / 16.
struct block_q2_K {
    uint8_t scales[QK_K / 16];      // (16,) 4-bit scale (low) and 4-bit min (high)
    uint8_t qs[QK_K / 4];           // (64,) 2-bit quants
    uint16_t d;                     // fp16 scale of the scales
    uint16_t dmin;                  // fp16 scale of the mins
};
static_assert(sizeof(block_q2_K) == QK_K / 16 + QK_K / 4 + 4, "block_q2_K must be 84 bytes");

// 16 sub-blocks of 16: w = d * (sc[j] - 32) * (q - 4), q in [0, 7]: for element e = 128h + 32g + k (half h,
// group g of four, k < 32), 2 low bits (qs[32h + k] >> 2g) & 3, high bit (hmask[k] >> (4h + g)) & 1;
// sub-block j = e / 16; sc 6 bits packed in scales (q3_K_scales).
struct block_q3_K {
    uint8_t hmask[QK_K / 8];        // (32,) high bits
    uint8_t qs[QK_K / 4];           // (64,) low 2 bits
    uint8_t scales[12];             // (16,) 6-bit scales
    uint16_t d;                     // fp16 super-block scale
};
static_assert(sizeof(block_q3_K) == QK_K / 8 + QK_K / 4 + 12 + 2, "block_q3_K must be 110 bytes");

// The 16 sub-block scales of a Q3_K block, sc - 32 in [-32, 31]: scale j's low 4 bits are nibble j / 8 of
// byte j % 8, its high 2 bits bits 2 (j / 4) .. of byte 8 + j % 4 (ggml's packing).
inline void q3_K_scales(const block_q3_K& b, int8_t out[16]) {
    for (int j = 0; j < 16; ++j) {
        const int low = (b.scales[j % 8] >> (4 * (j / 8))) & 0xF;
        const int high = (b.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = int8_t((low | (high << 4)) - 32);
    }
}

// 16 sub-blocks of 16: w = d * scales[j] * (q - 32), q in [0, 63] (4 low bits in ql, 2 high in qh).
struct block_q6_K {
    uint8_t ql[QK_K / 2];           // (256,) low nibbles
    uint8_t qh[QK_K / 4];           // (256,) high 2 bits
    int8_t scales[QK_K / 16];       // (16,) signed sub-block scales
    uint16_t d;                     // fp16 super-block scale
};
static_assert(sizeof(block_q6_K) == QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, "block_q6_K must be 210 bytes");

// The three formats of 16 sub-blocks of 16 with small integer scales, which the SIMD files compute alike
// (their k16_format): bytes a super-block, and the offset of their quants as a shift (q - 4 for Q3_K,
// q - 32 for Q6_K; Q2_K has none, a min per sub-block instead).
enum k16_kind { K16_Q6, K16_Q3, K16_Q2 };
constexpr size_t k16_block_bytes(int kind) {
    return kind == K16_Q3 ? sizeof(block_q3_K) : kind == K16_Q2 ? sizeof(block_q2_K) : sizeof(block_q6_K);
}
constexpr int k16_offset_shift(int kind) { return kind == K16_Q3 ? 2 : 5; }

// Activations of K-quant products: x = d * qs, plus the sums of each 16 qs.
struct block_q8_K {
    float d;                        // f32 scale
    int8_t qs[QK_K];                // (256,)
    int16_t bsums[QK_K / 16];       // (16,) sum of qs[16i .. 16i + 15]
};
static_assert(sizeof(block_q8_K) == 4 + QK_K + QK_K / 8, "block_q8_K must be 292 bytes");

}  // namespace strata
