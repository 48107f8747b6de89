// Device-side element access of every weight type the CPU backend computes with: dq<TYPE>(row, k) is
// element k of a GGUF row, in the arithmetic of quants-generic.cpp's dequant_* functions (which it
// mirrors one for one), so a tile loader or an embedding lookup can read any element directly.
//
// Not here: products (cuda-matmul.cu), KV formats (cuda-kernels.cu). Rows are only 2-byte aligned in
// VRAM (blocks of 18, 22, 34, 210 bytes), so every multi-byte field is assembled from bytes.
// Host and device: tests/gpu/dequant_check.cu runs dq<> on the host against dequantize_row (no GPU needed).
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "quants.h"   // TYPE_* ids (plain enum, no host-only code used on the device)

namespace strata {
namespace cuda_dq {

constexpr int QK = 32;       // Q4_0 .. Q8_0 block
constexpr int QK_K = 256;    // K-quant super-block

#define STRATA_HD __host__ __device__ __forceinline__

STRATA_HD float bits_to_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
}
// a * b rounded on its own: never fused with a following add, so every kernel that inlines dq<> gets
// the same float for an element whatever the compiler contracts around it (the bitwise rule).
STRATA_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
STRATA_HD uint32_t u16_at(const uint8_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 8); }
STRATA_HD uint32_t u32_at(const uint8_t* p) { return u16_at(p) | (u16_at(p + 2) << 16); }
STRATA_HD float f16_at(const uint8_t* p) { return __half2float(__ushort_as_half((unsigned short)u16_at(p))); }
STRATA_HD float bf16_at(const uint8_t* p) { return bits_to_float(u16_at(p) << 16); }

// Four bytes at an even address (every quant field dq8 reads in runs is 2-byte aligned in a row, and
// rows are), as two 16-bit loads on the device: half the load instructions of four byte loads.
STRATA_HD uint32_t u32_at_even(const uint8_t* p) {
#ifdef __CUDA_ARCH__
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return uint32_t(h[0]) | (uint32_t(h[1]) << 16);
#else
    return u32_at(p);
#endif
}
// float(v) for |v| < 2^22, exactly, in float arithmetic (an OR and a subtract on the FP32 pipe instead of
// a conversion instruction, which runs at a quarter of its rate): 1.5 * 2^23 + v has v in its low bits.
STRATA_HD float small_int_to_float(int v) { return bits_to_float(0x4B400000u + uint32_t(v)) - 12582912.0f; }
// Byte j (0..7) of the run (lo: bytes 0-3, hi: 4-7).
STRATA_HD int run_byte(uint32_t lo, uint32_t hi, int j) { return int(((j < 4 ? lo : hi) >> (8 * (j & 3))) & 0xFF); }

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes (scale_min_k4).
STRATA_HD void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

template <int TYPE>
__host__ __device__ float dq(const uint8_t* row, int64_t k);

template <>
STRATA_HD float dq<TYPE_F32>(const uint8_t* row, int64_t k) {
    return bits_to_float(u32_at(row + 4 * k));
}

template <>
STRATA_HD float dq<TYPE_F16>(const uint8_t* row, int64_t k) { return f16_at(row + 2 * k); }

template <>
STRATA_HD float dq<TYPE_BF16>(const uint8_t* row, int64_t k) { return bf16_at(row + 2 * k); }

// block_q4_0 (18 bytes): d, qs[16]; element j < 16 is qs[j] & 15, j + 16 is qs[j] >> 4; w = d * (q - 8).
template <>
STRATA_HD float dq<TYPE_Q4_0>(const uint8_t* row, int64_t k) {
    const uint8_t* b = row + (k / QK) * 18;
    const int j = int(k % QK);
    const int byte = b[2 + (j & 15)];
    const int q = j < 16 ? (byte & 0xF) : (byte >> 4);
    return float(q - 8) * f16_at(b);
}

