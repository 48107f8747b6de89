// Row-interleaved ("packed") copies of Q4_1, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K and IQ4_XS weight
// matrices and the products over them, for AVX-512 VNNI builds (AVX2 builds: Q4_1, Q8_0, IQ4_NL, Q4_K, Q5_K and
// Q6_K, 8 rows a vector and maddubs for vpdpbusd: quants-packed-avx2.cpp): one 512-bit load gives, in int32 lane r, four quant bytes of row r of a
// group of 16 rows, so a block's dot products for 16 rows come out of 8 vpdpbusd per token, lane r
// accumulating row r block after block (no horizontal reduce), the weight unpack shared by up to 8
// tokens.
//
// Not here: the GGUF-layout products (quants.h), which every other build, type and caller keeps
// using; threading (callers split rows, in multiples of PACK_ROWS). The model keeps its GGUF
// data (embedding lookups, the CUDA backend, snapshots read it); a packed copy is extra memory.
//
// Layout of a packed matrix: groups of PACK_ROWS rows (the last padded with zero rows), each group
// n / QK blocks of packed_block_bytes(type) (QK = 32 for Q4_1 / Q8_0 / IQ4_NL, else 256), block b of group g
// holding block b of rows 16g..16g+15:
//   Q4_1 (320 bytes): qs (4, 16, 4) bytes: [j][r] = qs[4j .. 4j + 3] of row r (nibbles as GGUF:
//        low = elements 4j..4j+3, high = elements 16 + 4j..); d (16,) fp16; m (16,) fp16.
//   Q8_0 (544 bytes): qs (8, 16, 4) bytes: [j][r] = qs[4j .. 4j + 3] of row r, each + 128
//        (stored unsigned: byte ^ 0x80); d (16,) fp16.
//   IQ4_NL (288 bytes): Q4_1's qs (4, 16, 4) (nibbles: table indices); d (16,) fp16.
//   Q4_K (2368 bytes, one super-block of 256): qs (32, 16, 4) bytes: [j][r] = qs[4j .. 4j + 3] of
//        row r (nibbles as GGUF: low = sub-block 2(j / 8), high = 2(j / 8) + 1, elements 4(j % 8)..);
//        d (16,) fp16; dmin (16,) fp16; sc (8, 16) bytes: [s][r] = 6-bit scale of sub-block s of
//        row r; m (4, 16, 2) bytes: [k][r] = mins of sub-blocks 2k, 2k + 1 of row r.
//   Q5_K (2880 bytes): Q4_K's 2368, then qh (8, 16, 4) bytes: [j][r] = qh[4j .. 4j + 3] of row r
//        (bit s of qh[l]: the fifth bit of sub-block s's element l).
//   Q6_K (3360 bytes, one super-block of 256): ql (32, 16, 4) bytes: [j][r] = ql[4j .. 4j + 3] of
//        row r; qh (16, 16, 4) bytes: [j][r] = qh[4j .. 4j + 3] of row r; sc (16, 16) int8:
//        [s][r] = scale of sub-block s (16 elements) of row r; d (16,) fp16.
//   Q3_K (1824 bytes): qs (16, 16, 4) bytes: [j][r] = qs[4j .. 4j + 3] of row r; hmask (8, 16, 4) bytes:
//        [j][r] = hmask[4j .. 4j + 3] of row r; sc (16, 16) int8: [s][r] = sc - 32 of sub-block s of row
//        r (the 6-bit scales unpacked); d (16,) fp16.
//   Q2_K (1344 bytes): qs (16, 16, 4) bytes: [j][r] = qs[4j .. 4j + 3] of row r; sc (8, 16, 2) bytes:
//        [k][r] = scales[2k], scales[2k + 1] of row r (4-bit scale low, 4-bit min high); d (16,) fp16;
//        dmin (16,) fp16.
//   IQ4_XS (2208 bytes): qs (32, 16, 4) bytes: [j][r] = qs[4j .. 4j + 3] of row r; sc (8, 16) int8:
//        [s][r] = ls - 32 of sub-block s (32 elements) of row r; d (16,) fp16.
// Q4_1 / Q8_0 / IQ4_NL / Q6_K / Q2_K: the same bytes as the GGUF rows, rearranged: as large as the source
// (+ padding). Q3_K: its 12 bytes of 6-bit scales unpacked to 16: 1824 / 1760 bytes, +3.6%; IQ4_XS its 6
// bytes of 6-bit scales to 8: 2208 / 2176 bytes, +1.5%.
// Q4_K: its 12 bytes of 6-bit scales / mins unpacked to 16: 2368 / 2304 bytes, +2.8%; Q5_K the
// same: 2880 / 2816 bytes, +2.3%.
//
// Activations: each row of quantize_act_row's output (Q8_1 for Q4_1, Q8_0 for Q8_0 and IQ4_NL) is prepared
// into blocks of 40 bytes: qs (32,) int8, float d, then float s (Q8_1's d * sum) for Q4_1 or int32
// -128 * sum(qs) for Q8_0 and IQ4_NL (removes the +128 of the weights exactly; IQ4_NL's table values are
// looked up + 128). The floats are the fp16 values of the source block, widened, so the products see the
// same numbers as the GGUF path.
// Q4_K's and Q5_K's Q8_K rows are prepared per super-block into 288 bytes: qs (256,) int8, float d, int16
// sums of the 8 sub-blocks of 32 (bsums added in pairs, exact), 12 zero bytes. Q6_K's into 336
// bytes: qs (256,) int8, int32 -32 * bsums (16,) (the q - 32 offset, exact), float d, 12 zero bytes;
// Q3_K's the same with -4 * bsums (its q - 4). Q2_K's into 320 bytes: qs (256,) int8, int16 bsums (16,),
// float d, 28 zero bytes. IQ4_XS's into 320 bytes: qs (256,) int8, int32 -128 * the sums of the 8
// sub-blocks of 32 (its table values are looked up + 128), float d, 28 zero bytes.
//
// Bitwise rule (as quants.h): a (token, row) result is the same float whatever n_tok, the row range
// or the token tiling; it is NOT the GGUF-layout kernels' float (the block sums are added in
// another order), only equal to the scalar reference within the products' tolerance.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata {

