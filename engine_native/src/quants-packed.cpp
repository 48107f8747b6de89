// The portable side of quants-packed.h: argument checks (std::invalid_argument naming the problem),
// packing GGUF rows into the row-interleaved layout and back, activation preparation, and dispatch
// to the build's packed kernels (quants-packed-avx512.cpp). Q4_K and Q5_K have their own packing
// (6-bit scales / mins unpacked to bytes; Q5_K's qh interleaved after them) and activation
// preparation (Q8_K -> d, qs, sums of 32); Q6_K its
// own too (ql, qh and scales interleaved apart; Q8_K -> qs, -32 * bsums, d), and Q3_K (qs, hmask and its
// 6-bit scales unpacked to int8; Q8_K -> qs, -4 * bsums, d), and IQ4_XS (qs, its 6-bit scales unpacked to
// int8; Q8_K -> qs, -128 * sums of 32, d), and Q2_K (qs and its scale bytes; Q8_K -> qs, bsums, d).
//
// Not here: the SIMD products themselves, or the GGUF-layout products (quants.cpp).
#include "quants-packed.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "quants-blocks.h"
#include "quants-kernels.h"
#include "quants.h"

namespace strata {
namespace {

constexpr int64_t QK = 32;   // elements per block of Q4_1 and Q8_0

// Elements of one block (a packed block holds this block of 16 rows): 256 for Q4_K, else 32.
bool is_q45_K(int32_t type) { return type == TYPE_Q4_K || type == TYPE_Q5_K; }
// The types packed a block at a time by pack_block / unpack_block (their parts rearranged apart).
bool packs_by_block(int32_t type) {
    return type == TYPE_Q6_K || type == TYPE_Q3_K || type == TYPE_Q2_K || type == TYPE_IQ4_XS;
}
int64_t block_elems(int32_t type) { return is_q45_K(type) || packs_by_block(type) ? QK_K : QK; }
// Quant bytes of one block (16 for Q4_1 / IQ4_NL, 32 for Q8_0, 128 for Q4_K / Q5_K) and where they start in a GGUF block.
size_t qs_bytes(int32_t type) {
    return type == TYPE_Q4_1 || type == TYPE_IQ4_NL ? QK4_1 / 2 : is_q45_K(type) ? QK_K / 2 : QK8_0;
}
// Q4_1's m and Q4_K's / Q5_K's dmin: a second fp16 a row after the 16 d.
bool has_second_fp16(int32_t type) { return type == TYPE_Q4_1 || is_q45_K(type); }
size_t qs_offset(int32_t type) {
    return type == TYPE_Q4_1 ? 4 : type == TYPE_Q4_K ? 4 + K_SCALE_SIZE : type == TYPE_Q5_K ? 4 + K_SCALE_SIZE + QK_K / 8 : 2;
}
constexpr size_t Q5_K_QH_OFFSET = 4 + K_SCALE_SIZE;   // block_q5_K's qh (32,) bytes

// Q4_K's 12 bytes of 6-bit scales / mins of 8 sub-blocks <-> 8 scale bytes and 8 min bytes
// (llama.cpp's get_scale_min_k4 and its inverse; every one of the 96 bits is used, so exact).
void unpack_scales_q4_K(const uint8_t* q, uint8_t* sc, uint8_t* m) {
    for (int j = 0; j < 4; ++j) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = uint8_t((q[j + 8] & 0x0F) | ((q[j] >> 6) << 4));
        m[j + 4] = uint8_t((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}
void pack_scales_q4_K(const uint8_t* sc, const uint8_t* m, uint8_t* q) {
    for (int j = 0; j < 4; ++j) {
        q[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = uint8_t((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
    }
}

// One Q6_K GGUF block of row r <-> its places in a packed block p (layout: quants-packed.h).
void pack_block_q6_K(const block_q6_K* blk, int64_t r, uint8_t* p) {
    const size_t rr = size_t(r);
    for (size_t j = 0; j < QK_K / 8; ++j) std::memcpy(p + (j * PACK_ROWS + rr) * 4, blk->ql + 4 * j, 4);
    for (size_t j = 0; j < QK_K / 16; ++j) std::memcpy(p + PACKED_Q6_K_QH + (j * PACK_ROWS + rr) * 4, blk->qh + 4 * j, 4);
    for (size_t s = 0; s < QK_K / 16; ++s) p[PACKED_Q6_K_SC + s * PACK_ROWS + rr] = uint8_t(blk->scales[s]);
    std::memcpy(p + PACKED_Q6_K_D + 2 * rr, &blk->d, 2);
}
void unpack_block_q6_K(const uint8_t* p, int64_t r, block_q6_K* blk) {
    const size_t rr = size_t(r);
    for (size_t j = 0; j < QK_K / 8; ++j) std::memcpy(blk->ql + 4 * j, p + (j * PACK_ROWS + rr) * 4, 4);
    for (size_t j = 0; j < QK_K / 16; ++j) std::memcpy(blk->qh + 4 * j, p + PACKED_Q6_K_QH + (j * PACK_ROWS + rr) * 4, 4);
    for (size_t s = 0; s < QK_K / 16; ++s) blk->scales[s] = int8_t(p[PACKED_Q6_K_SC + s * PACK_ROWS + rr]);
    std::memcpy(&blk->d, p + PACKED_Q6_K_D + 2 * rr, 2);
}

// One Q3_K GGUF block of row r <-> its places in a packed block p: qs and hmask 4 bytes at a time, the 16
// 6-bit scales as int8 sc - 32 (q3_K_scales; every bit of the 12 bytes is a scale's, so exact back).
void pack_block_q3_K(const block_q3_K* blk, int64_t r, uint8_t* p) {
    const size_t rr = size_t(r);
    for (size_t j = 0; j < QK_K / 16; ++j) std::memcpy(p + (j * PACK_ROWS + rr) * 4, blk->qs + 4 * j, 4);
    for (size_t j = 0; j < QK_K / 32; ++j) std::memcpy(p + PACKED_Q3_K_HMASK + (j * PACK_ROWS + rr) * 4, blk->hmask + 4 * j, 4);
    int8_t sc[16];
    q3_K_scales(*blk, sc);
    for (size_t s = 0; s < 16; ++s) p[PACKED_Q3_K_SC + s * PACK_ROWS + rr] = uint8_t(sc[s]);
    std::memcpy(p + PACKED_Q3_K_D + 2 * rr, &blk->d, 2);
}
void unpack_block_q3_K(const uint8_t* p, int64_t r, block_q3_K* blk) {
    const size_t rr = size_t(r);
    for (size_t j = 0; j < QK_K / 16; ++j) std::memcpy(blk->qs + 4 * j, p + (j * PACK_ROWS + rr) * 4, 4);
    for (size_t j = 0; j < QK_K / 32; ++j) std::memcpy(blk->hmask + 4 * j, p + PACKED_Q3_K_HMASK + (j * PACK_ROWS + rr) * 4, 4);
    std::memset(blk->scales, 0, sizeof(blk->scales));
    for (int s = 0; s < 16; ++s) {   // q3_K_scales' inverse: low 4 bits to nibble s / 8 of byte s % 8, high 2 to byte 8 + s % 4
        const int v = int(int8_t(p[PACKED_Q3_K_SC + size_t(s) * PACK_ROWS + rr])) + 32;
        blk->scales[s % 8] = uint8_t(blk->scales[s % 8] | ((v & 0xF) << (4 * (s / 8))));
        blk->scales[8 + s % 4] = uint8_t(blk->scales[8 + s % 4] | ((v >> 4) << (2 * (s / 4))));
    }
    std::memcpy(&blk->d, p + PACKED_Q3_K_D + 2 * rr, 2);
}

// One IQ4_XS GGUF block of row r <-> its places in a packed block p: qs 4 bytes at a time, the 8 6-bit
// scales as int8 ls - 32 (iq4_xs_scale; every bit of scales_h / scales_l is a scale's, so exact back).
void pack_block_iq4_xs(const block_iq4_xs* blk, int64_t r, uint8_t* p) {
    const size_t rr = size_t(r);
    for (size_t j = 0; j < QK_K / 8; ++j) std::memcpy(p + (j * PACK_ROWS + rr) * 4, blk->qs + 4 * j, 4);
    for (int s = 0; s < 8; ++s) p[PACKED_IQ4_XS_SC + size_t(s) * PACK_ROWS + rr] = uint8_t(int8_t(iq4_xs_scale(*blk, s)));
    std::memcpy(p + PACKED_IQ4_XS_D + 2 * rr, &blk->d, 2);
}
void unpack_block_iq4_xs(const uint8_t* p, int64_t r, block_iq4_xs* blk) {
    const size_t rr = size_t(r);
    for (size_t j = 0; j < QK_K / 8; ++j) std::memcpy(blk->qs + 4 * j, p + (j * PACK_ROWS + rr) * 4, 4);
    blk->scales_h = 0;
    std::memset(blk->scales_l, 0, sizeof(blk->scales_l));
    for (int s = 0; s < 8; ++s) {   // low 4 bits to nibble s % 2 of scales_l[s / 2], high 2 to bits 2s of scales_h
        const int v = int(int8_t(p[PACKED_IQ4_XS_SC + size_t(s) * PACK_ROWS + rr])) + 32;
        blk->scales_l[s / 2] = uint8_t(blk->scales_l[s / 2] | ((v & 0xF) << (4 * (s % 2))));
        blk->scales_h = uint16_t(blk->scales_h | ((v >> 4) << (2 * s)));
    }
    std::memcpy(&blk->d, p + PACKED_IQ4_XS_D + 2 * rr, 2);
}

// One Q2_K GGUF block of row r <-> its places in a packed block p: qs 4 bytes at a time, the scale bytes
// (scale low, min high) 2 at a time, d, dmin.
void pack_block_q2_K(const block_q2_K* blk, int64_t r, uint8_t* p) {
    const size_t rr = size_t(r);
    for (size_t j = 0; j < QK_K / 16; ++j) std::memcpy(p + (j * PACK_ROWS + rr) * 4, blk->qs + 4 * j, 4);
    for (size_t k = 0; k < QK_K / 32; ++k) std::memcpy(p + PACKED_Q2_K_SC + (k * PACK_ROWS + rr) * 2, blk->scales + 2 * k, 2);
    std::memcpy(p + PACKED_Q2_K_D + 2 * rr, &blk->d, 2);
    std::memcpy(p + PACKED_Q2_K_DMIN + 2 * rr, &blk->dmin, 2);
}
void unpack_block_q2_K(const uint8_t* p, int64_t r, block_q2_K* blk) {
    const size_t rr = size_t(r);
    for (size_t j = 0; j < QK_K / 16; ++j) std::memcpy(blk->qs + 4 * j, p + (j * PACK_ROWS + rr) * 4, 4);
    for (size_t k = 0; k < QK_K / 32; ++k) std::memcpy(blk->scales + 2 * k, p + PACKED_Q2_K_SC + (k * PACK_ROWS + rr) * 2, 2);
    std::memcpy(&blk->d, p + PACKED_Q2_K_D + 2 * rr, 2);
    std::memcpy(&blk->dmin, p + PACKED_Q2_K_DMIN + 2 * rr, 2);
}

void pack_block(int32_t type, const uint8_t* blk, int64_t r, uint8_t* p) {
    if (type == TYPE_Q6_K) pack_block_q6_K(reinterpret_cast<const block_q6_K*>(blk), r, p);
    else if (type == TYPE_Q3_K) pack_block_q3_K(reinterpret_cast<const block_q3_K*>(blk), r, p);
    else if (type == TYPE_Q2_K) pack_block_q2_K(reinterpret_cast<const block_q2_K*>(blk), r, p);
    else pack_block_iq4_xs(reinterpret_cast<const block_iq4_xs*>(blk), r, p);
}
void unpack_block(int32_t type, const uint8_t* p, int64_t r, uint8_t* blk) {
    if (type == TYPE_Q6_K) unpack_block_q6_K(p, r, reinterpret_cast<block_q6_K*>(blk));
    else if (type == TYPE_Q3_K) unpack_block_q3_K(p, r, reinterpret_cast<block_q3_K*>(blk));
    else if (type == TYPE_Q2_K) unpack_block_q2_K(p, r, reinterpret_cast<block_q2_K*>(blk));
    else unpack_block_iq4_xs(p, r, reinterpret_cast<block_iq4_xs*>(blk));
}

void check_type(int32_t type, const char* what) {
    if (!packed_supported(type)) {
        const char* name = type_name(type);
        throw std::invalid_argument(std::string(what) + ": no packed products for type " + (name ? name : "?") + " (" +
                                    std::to_string(type) + ") in this " + simd_name() + " build");
    }
}

void check_cols(int32_t type, int64_t n, const char* what) {
    const int64_t qk = block_elems(type);
    if (n <= 0 || n % qk != 0) {
        throw std::invalid_argument(std::string(what) + ": row length n=" + std::to_string(n) + " must be a positive multiple of " +
                                    std::to_string(qk) + " for " + type_name(type));
    }
}

int64_t n_groups(int64_t n_rows) { return (n_rows + PACK_ROWS - 1) / PACK_ROWS; }

}  // namespace

bool packed_supported(int32_t type) {
    return (type == TYPE_Q4_1 || type == TYPE_Q8_0 || type == TYPE_IQ4_NL || is_q45_K(type) || packs_by_block(type)) &&
           simd_packed_matmul_for(type) != nullptr;
}

size_t packed_block_bytes(int32_t type) {
    check_type(type, "packed_block_bytes");
    // quants, then 16 fp16 scales, then (Q4_1) 16 fp16 minimums
    if (type == TYPE_Q4_K) return PACKED_Q4_K_BLOCK_BYTES;
    if (type == TYPE_Q5_K) return PACKED_Q5_K_BLOCK_BYTES;
    if (type == TYPE_Q6_K) return PACKED_Q6_K_BLOCK_BYTES;
    if (type == TYPE_Q3_K) return PACKED_Q3_K_BLOCK_BYTES;
    if (type == TYPE_IQ4_XS) return PACKED_IQ4_XS_BLOCK_BYTES;
    if (type == TYPE_Q2_K) return PACKED_Q2_K_BLOCK_BYTES;
    return size_t(PACK_ROWS) * (qs_bytes(type) + 2 + (type == TYPE_Q4_1 ? 2 : 0));
}

size_t packed_bytes(int32_t type, int64_t n_rows, int64_t n_cols) {
    check_type(type, "packed_bytes");
    check_cols(type, n_cols, "packed_bytes");
    if (n_rows < 0) throw std::invalid_argument("packed_bytes: n_rows=" + std::to_string(n_rows) + " is negative");
    return size_t(n_groups(n_rows)) * size_t(n_cols / block_elems(type)) * packed_block_bytes(type);
}

void pack_rows(int32_t type, const void* w, size_t w_row_bytes, int64_t n_rows, int64_t n_cols, void* dst, int64_t g0,
               int64_t g1) {
    check_type(type, "pack_rows");
    check_cols(type, n_cols, "pack_rows");
    const size_t row = type_row_bytes(type, n_cols);
    if (w_row_bytes < row) {
        throw std::invalid_argument("pack_rows: w_row_bytes=" + std::to_string(w_row_bytes) + " is less than one row (" +
                                    std::to_string(row) + " bytes)");
    }
    if (n_rows < 0 || g0 < 0 || g1 < g0 || g1 > n_groups(n_rows)) {
        throw std::invalid_argument("pack_rows: groups [" + std::to_string(g0) + ", " + std::to_string(g1) +
                                    ") outside the " + std::to_string(n_groups(n_rows)) + " groups of " +
                                    std::to_string(n_rows) + " rows");
    }
    if (g1 > g0 && (!w || !dst)) throw std::invalid_argument("pack_rows: null buffer");
    const size_t bb = type_block_bytes(type), pb = packed_block_bytes(type), qb = qs_bytes(type), qo = qs_offset(type);
    const int64_t nb = n_cols / block_elems(type);
    const size_t n_qs = size_t(PACK_ROWS) * qb;   // quant bytes of a packed block, before the scales
    const bool two_fp16 = has_second_fp16(type);
    const uint32_t flip = type == TYPE_Q8_0 ? 0x80808080u : 0u;   // Q8_0 stored as q + 128
    const uint8_t* src = static_cast<const uint8_t*>(w);
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t g = g0; g < g1; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* p = out + (size_t(g) * size_t(nb) + size_t(b)) * pb;
            std::memset(p, 0, pb);
            for (int64_t r = 0; r < PACK_ROWS; ++r) {
                const int64_t row_i = g * PACK_ROWS + r;
                if (row_i >= n_rows) break;   // padding rows stay zero: zero scales, zero results
                const uint8_t* blk = src + size_t(row_i) * w_row_bytes + size_t(b) * bb;
                if (packs_by_block(type)) {
                    pack_block(type, blk, r, p);
                    continue;
                }
                for (size_t j = 0; j < qb / 4; ++j) {
                    uint32_t q;
                    std::memcpy(&q, blk + qo + 4 * j, 4);
                    q ^= flip;
                    std::memcpy(p + (j * size_t(PACK_ROWS) + size_t(r)) * 4, &q, 4);
                }
                std::memcpy(p + n_qs + 2 * size_t(r), blk, 2);                                             // d
                if (two_fp16) std::memcpy(p + n_qs + 2 * size_t(PACK_ROWS) + 2 * size_t(r), blk + 2, 2);   // m | dmin
                if (type == TYPE_Q5_K) {   // qh (8, 16, 4) bytes [j][r]
                    for (size_t j = 0; j < QK_K / 32; ++j) {
                        std::memcpy(p + PACKED_Q5_K_QH + (j * size_t(PACK_ROWS) + size_t(r)) * 4, blk + Q5_K_QH_OFFSET + 4 * j, 4);
                    }
                }
                if (is_q45_K(type)) {   // sc (8, 16) bytes [s][r], then mins (4, 16, 2) bytes [k][r] = m[2k], m[2k + 1]
                    uint8_t sc[8], m[8];
                    unpack_scales_q4_K(blk + 4, sc, m);
                    for (size_t s = 0; s < 8; ++s) p[PACKED_Q4_K_SC + s * size_t(PACK_ROWS) + size_t(r)] = sc[s];
                    for (size_t s = 0; s < 8; ++s) p[PACKED_Q4_K_MIN + (s / 2 * size_t(PACK_ROWS) + size_t(r)) * 2 + s % 2] = m[s];
                }
            }
        }
    }
}

void unpack_rows(int32_t type, const void* packed, int64_t n_rows, int64_t n_cols, void* dst) {
    check_type(type, "unpack_rows");
    check_cols(type, n_cols, "unpack_rows");
    if (n_rows < 0) throw std::invalid_argument("unpack_rows: n_rows=" + std::to_string(n_rows) + " is negative");
    if (n_rows > 0 && (!packed || !dst)) throw std::invalid_argument("unpack_rows: null buffer");
    const size_t bb = type_block_bytes(type), pb = packed_block_bytes(type), qb = qs_bytes(type), qo = qs_offset(type);
    const int64_t nb = n_cols / block_elems(type);
    const size_t n_qs = size_t(PACK_ROWS) * qb, row = type_row_bytes(type, n_cols);
    const uint8_t flip = type == TYPE_Q8_0 ? 0x80 : 0x00;
    const uint8_t* in = static_cast<const uint8_t*>(packed);
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t row_i = 0; row_i < n_rows; ++row_i) {
        const int64_t g = row_i / PACK_ROWS, r = row_i % PACK_ROWS;
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* p = in + (size_t(g) * size_t(nb) + size_t(b)) * pb;
            uint8_t* blk = out + size_t(row_i) * row + size_t(b) * bb;
            if (packs_by_block(type)) {
                unpack_block(type, p, r, blk);
                continue;
            }
            std::memcpy(blk, p + n_qs + 2 * size_t(r), 2);
            if (has_second_fp16(type)) std::memcpy(blk + 2, p + n_qs + 2 * size_t(PACK_ROWS) + 2 * size_t(r), 2);
            if (type == TYPE_Q5_K) {
                for (size_t j = 0; j < QK_K / 32; ++j) {
                    std::memcpy(blk + Q5_K_QH_OFFSET + 4 * j, p + PACKED_Q5_K_QH + (j * size_t(PACK_ROWS) + size_t(r)) * 4, 4);
                }
            }
            if (is_q45_K(type)) {
                uint8_t sc[8], m[8];
                for (size_t s = 0; s < 8; ++s) sc[s] = p[PACKED_Q4_K_SC + s * size_t(PACK_ROWS) + size_t(r)];
                for (size_t s = 0; s < 8; ++s) m[s] = p[PACKED_Q4_K_MIN + (s / 2 * size_t(PACK_ROWS) + size_t(r)) * 2 + s % 2];
                pack_scales_q4_K(sc, m, blk + 4);
            }
            for (size_t j = 0; j < qb / 4; ++j) {
                const uint8_t* q = p + (j * size_t(PACK_ROWS) + size_t(r)) * 4;
                for (int k = 0; k < 4; ++k) blk[qo + 4 * j + size_t(k)] = uint8_t(q[k] ^ flip);
            }
        }
    }
}

size_t packed_act_row_bytes(int32_t type, int64_t n) {
    check_type(type, "packed_act_row_bytes");
    check_cols(type, n, "packed_act_row_bytes");
    if (is_q45_K(type)) return size_t(n / QK_K) * PACKED_ACT_Q8_K_BLOCK_BYTES;
    if (type == TYPE_IQ4_XS) return size_t(n / QK_K) * PACKED_ACT_IQ4_XS_BLOCK_BYTES;
    if (type == TYPE_Q2_K) return size_t(n / QK_K) * PACKED_ACT_Q2_K_BLOCK_BYTES;
    if (packs_by_block(type)) return size_t(n / QK_K) * PACKED_ACT_Q6_K_BLOCK_BYTES;
    return size_t(n / QK) * PACKED_ACT_BLOCK_BYTES;
}

void prepare_act_row_packed(int32_t type, const void* xq, void* dst, int64_t n) {
    check_type(type, "prepare_act_row_packed");
    check_cols(type, n, "prepare_act_row_packed");
    if (!xq || !dst) throw std::invalid_argument("prepare_act_row_packed: null buffer");
    if (is_q45_K(type)) {   // Q8_K -> qs (256,) int8, float d, int16 sums of the 8 sub-blocks of 32, zeros
        const block_q8_K* in = static_cast<const block_q8_K*>(xq);
        uint8_t* out = static_cast<uint8_t*>(dst);
        for (int64_t b = 0; b < n / QK_K; ++b, ++in, out += PACKED_ACT_Q8_K_BLOCK_BYTES) {
            std::memset(out, 0, PACKED_ACT_Q8_K_BLOCK_BYTES);
            std::memcpy(out, in->qs, QK_K);
            std::memcpy(out + QK_K, &in->d, 4);
            for (size_t s = 0; s < 8; ++s) {   // |sum| <= 32 * 128: fits int16 (the kernel's vpdpwssd)
                const int16_t sum = int16_t(in->bsums[2 * s] + in->bsums[2 * s + 1]);
                std::memcpy(out + QK_K + 4 + 2 * s, &sum, 2);
            }
        }
        return;
    }
    if (type == TYPE_Q2_K) {   // Q8_K -> qs (256,) int8, int16 bsums (16,), float d, zeros
        const block_q8_K* in = static_cast<const block_q8_K*>(xq);
        uint8_t* out = static_cast<uint8_t*>(dst);
        for (int64_t b = 0; b < n / QK_K; ++b, ++in, out += PACKED_ACT_Q2_K_BLOCK_BYTES) {
            std::memset(out, 0, PACKED_ACT_Q2_K_BLOCK_BYTES);
            std::memcpy(out, in->qs, QK_K);
            std::memcpy(out + QK_K, in->bsums, sizeof(in->bsums));
            std::memcpy(out + PACKED_ACT_Q2_K_D, &in->d, 4);
        }
        return;
    }
    if (type == TYPE_IQ4_XS) {   // Q8_K -> qs (256,) int8, int32 -128 * sums of the 8 sub-blocks of 32, float d, zeros
        const block_q8_K* in = static_cast<const block_q8_K*>(xq);
        uint8_t* out = static_cast<uint8_t*>(dst);
        for (int64_t b = 0; b < n / QK_K; ++b, ++in, out += PACKED_ACT_IQ4_XS_BLOCK_BYTES) {
            std::memset(out, 0, PACKED_ACT_IQ4_XS_BLOCK_BYTES);
            std::memcpy(out, in->qs, QK_K);
            for (size_t s = 0; s < 8; ++s) {
                const int32_t off = -128 * (int32_t(in->bsums[2 * s]) + int32_t(in->bsums[2 * s + 1]));
                std::memcpy(out + QK_K + 4 * s, &off, 4);
            }
            std::memcpy(out + PACKED_ACT_IQ4_XS_D, &in->d, 4);
        }
        return;
    }
    if (packs_by_block(type)) {   // Q8_K -> qs (256,) int8, int32 -offset * bsums (16,), float d, zeros
        const int32_t offset = type == TYPE_Q6_K ? 32 : 4;   // Q6_K's q - 32, Q3_K's q - 4
        const block_q8_K* in = static_cast<const block_q8_K*>(xq);
        uint8_t* out = static_cast<uint8_t*>(dst);
        for (int64_t b = 0; b < n / QK_K; ++b, ++in, out += PACKED_ACT_Q6_K_BLOCK_BYTES) {
            std::memset(out, 0, PACKED_ACT_Q6_K_BLOCK_BYTES);
            std::memcpy(out, in->qs, QK_K);
            for (size_t s = 0; s < QK_K / 16; ++s) {
                const int32_t off = -offset * int32_t(in->bsums[s]);
                std::memcpy(out + QK_K + 4 * s, &off, 4);
            }
            std::memcpy(out + PACKED_ACT_Q6_K_D, &in->d, 4);
        }
        return;
    }
    const bool q81 = type == TYPE_Q4_1;   // Q8_1 activations: d, s, qs; Q8_0: d, qs
    const size_t ab = q81 ? sizeof(block_q8_1) : sizeof(block_q8_0), qo = q81 ? 4 : 2;
    const uint8_t* in = static_cast<const uint8_t*>(xq);
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t b = 0; b < n / QK; ++b, in += ab, out += PACKED_ACT_BLOCK_BYTES) {
        uint16_t h[2];
        std::memcpy(h, in, 4);
        std::memcpy(out, in + qo, QK);
        const float d = half_to_float(h[0]);
        std::memcpy(out + QK, &d, 4);
        if (q81) {
            const float s = half_to_float(h[1]);
            std::memcpy(out + QK + 4, &s, 4);
        } else {
            int32_t sum = 0;
            for (int64_t k = 0; k < QK; ++k) sum += int8_t(in[qo + size_t(k)]);
            const int32_t corr = -128 * sum;
            std::memcpy(out + QK + 4, &corr, 4);
        }
    }
}

#if !defined(STRATA_SIMD_AVX2)
packed_act_fn simd_packed_act_quantizer_for(int32_t) { return nullptr; }   // only quants-packed-avx2.cpp has one
#endif

void quantize_act_row_packed(int32_t type, const float* x, void* dst, int64_t n) {
    check_type(type, "quantize_act_row_packed");
    if (const packed_act_fn fused = simd_packed_act_quantizer_for(type)) {   // one pass, no GGUF-format row between
        check_cols(type, n, "quantize_act_row_packed");
        if (!x || !dst) throw std::invalid_argument("quantize_act_row_packed: null buffer");
        fused(x, static_cast<uint8_t*>(dst), n);
        return;
    }
    thread_local std::vector<uint8_t> xq;   // (act_row_bytes,) this thread's GGUF-format activations
    xq.resize(act_row_bytes(type, n));
    quantize_act_row(type, x, xq.data(), n);
    prepare_act_row_packed(type, xq.data(), dst, n);
}

void matmul_packed(int32_t type, const void* packed, int64_t n_rows, const void* xp, size_t xp_row_bytes,
                   int64_t n_tok, float* y, int64_t y_stride, int64_t n, int64_t r0, int64_t r1) {
    check_type(type, "matmul_packed");
    check_cols(type, n, "matmul_packed");
    if (r0 < 0 || r1 < r0 || r1 > n_rows || r0 % PACK_ROWS != 0) {
        throw std::invalid_argument("matmul_packed: row range [" + std::to_string(r0) + ", " + std::to_string(r1) +
                                    ") must lie in the " + std::to_string(n_rows) + " rows and start at a multiple of " +
                                    std::to_string(PACK_ROWS));
    }
    if (n_tok < 0) throw std::invalid_argument("matmul_packed: n_tok=" + std::to_string(n_tok) + " is negative");
    const size_t act_row = packed_act_row_bytes(type, n);
    if (n_tok > 1 && xp_row_bytes < act_row) {
        throw std::invalid_argument("matmul_packed: xp_row_bytes=" + std::to_string(xp_row_bytes) +
                                    " is less than one prepared activation row (" + std::to_string(act_row) + " bytes)");
    }
    if (n_tok > 1 && y_stride < r1) {
        throw std::invalid_argument("matmul_packed: y_stride=" + std::to_string(y_stride) + " is less than r1=" +
                                    std::to_string(r1) + " (Y is indexed by absolute row)");
    }
    if (r1 == r0 || n_tok == 0) return;
    if (!packed || !xp || !y) throw std::invalid_argument("matmul_packed: null buffer");
    simd_packed_matmul_for(type)(static_cast<const uint8_t*>(packed), n / block_elems(type), static_cast<const uint8_t*>(xp),
                                 xp_row_bytes, n_tok, y, y_stride, r0, r1);
}

}  // namespace strata
