// The KV cache's memory (attention.h's kv_layout): the layout of a type and head size, one position's
// K and V stored (f32 copied, f16 rounded, q8_0 quantized as llama.cpp's quantize_row_q8_0; K into
// its tiles), and positions as rows out of and into a buffer (snapshots, kv_read / kv_write).
//
// Not here: attention over the cache (attention.cpp, attention-grouped.cpp, attention-q8.cpp).
#include "attention.h"
#include "attention-internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "quants.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace strata {

using namespace attn_detail;

namespace {

size_t elem_bytes(int32_t type) { return type == TYPE_F32 ? 4 : 2; }

// One q8_0 block (llama.cpp's quantize_row_q8_0): d = amax / 127 stored as fp16, q = round(x / d).
// AVX-512: the same bytes 16 lanes at a time (the scalar loop calls libm's fminf and fmaxf a value: the
// batched decode's K / V store cost 0.08 ms a row, 0.02 with f16): max_ps(v, m) and min_ps(v, c)
// return their second operand for a NaN v, as fmax / fmin return the number; roundscale rounds to
// nearest even as nearbyint does in the default mode.
void quantize_block_q8_0(const float* x, uint8_t* blk) {
#if defined(__AVX512F__)
    static_assert(k_qk == 32, "two vectors a block");
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const __m512 a = _mm512_max_ps(_mm512_abs_ps(x1), _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps()));
    const float amax = _mm512_reduce_max_ps(a);
#else
    float amax = 0.0f;
    for (int j = 0; j < k_qk; j++) amax = std::fmax(amax, std::fabs(x[j]));
#endif
    uint16_t dh = fp32_to_fp16(amax / 127.0f);
    float d = fp16_to_fp32(dh);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    std::memcpy(blk, &dh, 2);
    int8_t* qs = reinterpret_cast<int8_t*>(blk + 2);
#if defined(__AVX512F__)
    const __m512 vid = _mm512_set1_ps(id), hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    for (int h = 0; h < 2; h++) {
        const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(h ? x1 : x0, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512 c = _mm512_max_ps(_mm512_min_ps(r, hi), lo);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * h), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(c)));
    }
#else
    for (int j = 0; j < k_qk; j++) {
        float v = std::nearbyint(x[j] * id);
        qs[j] = int8_t(std::fmax(-127.0f, std::fmin(127.0f, v)));
    }
#endif
}

// n floats to fp16 at dst + i * stride bytes: the bits fp32_to_fp16 gives (with F16C and FMA that
// function is the same round-to-nearest-even conversion instruction, here 8 at a time).
void store_f16(const float* src, uint8_t* dst, int64_t n, size_t stride) {
    int64_t i = 0;
#if (defined(__F16C__) && defined(__FMA__)) || (defined(_MSC_VER) && defined(__AVX2__))
    alignas(16) uint16_t h[8];
    for (; i + 8 <= n; i += 8) {
        const __m128i v = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (stride == 2) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), v);
            continue;
        }
        _mm_store_si128(reinterpret_cast<__m128i*>(h), v);
        for (int j = 0; j < 8; j++) std::memcpy(dst + size_t(i + j) * stride, h + j, 2);
    }
#endif
    for (; i < n; i++) {
        const uint16_t h1 = fp32_to_fp16(src[i]);
        std::memcpy(dst + size_t(i) * stride, &h1, 2);
    }
}

void store_row(int32_t type, const float* src, uint8_t* dst, int64_t n) {
    if (type == TYPE_F32) {
        std::memcpy(dst, src, sizeof(float) * size_t(n));
    } else if (type == TYPE_F16) {
        store_f16(src, dst, n, 2);
    } else {
        for (int64_t b = 0; b < n / k_qk; b++) quantize_block_q8_0(src + b * k_qk, dst + b * (2 + k_qk));
    }
}