// block_q4_1 (20 bytes): d, m, qs[16]; w = q * d + m.
template <>
STRATA_HD float dq<TYPE_Q4_1>(const uint8_t* row, int64_t k) {
    const uint8_t* b = row + (k / QK) * 20;
    const int j = int(k % QK);
    const int byte = b[4 + (j & 15)];
    const int q = j < 16 ? (byte & 0xF) : (byte >> 4);
    return mul_rn(float(q), f16_at(b)) + f16_at(b + 2);
}

// block_q5_0 (22 bytes): d, qh[4] (fifth bit j of element j), qs[16]; w = d * (q - 16).
template <>
STRATA_HD float dq<TYPE_Q5_0>(const uint8_t* row, int64_t k) {
    const uint8_t* b = row + (k / QK) * 22;
    const int j = int(k % QK);
    const int byte = b[6 + (j & 15)];
    const int q = (j < 16 ? (byte & 0xF) : (byte >> 4)) | int(((u32_at(b + 2) >> j) & 1) << 4);
    return float(q - 16) * f16_at(b);
}

// block_q5_1 (24 bytes): d, m, qh[4], qs[16]; w = q * d + m.
template <>
STRATA_HD float dq<TYPE_Q5_1>(const uint8_t* row, int64_t k) {
    const uint8_t* b = row + (k / QK) * 24;
    const int j = int(k % QK);
    const int byte = b[8 + (j & 15)];
    const int q = (j < 16 ? (byte & 0xF) : (byte >> 4)) | int(((u32_at(b + 4) >> j) & 1) << 4);
    return mul_rn(float(q), f16_at(b)) + f16_at(b + 2);
}

// block_q8_0 (34 bytes): d, qs[32]; w = qs * d.
template <>
STRATA_HD float dq<TYPE_Q8_0>(const uint8_t* row, int64_t k) {
    const uint8_t* b = row + (k / QK) * 34;
    return float(int8_t(b[2 + k % QK])) * f16_at(b);
}

// block_q4_K (144 bytes): d, dmin, scales[12], qs[128]. Element 64g + l (l < 32) is qs[32g + l] & 15 of
// sub-block 2g; 64g + 32 + l is qs[32g + l] >> 4 of sub-block 2g + 1. w = (d * sc) * q - dmin * m.
template <>
STRATA_HD float dq<TYPE_Q4_K>(const uint8_t* row, int64_t k) {
    const uint8_t* b = row + (k / QK_K) * 144;
    const int e = int(k % QK_K), g = e / 64, hi = (e % 64) >= 32, l = e % 32;
    int sc, m;
    scale_min_k4(2 * g + hi, b + 4, &sc, &m);
    const int byte = b[16 + 32 * g + l];
    const int q = hi ? (byte >> 4) : (byte & 0xF);
    return mul_rn(f16_at(b) * float(sc), float(q)) - mul_rn(f16_at(b + 2), float(m));
}

// block_q5_K (176 bytes): d, dmin, scales[12], qh[32], qs[128]; as Q4_K with bit (2g + hi) of qh[l].
template <>
STRATA_HD float dq<TYPE_Q5_K>(const uint8_t* row, int64_t k) {
    const uint8_t* b = row + (k / QK_K) * 176;
    const int e = int(k % QK_K), g = e / 64, hi = (e % 64) >= 32, l = e % 32;
    int sc, m;
    scale_min_k4(2 * g + hi, b + 4, &sc, &m);
    const int byte = b[48 + 32 * g + l];
    const int q = (hi ? (byte >> 4) : (byte & 0xF)) | (((b[16 + l] >> (2 * g + hi)) & 1) << 4);
    return mul_rn(f16_at(b) * float(sc), float(q)) - mul_rn(f16_at(b + 2), float(m));
}

