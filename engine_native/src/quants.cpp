// The public side of quants.h: the type table (names, block sizes, activation formats), argument
// checks that throw std::invalid_argument naming the problem, and dispatch of matvec / matmul to the
// build's SIMD table or to the scalar reference.
//
// Not here: any arithmetic on blocks (quants-generic.cpp, quants-avx512.cpp, quants-avx2.cpp).
#include "quants.h"

#include <stdexcept>
#include <string>

#include "quants-blocks.h"
#include "quants-kernels.h"

namespace strata {
namespace {

struct type_info {
    int32_t type;
    const char* name;
    int64_t block_size;    // elements per block
    size_t block_bytes;
    int32_t act_type;      // activation format of its dot product; -1: not a weight type
};

constexpr type_info TYPE_TABLE[] = {
    {TYPE_F32, "F32", 1, 4, TYPE_F32},
    {TYPE_F16, "F16", 1, 2, TYPE_F32},
    {TYPE_BF16, "BF16", 1, 2, TYPE_F32},
    {TYPE_Q4_0, "Q4_0", QK4_0, sizeof(block_q4_0), TYPE_Q8_0},
    {TYPE_Q4_1, "Q4_1", QK4_1, sizeof(block_q4_1), TYPE_Q8_1},
    {TYPE_Q5_0, "Q5_0", QK5_0, sizeof(block_q5_0), TYPE_Q8_0},
    {TYPE_Q5_1, "Q5_1", QK5_1, sizeof(block_q5_1), TYPE_Q8_1},
    {TYPE_Q8_0, "Q8_0", QK8_0, sizeof(block_q8_0), TYPE_Q8_0},
    {TYPE_Q8_1, "Q8_1", QK8_1, sizeof(block_q8_1), -1},
    {TYPE_Q2_K, "Q2_K", QK_K, sizeof(block_q2_K), TYPE_Q8_K},
    {TYPE_Q3_K, "Q3_K", QK_K, sizeof(block_q3_K), TYPE_Q8_K},
    {TYPE_Q4_K, "Q4_K", QK_K, sizeof(block_q4_K), TYPE_Q8_K},
    {TYPE_Q5_K, "Q5_K", QK_K, sizeof(block_q5_K), TYPE_Q8_K},
    {TYPE_Q6_K, "Q6_K", QK_K, sizeof(block_q6_K), TYPE_Q8_K},
    {TYPE_Q8_K, "Q8_K", QK_K, sizeof(block_q8_K), -1},
    {TYPE_IQ4_NL, "IQ4_NL", QK4_NL, sizeof(block_iq4_nl), TYPE_Q8_0},
    {TYPE_IQ4_XS, "IQ4_XS", QK_K, sizeof(block_iq4_xs), TYPE_Q8_K},
    {TYPE_MXFP4, "MXFP4", QK_MXFP4, sizeof(block_mxfp4), TYPE_Q8_0},
};

const type_info* find_type(int32_t type) {
    for (const type_info& t : TYPE_TABLE) {
        if (t.type == type) return &t;
    }
    return nullptr;
}

std::string describe(int32_t type) {
    const type_info* t = find_type(type);
    return t ? std::string(t->name) + " (" + std::to_string(type) + ")" : "unknown type id " + std::to_string(type);
}

const type_info& known_type(int32_t type, const char* what) {
    const type_info* t = find_type(type);
    if (!t) throw std::invalid_argument(std::string(what) + ": " + describe(type));
    return *t;
}

const type_info& weight_type_info(int32_t type, const char* what) {
    const type_info& t = known_type(type, what);
    if (t.act_type < 0) {
        throw std::invalid_argument(std::string(what) + ": " + describe(type) + " is not a supported weight type");
    }
    return t;
}

void check_row_length(const type_info& t, int64_t n, const char* what) {
    if (n <= 0 || n % t.block_size != 0) {
        throw std::invalid_argument(std::string(what) + ": row length n=" + std::to_string(n) + " must be a positive multiple of " +
                                    t.name + "'s block size " + std::to_string(t.block_size));
    }
}

// Shared checks of matvec / matmul; returns the bytes of one weight row.
void check_product(const char* what, const type_info& t, const void* w, size_t w_row_bytes, const void* xq,
                   const float* y, int64_t n, int64_t r0, int64_t r1) {
    check_row_length(t, n, what);
    if (r0 < 0 || r1 < r0) {
        throw std::invalid_argument(std::string(what) + ": bad row range [" + std::to_string(r0) + ", " + std::to_string(r1) + ")");
    }
    const size_t row = size_t(n / t.block_size) * t.block_bytes;
    if (w_row_bytes < row) {
        throw std::invalid_argument(std::string(what) + ": w_row_bytes=" + std::to_string(w_row_bytes) + " is less than one " +
                                    t.name + " row of " + std::to_string(n) + " elements (" + std::to_string(row) + " bytes)");
    }
    if (r1 > r0 && (!w || !xq || !y)) throw std::invalid_argument(std::string(what) + ": null buffer");
}

}  // namespace

const char* type_name(int32_t type) {
    const type_info* t = find_type(type);
    return t ? t->name : nullptr;
}

bool type_supported(int32_t type) {
    const type_info* t = find_type(type);
    return t && t->act_type >= 0;
}

int64_t type_block_size(int32_t type) { return known_type(type, "type_block_size").block_size; }

size_t type_block_bytes(int32_t type) { return known_type(type, "type_block_bytes").block_bytes; }

size_t type_row_bytes(int32_t type, int64_t n) {
    const type_info& t = known_type(type, "type_row_bytes");
    check_row_length(t, n, "type_row_bytes");
    return size_t(n / t.block_size) * t.block_bytes;
}

void dequantize_row(int32_t type, const void* src, float* dst, int64_t n) {
    const type_info& t = known_type(type, "dequantize_row");
    const dequant_fn f = generic_dequant_for(type);
    if (!f) throw std::invalid_argument("dequantize_row: " + describe(type) + " is not supported");
    check_row_length(t, n, "dequantize_row");
    if (!src || !dst) throw std::invalid_argument("dequantize_row: null buffer");
    f(src, dst, n);
}

int32_t act_type_for(int32_t weight_type) { return weight_type_info(weight_type, "act_type_for").act_type; }

size_t act_row_bytes(int32_t weight_type, int64_t n) {
    const type_info& w = weight_type_info(weight_type, "act_row_bytes");
    check_row_length(w, n, "act_row_bytes");
    const type_info& a = *find_type(w.act_type);
    check_row_length(a, n, "act_row_bytes");
    return size_t(n / a.block_size) * a.block_bytes;
}

void quantize_act_row(int32_t weight_type, const float* x, void* dst, int64_t n) {
    const type_info& w = weight_type_info(weight_type, "quantize_act_row");
    check_row_length(w, n, "quantize_act_row");
    if (!x || !dst) throw std::invalid_argument("quantize_act_row: null buffer");
    const quant_act_fn fast = simd_act_quantizer_for(w.act_type);
    (fast ? fast : act_quantizer_for(w.act_type))(x, dst, n);
}

void matvec(int32_t weight_type, const void* w, size_t w_row_bytes, const void* xq, float* y, int64_t n, int64_t r0,
            int64_t r1) {
    const type_info& t = weight_type_info(weight_type, "matvec");
    check_product("matvec", t, w, w_row_bytes, xq, y, n, r0, r1);
    if (r1 == r0) return;
    if (const matmul_fn fast = simd_matmul_for(weight_type)) {
        fast(w, w_row_bytes, xq, 0, 1, y, 0, n, r0, r1);
        return;
    }
    matvec_generic(weight_type, w, w_row_bytes, xq, y, n, r0, r1);
}

void matmul(int32_t weight_type, const void* w, size_t w_row_bytes, const void* xq, size_t xq_row_bytes, int64_t n_tok,
            float* y, int64_t y_stride, int64_t n, int64_t r0, int64_t r1) {
    const type_info& t = weight_type_info(weight_type, "matmul");
    check_product("matmul", t, w, w_row_bytes, xq, y, n, r0, r1);
    if (n_tok < 0) throw std::invalid_argument("matmul: n_tok=" + std::to_string(n_tok) + " is negative");
    const size_t act_row = act_row_bytes(weight_type, n);
    if (n_tok > 1 && xq_row_bytes < act_row) {
        throw std::invalid_argument("matmul: xq_row_bytes=" + std::to_string(xq_row_bytes) + " is less than one activation row (" +
                                    std::to_string(act_row) + " bytes)");
    }
    if (n_tok > 1 && y_stride < r1) {
        throw std::invalid_argument("matmul: y_stride=" + std::to_string(y_stride) + " is less than r1=" + std::to_string(r1) +
                                    " (Y is indexed by absolute row)");
    }
    if (r1 == r0 || n_tok == 0) return;
    float* y_r0 = y + r0;   // Y[t * y_stride + r] with absolute r; the kernels index from r0
    if (const matmul_fn fast = simd_matmul_for(weight_type)) {
        fast(w, w_row_bytes, xq, xq_row_bytes, n_tok, y_r0, y_stride, n, r0, r1);
        return;
    }
    const dot_fn dot = generic_dot_for(weight_type);
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    const uint8_t* xb = static_cast<const uint8_t*>(xq);
    for (int64_t tk = 0; tk < n_tok; ++tk) {
        for (int64_t r = r0; r < r1; ++r) {
            y_r0[tk * y_stride + (r - r0)] = dot(n, wb + size_t(r) * w_row_bytes, xb + size_t(tk) * xq_row_bytes);
        }
    }
}

void matvec_generic(int32_t weight_type, const void* w, size_t w_row_bytes, const void* xq, float* y, int64_t n,
                    int64_t r0, int64_t r1) {
    const type_info& t = weight_type_info(weight_type, "matvec_generic");
    check_product("matvec_generic", t, w, w_row_bytes, xq, y, n, r0, r1);
    const dot_fn dot = generic_dot_for(weight_type);
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    for (int64_t r = r0; r < r1; ++r) y[r - r0] = dot(n, wb + size_t(r) * w_row_bytes, xq);
}

float fp16_to_fp32(uint16_t h) { return half_to_float(h); }
uint16_t fp32_to_fp16(float f) { return float_to_half(f); }
float bf16_to_fp32(uint16_t h) { return bf16_to_float(h); }

const char* simd_name() { return simd_build_name(); }

}  // namespace strata
