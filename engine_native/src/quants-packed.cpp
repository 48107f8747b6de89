// The portable side of quants-packed.h: argument checks (std::invalid_argument naming the problem),
// packing GGUF rows into the row-interleaved layout and back, activation preparation, and dispatch
// to the build's packed kernels (quants-packed-avx512.cpp).
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

constexpr int64_t QK = 32;   // elements per block of both packed types

// Quant bytes of one block (16 for Q4_1, 32 for Q8_0) and where they start in a GGUF block.
size_t qs_bytes(int32_t type) { return type == TYPE_Q4_1 ? QK4_1 / 2 : QK8_0; }
size_t qs_offset(int32_t type) { return type == TYPE_Q4_1 ? 4 : 2; }

void check_type(int32_t type, const char* what) {
    if (!packed_supported(type)) {
        const char* name = type_name(type);
        throw std::invalid_argument(std::string(what) + ": no packed products for type " + (name ? name : "?") + " (" +
                                    std::to_string(type) + ") in this " + simd_name() + " build");
    }
}

void check_cols(int64_t n, const char* what) {
    if (n <= 0 || n % QK != 0) {
        throw std::invalid_argument(std::string(what) + ": row length n=" + std::to_string(n) +
                                    " must be a positive multiple of 32");
    }
}

int64_t n_groups(int64_t n_rows) { return (n_rows + PACK_ROWS - 1) / PACK_ROWS; }

}  // namespace

bool packed_supported(int32_t type) {
    return (type == TYPE_Q4_1 || type == TYPE_Q8_0) && simd_packed_matmul_for(type) != nullptr;
}

size_t packed_block_bytes(int32_t type) {
    check_type(type, "packed_block_bytes");
    // quants, then 16 fp16 scales, then (Q4_1) 16 fp16 minimums
    return size_t(PACK_ROWS) * (qs_bytes(type) + 2 + (type == TYPE_Q4_1 ? 2 : 0));
}

size_t packed_bytes(int32_t type, int64_t n_rows, int64_t n_cols) {
    check_type(type, "packed_bytes");
    check_cols(n_cols, "packed_bytes");
    if (n_rows < 0) throw std::invalid_argument("packed_bytes: n_rows=" + std::to_string(n_rows) + " is negative");
    return size_t(n_groups(n_rows)) * size_t(n_cols / QK) * packed_block_bytes(type);
}

void pack_rows(int32_t type, const void* w, size_t w_row_bytes, int64_t n_rows, int64_t n_cols, void* dst, int64_t g0,
               int64_t g1) {
    check_type(type, "pack_rows");
    check_cols(n_cols, "pack_rows");
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
    const int64_t nb = n_cols / QK;
    const size_t n_qs = size_t(PACK_ROWS) * qb;   // quant bytes of a packed block, before the scales
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
                for (size_t j = 0; j < qb / 4; ++j) {
                    uint32_t q;
                    std::memcpy(&q, blk + qo + 4 * j, 4);
                    q ^= flip;
                    std::memcpy(p + (j * size_t(PACK_ROWS) + size_t(r)) * 4, &q, 4);
                }
                std::memcpy(p + n_qs + 2 * size_t(r), blk, 2);                                             // d
                if (type == TYPE_Q4_1) std::memcpy(p + n_qs + 2 * size_t(PACK_ROWS) + 2 * size_t(r), blk + 2, 2);   // m
            }
        }
    }
}

void unpack_rows(int32_t type, const void* packed, int64_t n_rows, int64_t n_cols, void* dst) {
    check_type(type, "unpack_rows");
    check_cols(n_cols, "unpack_rows");
    if (n_rows < 0) throw std::invalid_argument("unpack_rows: n_rows=" + std::to_string(n_rows) + " is negative");
    if (n_rows > 0 && (!packed || !dst)) throw std::invalid_argument("unpack_rows: null buffer");
    const size_t bb = type_block_bytes(type), pb = packed_block_bytes(type), qb = qs_bytes(type), qo = qs_offset(type);
    const int64_t nb = n_cols / QK;
    const size_t n_qs = size_t(PACK_ROWS) * qb, row = type_row_bytes(type, n_cols);
    const uint8_t flip = type == TYPE_Q8_0 ? 0x80 : 0x00;
    const uint8_t* in = static_cast<const uint8_t*>(packed);
    uint8_t* out = static_cast<uint8_t*>(dst);
    for (int64_t row_i = 0; row_i < n_rows; ++row_i) {
        const int64_t g = row_i / PACK_ROWS, r = row_i % PACK_ROWS;
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* p = in + (size_t(g) * size_t(nb) + size_t(b)) * pb;
            uint8_t* blk = out + size_t(row_i) * row + size_t(b) * bb;
            std::memcpy(blk, p + n_qs + 2 * size_t(r), 2);
            if (type == TYPE_Q4_1) std::memcpy(blk + 2, p + n_qs + 2 * size_t(PACK_ROWS) + 2 * size_t(r), 2);
            for (size_t j = 0; j < qb / 4; ++j) {
                const uint8_t* q = p + (j * size_t(PACK_ROWS) + size_t(r)) * 4;
                for (int k = 0; k < 4; ++k) blk[qo + 4 * j + size_t(k)] = uint8_t(q[k] ^ flip);
            }
        }
    }
}

size_t packed_act_row_bytes(int32_t type, int64_t n) {
    check_type(type, "packed_act_row_bytes");
    check_cols(n, "packed_act_row_bytes");
    return size_t(n / QK) * PACKED_ACT_BLOCK_BYTES;
}

void prepare_act_row_packed(int32_t type, const void* xq, void* dst, int64_t n) {
    check_type(type, "prepare_act_row_packed");
    check_cols(n, "prepare_act_row_packed");
    if (!xq || !dst) throw std::invalid_argument("prepare_act_row_packed: null buffer");
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

void quantize_act_row_packed(int32_t type, const float* x, void* dst, int64_t n) {
    check_type(type, "quantize_act_row_packed");
    thread_local std::vector<uint8_t> xq;   // (act_row_bytes,) this thread's GGUF-format activations
    xq.resize(act_row_bytes(type, n));
    quantize_act_row(type, x, xq.data(), n);
    prepare_act_row_packed(type, xq.data(), dst, n);
}

void matmul_packed(int32_t type, const void* packed, int64_t n_rows, const void* xp, size_t xp_row_bytes,
                   int64_t n_tok, float* y, int64_t y_stride, int64_t n, int64_t r0, int64_t r1) {
    check_type(type, "matmul_packed");
    check_cols(n, "matmul_packed");
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
    simd_packed_matmul_for(type)(static_cast<const uint8_t*>(packed), n / QK, static_cast<const uint8_t*>(xp),
                                 xp_row_bytes, n_tok, y, y_stride, r0, r1);
}

}  // namespace strata