// block_q6_K (210 bytes): ql[128], qh[64], scales[16] (int8), d. Element e: half h = e / 128,
// p = e % 128, quarter = p / 32, l = p % 32; low nibble from ql[64h + l (+32 for odd quarters)]
// (high nibble for quarters 2, 3), two high bits (qh[32h + l] >> 2 * quarter) & 3; w = d * sc * (q - 32).
template <>
STRATA_HD float dq<TYPE_Q6_K>(const uint8_t* row, int64_t k) {
    const uint8_t* b = row + (k / QK_K) * 210;
    const int e = int(k % QK_K), h = e / 128, p = e % 128, quarter = p >> 5, l = p & 31;
    const int low = b[64 * h + l + ((quarter & 1) ? 32 : 0)];
    const int nib = (quarter & 2) ? (low >> 4) : (low & 0xF);
    const int q = nib | (((b[128 + 32 * h + l] >> (2 * quarter)) & 3) << 4);
    return f16_at(b + 208) * float(int8_t(b[192 + e / 16])) * float(q - 32);
}

// dq8<TYPE>(row, k, out): elements k .. k + 7 of a row (k a multiple of 8), each the very float dq<TYPE>
// gives (the same expressions), with the block's scales decoded once for the eight: a run of 8 never
// straddles a 32-block, a K-quant sub-block or a Q6_K scale group. The product kernels decode weights
// this way; tests/gpu/dequant_check.cu compares it with dq<> bit for bit on the host.
template <int TYPE>
STRATA_HD void dq8(const uint8_t* row, int64_t k, float* out) {   // float types: nothing to share
    for (int j = 0; j < 8; j++) out[j] = dq<TYPE>(row, k + j);
}

// The quants of a run are read as two 32-bit words (u32_at_even) and widened with small_int_to_float;
// every float is still dq's expression (the same products and sums in the same order), so the bits are
// dq's: tests/gpu/dequant_check.cu compares them on the host.
template <>
STRATA_HD void dq8<TYPE_Q4_0>(const uint8_t* row, int64_t k, float* out) {
    const uint8_t* b = row + (k / QK) * 18;
    const int j0 = int(k % QK), sh = j0 < 16 ? 0 : 4;   // a run of 8 is all low or all high nibbles
    const float d = f16_at(b);
    const uint32_t lo = u32_at_even(b + 2 + (j0 & 15)), hi = u32_at_even(b + 6 + (j0 & 15));
    for (int j = 0; j < 8; j++) out[j] = small_int_to_float(((run_byte(lo, hi, j) >> sh) & 0xF) - 8) * d;
}

template <>
STRATA_HD void dq8<TYPE_Q4_1>(const uint8_t* row, int64_t k, float* out) {
    const uint8_t* b = row + (k / QK) * 20;
    const int j0 = int(k % QK), sh = j0 < 16 ? 0 : 4;
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint32_t lo = u32_at_even(b + 4 + (j0 & 15)), hi = u32_at_even(b + 8 + (j0 & 15));
    for (int j = 0; j < 8; j++) out[j] = mul_rn(small_int_to_float((run_byte(lo, hi, j) >> sh) & 0xF), d) + m;
}

template <>
STRATA_HD void dq8<TYPE_Q5_0>(const uint8_t* row, int64_t k, float* out) {
    const uint8_t* b = row + (k / QK) * 22;
    const int j0 = int(k % QK), sh = j0 < 16 ? 0 : 4;
    const float d = f16_at(b);
    const uint32_t qh = u32_at_even(b + 2) >> j0;
    const uint32_t lo = u32_at_even(b + 6 + (j0 & 15)), hi = u32_at_even(b + 10 + (j0 & 15));
    for (int j = 0; j < 8; j++) {
        const int q = ((run_byte(lo, hi, j) >> sh) & 0xF) | int(((qh >> j) & 1) << 4);
        out[j] = small_int_to_float(q - 16) * d;
    }
}

template <>
STRATA_HD void dq8<TYPE_Q5_1>(const uint8_t* row, int64_t k, float* out) {
    const uint8_t* b = row + (k / QK) * 24;
    const int j0 = int(k % QK), sh = j0 < 16 ? 0 : 4;
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint32_t qh = u32_at_even(b + 4) >> j0;
    const uint32_t lo = u32_at_even(b + 8 + (j0 & 15)), hi = u32_at_even(b + 12 + (j0 & 15));
    for (int j = 0; j < 8; j++) {
        const int q = ((run_byte(lo, hi, j) >> sh) & 0xF) | int(((qh >> j) & 1) << 4);
        out[j] = mul_rn(small_int_to_float(q), d) + m;
    }
}