// Tiled K <-> rows for positions [t0, t1): TO_ROWS copies tiles into rows (kv_get_rows), else rows
// into tiles (kv_set_rows); only the destination is written. ES (element bytes) is a constant so each
// element copy is one move, not a memcpy call (snapshot save and restore speed).
// The same for q8_0 tiles (row blocks of 34 bytes)
template <bool TO_ROWS>
void tiled_copy_q8_0(const kv_layout& L, uint8_t* tiles, int64_t t0, int64_t t1, uint8_t* rows, size_t stride) {
    for (int64_t t = t0; t < t1; t++) {
        uint8_t* tile = tiles + size_t(t / k_tile) * size_t(k_tile) * L.row_bytes;
        uint8_t* row = rows + size_t(t - t0) * stride;
        for (int64_t b = 0; b < L.kv_dim / k_qk; b++) {
            if (TO_ROWS) q8_tile_to_block(tile + size_t(b) * k_q8_tile_block, t % k_tile, row + size_t(b) * k_q8_block);
            else q8_block_to_tile(row + size_t(b) * k_q8_block, tile + size_t(b) * k_q8_tile_block, t % k_tile);
        }
    }
}

template <size_t ES, bool TO_ROWS>
void tiled_copy(const kv_layout& L, uint8_t* tiles, int64_t t0, int64_t t1, uint8_t* rows, size_t stride) {
    for (int64_t t = t0; t < t1; t++) {
        uint8_t* tile = tiles + size_t(t / k_tile) * size_t(k_tile) * L.row_bytes + size_t(t % k_tile) * ES;
        uint8_t* row = rows + size_t(t - t0) * stride;
        for (int64_t j = 0; j < L.kv_dim; j++) {
            if (TO_ROWS) std::memcpy(row + size_t(j) * ES, tile + size_t(j) * k_tile * ES, ES);
            else std::memcpy(tile + size_t(j) * k_tile * ES, row + size_t(j) * ES, ES);
        }
    }
}

}  // namespace

// ---- layout

kv_layout kv_layout_make(int32_t kv_type, int64_t n_layer, int64_t n_head_kv, int64_t head_dim, bool v_in_k,
                         int64_t v_dims) {
    if (v_dims < 0 || v_dims > head_dim) {
        throw std::invalid_argument("the values' dimensions " + std::to_string(v_dims) + " must be in [0, head size " +
                                    std::to_string(head_dim) + "]");
    }
    if (v_in_k && kv_type != TYPE_F32 && kv_type != TYPE_F16) {
        throw std::invalid_argument("a KV cache whose values are its keys (multi-head latent attention) supports f16 "
                                    "and f32 only");
    }
    kv_layout L;
    L.v_in_k = v_in_k;
    L.v_dims = v_dims == 0 ? head_dim : std::min(head_dim, (v_dims + 15) / 16 * 16);
    L.type = kv_type;
    L.n_layer = n_layer;
    L.n_head_kv = n_head_kv;
    L.head_dim = head_dim;
    L.kv_dim = n_head_kv * head_dim;
    if (kv_type == TYPE_F32 || kv_type == TYPE_F16) {
        L.row_bytes = size_t(L.kv_dim) * elem_bytes(kv_type);
        L.k_tiled = head_dim % 16 == 0;
    } else if (kv_type == TYPE_Q8_0) {
        if (head_dim % k_qk != 0) {
            throw std::invalid_argument("q8_0 KV needs a head size that is a multiple of 32, this model has " +
                                        std::to_string(head_dim));
        }
        if (head_dim > k_q8_max_head_dim) {
            throw std::invalid_argument("q8_0 KV supports head sizes up to " + std::to_string(k_q8_max_head_dim) +
                                        ", this model has " + std::to_string(head_dim));
        }
        L.row_bytes = size_t(L.kv_dim / k_qk) * k_q8_block;
        L.k_tiled = true;
    } else {
        throw std::invalid_argument("unsupported KV type id " + std::to_string(kv_type));
    }
    return L;
}

size_t kv_layout::k_bytes(int64_t capacity) const {
    if (!k_tiled) return row_bytes * size_t(capacity);
    return size_t((capacity + k_tile - 1) / k_tile * k_tile) * row_bytes;
}

size_t kv_layout::v_bytes(int64_t capacity) const { return v_in_k ? 0 : row_bytes * size_t(capacity); }

size_t kv_prefix_bytes(const kv_layout& L, bool is_k, int64_t n) {
    if (!is_k && L.v_in_k) return 0;
    if (is_k && L.k_tiled) return size_t((n + k_tile - 1) / k_tile * k_tile) * L.row_bytes;
    return size_t(n) * L.row_bytes;
}