constexpr int64_t PACK_ROWS = 16;              // rows interleaved in one group
constexpr size_t PACKED_ACT_BLOCK_BYTES = 40;   // one prepared activation block (Q4_1, Q8_0)
constexpr size_t PACKED_ACT_Q8_K_BLOCK_BYTES = 288;   // one prepared Q8_K super-block (Q4_K, Q5_K)
// Q4_K packed block: where its parts start (layout above) and its size
constexpr size_t PACKED_Q4_K_D = 2048, PACKED_Q4_K_DMIN = 2080, PACKED_Q4_K_SC = 2112, PACKED_Q4_K_MIN = 2240;
constexpr size_t PACKED_Q4_K_BLOCK_BYTES = 2368;
// Q5_K packed block: Q4_K's parts at the same offsets, then qh; its size
constexpr size_t PACKED_Q5_K_QH = 2368, PACKED_Q5_K_BLOCK_BYTES = 2880;
constexpr size_t PACKED_ACT_Q6_K_BLOCK_BYTES = 336;   // one prepared Q8_K super-block (Q6_K)
constexpr size_t PACKED_ACT_Q6_K_D = 320;             // where its float d starts (offsets at 256)
// Q6_K packed block: where its parts start (layout above) and its size (16 x 210: no growth)
constexpr size_t PACKED_Q6_K_QH = 2048, PACKED_Q6_K_SC = 3072, PACKED_Q6_K_D = 3328;
constexpr size_t PACKED_Q6_K_BLOCK_BYTES = 3360;
// Q3_K packed block (prepared activations: Q6_K's 336 bytes, with -4 * bsums): parts and size
constexpr size_t PACKED_Q3_K_HMASK = 1024, PACKED_Q3_K_SC = 1536, PACKED_Q3_K_D = 1792;
constexpr size_t PACKED_Q3_K_BLOCK_BYTES = 1824;
// Q2_K packed block (16 x 84: no growth) and its prepared Q8_K super-block: parts and sizes
constexpr size_t PACKED_Q2_K_SC = 1024, PACKED_Q2_K_D = 1280, PACKED_Q2_K_DMIN = 1312;
constexpr size_t PACKED_Q2_K_BLOCK_BYTES = 1344;
constexpr size_t PACKED_ACT_Q2_K_BLOCK_BYTES = 320, PACKED_ACT_Q2_K_D = 288;
// IQ4_XS packed block and its prepared Q8_K super-block: parts and sizes
constexpr size_t PACKED_IQ4_XS_SC = 2048, PACKED_IQ4_XS_D = 2176;
constexpr size_t PACKED_IQ4_XS_BLOCK_BYTES = 2208;
constexpr size_t PACKED_ACT_IQ4_XS_BLOCK_BYTES = 320, PACKED_ACT_IQ4_XS_D = 288;