template <>
STRATA_HD void dq8<TYPE_Q8_0>(const uint8_t* row, int64_t k, float* out) {
    const uint8_t* b = row + (k / QK) * 34;
    const int j0 = int(k % QK);
    const float d = f16_at(b);
    const uint32_t lo = u32_at_even(b + 2 + j0), hi = u32_at_even(b + 6 + j0);
    for (int j = 0; j < 8; j++) out[j] = small_int_to_float(int(int8_t(uint8_t(run_byte(lo, hi, j))))) * d;
}

template <>
STRATA_HD void dq8<TYPE_Q4_K>(const uint8_t* row, int64_t k, float* out) {
    const uint8_t* b = row + (k / QK_K) * 144;
    const int e = int(k % QK_K), g = e / 64, hi = (e % 64) >= 32, l0 = e % 32;
    int sc, m;
    scale_min_k4(2 * g + hi, b + 4, &sc, &m);
    const float ds = f16_at(b) * float(sc), dm = mul_rn(f16_at(b + 2), float(m));
    const uint32_t w0 = u32_at_even(b + 16 + 32 * g + l0), w1 = u32_at_even(b + 20 + 32 * g + l0);
    const int sh = hi ? 4 : 0;
    for (int j = 0; j < 8; j++) out[j] = mul_rn(ds, small_int_to_float((run_byte(w0, w1, j) >> sh) & 0xF)) - dm;
}

template <>
STRATA_HD void dq8<TYPE_Q5_K>(const uint8_t* row, int64_t k, float* out) {
    const uint8_t* b = row + (k / QK_K) * 176;
    const int e = int(k % QK_K), g = e / 64, hi = (e % 64) >= 32, l0 = e % 32;
    int sc, m;
    scale_min_k4(2 * g + hi, b + 4, &sc, &m);
    const float ds = f16_at(b) * float(sc), dm = mul_rn(f16_at(b + 2), float(m));
    const uint32_t q0 = u32_at_even(b + 48 + 32 * g + l0), q1 = u32_at_even(b + 52 + 32 * g + l0);
    const uint32_t h0 = u32_at_even(b + 16 + l0), h1 = u32_at_even(b + 20 + l0);
    const int sh = hi ? 4 : 0, hb = 2 * g + hi;
    for (int j = 0; j < 8; j++) {
        const int q = ((run_byte(q0, q1, j) >> sh) & 0xF) | (((run_byte(h0, h1, j) >> hb) & 1) << 4);
        out[j] = mul_rn(ds, small_int_to_float(q)) - dm;
    }
}

template <>
STRATA_HD void dq8<TYPE_Q6_K>(const uint8_t* row, int64_t k, float* out) {
    const uint8_t* b = row + (k / QK_K) * 210;
    const int e = int(k % QK_K), h = e / 128, p = e % 128, quarter = p >> 5, l0 = p & 31;
    const float dsc = f16_at(b + 208) * float(int8_t(b[192 + e / 16]));
    const uint8_t* lp = b + 64 * h + l0 + ((quarter & 1) ? 32 : 0);
    const uint32_t lo0 = u32_at_even(lp), lo1 = u32_at_even(lp + 4);
    const uint32_t hi0 = u32_at_even(b + 128 + 32 * h + l0), hi1 = u32_at_even(b + 132 + 32 * h + l0);
    const int sh = (quarter & 2) ? 4 : 0;
    for (int j = 0; j < 8; j++) {
        const int q = ((run_byte(lo0, lo1, j) >> sh) & 0xF) | (((run_byte(hi0, hi1, j) >> (2 * quarter)) & 3) << 4);
        out[j] = dsc * small_int_to_float(q - 32);
    }
}

}  // namespace cuda_dq
}  // namespace strata