void kv_store(const kv_layout& L, uint8_t* k, uint8_t* v, int64_t pos, const float* k_row, const float* v_row) {
    if (!L.v_in_k) store_row(L.type, v_row, v + size_t(pos) * L.row_bytes, L.kv_dim);
    if (!L.k_tiled) {
        store_row(L.type, k_row, k + size_t(pos) * L.row_bytes, L.kv_dim);
        return;
    }
    if (L.type == TYPE_Q8_0) {
        uint8_t* tile = k + size_t(pos / k_tile) * size_t(k_tile) * L.row_bytes;
        alignas(4) uint8_t blk[k_q8_block];
        for (int64_t b = 0; b < L.kv_dim / k_qk; b++) {
            quantize_block_q8_0(k_row + b * k_qk, blk);
            q8_block_to_tile(blk, tile + size_t(b) * k_q8_tile_block, pos % k_tile);
        }
        return;
    }
    const size_t es = elem_bytes(L.type);
    uint8_t* tile = k + size_t(pos / k_tile) * size_t(k_tile) * L.row_bytes + size_t(pos % k_tile) * es;
    if (L.type == TYPE_F16) {
        store_f16(k_row, tile, L.kv_dim, k_tile * es);
        return;
    }
    for (int64_t j = 0; j < L.kv_dim; j++) std::memcpy(tile + size_t(j) * k_tile * es, k_row + j, 4);
}

void kv_row_to_float(const kv_layout& L, const uint8_t* row, float* out) {
    if (L.type == TYPE_F32) {
        std::memcpy(out, row, sizeof(float) * size_t(L.kv_dim));
    } else if (L.type == TYPE_F16) {
        for (int64_t j = 0; j < L.kv_dim; j++) {
            uint16_t h;
            std::memcpy(&h, row + 2 * j, 2);
            out[j] = fp16_to_fp32(h);
        }
    } else {
        for (int64_t b = 0; b < L.kv_dim / k_qk; b++) {
            const uint8_t* blk = row + size_t(b) * k_q8_block;
            uint16_t dh;
            std::memcpy(&dh, blk, 2);
            const float d = fp16_to_fp32(dh);
            const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2);
            for (int j = 0; j < k_qk; j++) out[b * k_qk + j] = d * float(qs[j]);
        }
    }
}

void kv_row_from_float(const kv_layout& L, const float* in, uint8_t* row) { store_row(L.type, in, row, L.kv_dim); }

void kv_get_rows(const kv_layout& L, const uint8_t* buf, bool is_k, int64_t t0, int64_t t1, uint8_t* dst,
                 size_t stride) {
    if (stride == 0) stride = L.row_bytes;
    if (!is_k || !L.k_tiled) {
        if (stride == L.row_bytes) {
            std::memcpy(dst, buf + size_t(t0) * L.row_bytes, size_t(t1 - t0) * L.row_bytes);
        } else {
            for (int64_t t = t0; t < t1; t++)
                std::memcpy(dst + size_t(t - t0) * stride, buf + size_t(t) * L.row_bytes, L.row_bytes);
        }
        return;
    }
    if (L.type == TYPE_Q8_0) tiled_copy_q8_0<true>(L, const_cast<uint8_t*>(buf), t0, t1, dst, stride);
    else if (L.type == TYPE_F32) tiled_copy<4, true>(L, const_cast<uint8_t*>(buf), t0, t1, dst, stride);
    else tiled_copy<2, true>(L, const_cast<uint8_t*>(buf), t0, t1, dst, stride);
}

void kv_set_rows(const kv_layout& L, uint8_t* buf, bool is_k, int64_t t0, int64_t t1, const uint8_t* src,
                 size_t stride) {
    if (stride == 0) stride = L.row_bytes;
    if (!is_k || !L.k_tiled) {
        if (stride == L.row_bytes) {
            std::memcpy(buf + size_t(t0) * L.row_bytes, src, size_t(t1 - t0) * L.row_bytes);
        } else {
            for (int64_t t = t0; t < t1; t++)
                std::memcpy(buf + size_t(t) * L.row_bytes, src + size_t(t - t0) * stride, L.row_bytes);
        }
        return;
    }
    if (L.type == TYPE_Q8_0) tiled_copy_q8_0<false>(L, buf, t0, t1, const_cast<uint8_t*>(src), stride);
    else if (L.type == TYPE_F32) tiled_copy<4, false>(L, buf, t0, t1, const_cast<uint8_t*>(src), stride);
    else tiled_copy<2, false>(L, buf, t0, t1, const_cast<uint8_t*>(src), stride);
}

}  // namespace strata