// The kernel files' view of a packed block of 32 (Q4_1, Q8_0, IQ4_NL), one definition for the AVX2 and the
// AVX-512 products (quants-packed-avx2.cpp, quants-packed-avx512.cpp): QV quant vectors of 64 bytes
// (16 rows x 4 bytes), then 16 fp16 d (Q4_1: then 16 fp16 m); BLOCK is packed_block_bytes of the type.
// The super-block kinds (Q4_K, Q5_K, Q6_K) have their own block constants above.
enum packed_kind { PACKED_Q4_1, PACKED_Q8_0, PACKED_IQ4_NL, PACKED_Q4_K, PACKED_Q5_K, PACKED_Q6_K };
template <int KIND>
struct packed_format {
    static constexpr bool NIBBLES = KIND != PACKED_Q8_0;
    static constexpr bool HAS_MIN = KIND == PACKED_Q4_1;
    static constexpr int QV = NIBBLES ? 4 : 8;                             // 64-byte quant vectors a block
    static constexpr size_t QS = size_t(QV) * 64;                          // quant bytes, then scales
    static constexpr size_t BLOCK = QS + (HAS_MIN ? 64 : 32);              // + 16 fp16 d (+ 16 fp16 m)
};

// True when this build has packed products for `type` (Q4_1, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K,
// IQ4_XS in an AVX-512 VNNI build; Q4_1, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K in an AVX2 one).
bool packed_supported(int32_t type);
// Bytes of one packed block of 16 rows, and of a whole packed (n_rows, n_cols) matrix.
size_t packed_block_bytes(int32_t type);
size_t packed_bytes(int32_t type, int64_t n_rows, int64_t n_cols);

// Packs groups [g0, g1) of the (n_rows, n_cols) GGUF matrix w (rows w_row_bytes apart) into dst,
// a buffer of packed_bytes() (group g at g * (n_cols / 32) * packed_block_bytes()); groups may be
// packed concurrently. Padding rows (>= n_rows) are zero bytes. Throws std::invalid_argument on a
// type without packed products or bad sizes.
void pack_rows(int32_t type, const void* w, size_t w_row_bytes, int64_t n_rows, int64_t n_cols, void* dst,
               int64_t g0, int64_t g1);
// The inverse: the n_rows GGUF rows (type_row_bytes apart) back from a packed matrix (tests).
void unpack_rows(int32_t type, const void* packed, int64_t n_rows, int64_t n_cols, void* dst);

// Prepared activation rows: bytes of one row of n elements, preparation of one quantize_act_row
// row (xq) into dst, and both steps at once from floats.
size_t packed_act_row_bytes(int32_t type, int64_t n);
void prepare_act_row_packed(int32_t type, const void* xq, void* dst, int64_t n);
void quantize_act_row_packed(int32_t type, const float* x, void* dst, int64_t n);

// Y[t * y_stride + r] = dot(W[r], X[t]) for tokens t < n_tok and rows r0 <= r < r1 (absolute row
// index, as quants.h's matmul; y_stride >= r1 when n_tok > 1). W is a packed (n_rows, n) matrix,
// X prepared activation rows xp_row_bytes apart. r0 must be a multiple of PACK_ROWS; rows of the
// last group at or beyond r1 are computed but never stored. Disjoint row ranges may run at once.
void matmul_packed(int32_t type, const void* packed, int64_t n_rows, const void* xp, size_t xp_row_bytes,
                   int64_t n_tok, float* y, int64_t y_stride, int64_t n, int64_t r0, int64_t r1);

}  // namespace strata
