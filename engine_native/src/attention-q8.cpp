// q8_0 KV attention (llama.cpp's blocks: 32 int8 and an fp16 scale): K in tiles scored with exact int32
// dots against the query quantized to q8_0 (vpdpbusd where the build has AVX-512 VNNI, else a scalar
// integer loop with the same result), V in rows widened once per position for all query heads.
//
// Not here: the layout's store / rows conversions and the entry points (attention.cpp), threading.
#include <algorithm>
#include <cmath>

#include "attention-internal.h"
#include "quants.h"
#include "vec16.h"

namespace strata::attn_detail {

namespace {

inline float half_bits_to_float(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h);   // exact, as fp16_to_fp32
#else
    return fp16_to_fp32(h);
#endif
}

void quantize_query(const float* x, int64_t hd, int8_t* qs, float* d, int32_t* bias) {
    for (int64_t b = 0; b < hd / k_qk; b++) {
        const float* xb = x + b * k_qk;
        float amax = 0.0f;
        for (int j = 0; j < k_qk; j++) amax = std::fmax(amax, std::fabs(xb[j]));
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < k_qk; j++) {
            const int32_t v = int32_t(std::nearbyint(xb[j] * id));   // |v| <= 127 (x * id <= amax * 127 / amax)
            qs[b * k_qk + j] = int8_t(v);
            sum += v;
        }
        d[b] = db;
        bias[b] = -128 * sum;
    }
}

// The 16 positions' exact int32 dots of one tile block with one query block
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
inline __m512i dpbusd_bcast(__m512i acc, __m512i k, const int8_t* q4) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(k), "m"(*reinterpret_cast<const int32_t*>(q4)));
    return acc;
}
#endif

inline v16 tile_block_dots(const uint8_t* tb, const int8_t* q, int32_t bias) {
    int32_t acc[k_tile];
    for (int r = 0; r < k_tile; r++) {
        int32_t s = bias;
        for (int j = 0; j < k_qk / 4; j++)
            for (int i = 0; i < 4; i++) s += int32_t(tb[j * 64 + r * 4 + i]) * int32_t(q[4 * j + i]);
        acc[r] = s;
    }
    float f[k_tile];
    for (int r = 0; r < k_tile; r++) f[r] = float(acc[r]);   // exact: |dot| <= 32 * 127 * 127 < 2^24
    return v16_load(f);
}

// scores[h][t] for NH heads over whole tiles [tile0, tile1) of kv head g (nb blocks per head)
template <int NH>
void scores_q8_tiled(const uint8_t* k, size_t tile_bytes, int64_t g, int64_t nb, const q8_query& qq, int64_t h0,
                     int64_t tile0, int64_t tile1, float scale, float* scores, int64_t n_pad) {
    const v16 vs = v16_set1(scale);
    const size_t head_bytes = size_t(nb) * k_q8_tile_block;
    for (int64_t tile = tile0; tile < tile1; tile++) {
        const uint8_t* base = k + size_t(tile) * tile_bytes + size_t(g) * head_bytes;
        if (tile + k_prefetch_tiles < tile1) prefetch_bytes(base + k_prefetch_tiles * tile_bytes, head_bytes);
        v16 sf[NH];
        for (int h = 0; h < NH; h++) sf[h] = v16_zero();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t* tb = base + b * k_q8_tile_block;
            const v16 dk = v16_load(reinterpret_cast<const uint16_t*>(tb + k_q8_scales));
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
            __m512i kv[8];
            for (int j = 0; j < 8; j++) kv[j] = _mm512_loadu_si512(tb + 64 * j);
            for (int h = 0; h < NH; h++) {
                const int8_t* q = qq.qs[h0 + h] + b * k_qk;
                __m512i acc = _mm512_set1_epi32(qq.bias[h0 + h][b]);
                for (int j = 0; j < 8; j++) acc = dpbusd_bcast(acc, kv[j], q + 4 * j);
                const v16 dot{_mm512_cvtepi32_ps(acc)};
                sf[h] = v16_fma(dot, v16_mul(dk, v16_set1(qq.d[h0 + h][b])), sf[h]);
            }
#else
            for (int h = 0; h < NH; h++) {
                const v16 dot = tile_block_dots(tb, qq.qs[h0 + h] + b * k_qk, qq.bias[h0 + h][b]);
                sf[h] = v16_fma(dot, v16_mul(dk, v16_set1(qq.d[h0 + h][b])), sf[h]);
            }
#endif
        }
        for (int h = 0; h < NH; h++) v16_store(scores + (h0 + h) * n_pad + tile * k_tile, v16_mul(sf[h], vs));
    }
}

// 16 int8 as floats
inline v16 v16_load_s8(const uint8_t* p) {
#if defined(STRATA_V16_AVX512)
    return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
#elif defined(STRATA_V16_AVX2)
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(x, 8)))};
#else
    v16 r;
    for (int i = 0; i < 16; i++) r.f[i] = float(int8_t(p[i]));
    return r;
#endif
}

// out[h][b0 * 32 ..] of NH heads over NB blocks from b0 of the kv head's V rows (first = the kv head's
// byte offset in a row): acc = fma(p[h][t] * d_v, v_q, acc) in position order, then times inv_sum.
template <int NH, int NB>
void values_q8(const uint8_t* v, size_t row_bytes, size_t first, int64_t b0, const float* p, int64_t n_pad,
               int64_t n_pos, const float* inv_sum, int64_t hd, float* out) {
    v16 acc[NH][2 * NB];
    for (int h = 0; h < NH; h++)
        for (int c = 0; c < 2 * NB; c++) acc[h][c] = v16_zero();
    const size_t off = first + size_t(b0) * k_q8_block;
    for (int64_t t = 0; t < n_pos; t++) {
        const uint8_t* row = v + size_t(t) * row_bytes + off;
        if (t + k_prefetch_rows < n_pos) prefetch_bytes(row + k_prefetch_rows * row_bytes, NB * k_q8_block);
        for (int b = 0; b < NB; b++) {
            const uint8_t* blk = row + b * k_q8_block;
            const float d = half_bits_to_float(blk);
            const v16 x0 = v16_load_s8(blk + 2), x1 = v16_load_s8(blk + 18);
            for (int h = 0; h < NH; h++) {
                const v16 w = v16_set1(p[h * n_pad + t] * d);
                acc[h][2 * b] = v16_fma(w, x0, acc[h][2 * b]);
                acc[h][2 * b + 1] = v16_fma(w, x1, acc[h][2 * b + 1]);
            }
        }
    }
    for (int h = 0; h < NH; h++) {
        const v16 inv = v16_set1(inv_sum[h]);
        for (int c = 0; c < 2 * NB; c++) v16_store(out + h * hd + b0 * k_qk + c * 16, v16_mul(acc[h][c], inv));
    }
}

template <int NB>
void values_q8_heads(const uint8_t* v, size_t row_bytes, size_t first, int64_t b0, const float* p, int64_t n_pad,
                     int64_t n_pos, const float* inv_sum, int64_t n_heads, int64_t hd, float* out) {
    constexpr int G = NB >= 4 ? 2 : 4;   // accumulators G * 2 * NB <= 16 vectors
    int64_t h = 0;
    for (; h + G <= n_heads; h += G)
        values_q8<G, NB>(v, row_bytes, first, b0, p + h * n_pad, n_pad, n_pos, inv_sum + h, hd, out + h * hd);
    // the last heads in one pass over V too (3 query heads per kv head: one pass, not three)
    const float* ph = p + h * n_pad;
    switch (n_heads - h) {
        case 1: values_q8<1, NB>(v, row_bytes, first, b0, ph, n_pad, n_pos, inv_sum + h, hd, out + h * hd); break;
        case 2: values_q8<2, NB>(v, row_bytes, first, b0, ph, n_pad, n_pos, inv_sum + h, hd, out + h * hd); break;
        case 3: values_q8<3, NB>(v, row_bytes, first, b0, ph, n_pad, n_pos, inv_sum + h, hd, out + h * hd); break;
        default: break;   // 0 (G = 2 leaves at most 1)
    }
}

}  // namespace

const q8_query& quantize_queries(const float* q, int64_t n_rep, int64_t hd) {
    thread_local q8_query qq;   // 17 KiB
    for (int64_t h = 0; h < n_rep; h++) quantize_query(q + h * hd, hd, qq.qs[h], qq.d[h], qq.bias[h]);
    return qq;
}

void scores_q8_heads(const kv_layout& L, const uint8_t* k, const q8_query& qq, int64_t g, int64_t n_rep,
                     int64_t tile0, int64_t tile1, int64_t n_pad, float scale, float* scores) {
    const int64_t nb = L.head_dim / k_qk;
    const size_t tile_bytes = size_t(k_tile) * L.row_bytes;
    for (int64_t h0 = 0; h0 < n_rep; h0 += 4) {
        switch (std::min<int64_t>(4, n_rep - h0)) {
            case 1: scores_q8_tiled<1>(k, tile_bytes, g, nb, qq, h0, tile0, tile1, scale, scores, n_pad); break;
            case 2: scores_q8_tiled<2>(k, tile_bytes, g, nb, qq, h0, tile0, tile1, scale, scores, n_pad); break;
            case 3: scores_q8_tiled<3>(k, tile_bytes, g, nb, qq, h0, tile0, tile1, scale, scores, n_pad); break;
            default: scores_q8_tiled<4>(k, tile_bytes, g, nb, qq, h0, tile0, tile1, scale, scores, n_pad); break;
        }
    }
}

void values_q8_all(const kv_layout& L, const uint8_t* v, int64_t g, int64_t n_rep, const float* p, int64_t n_pad,
                   int64_t n_pos, const float* inv_sum, float* out) {
    const int64_t hd = L.head_dim, nb = hd / k_qk;
    const size_t first = size_t(g * nb) * k_q8_block;
    switch (nb) {
        case 1: values_q8_heads<1>(v, L.row_bytes, first, 0, p, n_pad, n_pos, inv_sum, n_rep, hd, out); break;
        case 2: values_q8_heads<2>(v, L.row_bytes, first, 0, p, n_pad, n_pos, inv_sum, n_rep, hd, out); break;
        case 4: values_q8_heads<4>(v, L.row_bytes, first, 0, p, n_pad, n_pos, inv_sum, n_rep, hd, out); break;
        default:   // each block's lanes alone: the same chains as above
            for (int64_t b = 0; b < nb; b++)
                values_q8_heads<1>(v, L.row_bytes, first, b, p, n_pad, n_pos, inv_sum, n_rep, hd, out);
    }
}

void attention_q8_tiled(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t g,
                        int64_t n_rep, int64_t n_pos, float scale, float* out, float* scores) {
    const int64_t n_tiles = (n_pos + k_tile - 1) / k_tile, n_pad = n_tiles * k_tile;
    scores_q8_heads(L, k, quantize_queries(q, n_rep, L.head_dim), g, n_rep, 0, n_tiles, n_pad, scale, scores);
    float inv_sum[k_max_rep];   // n_rep <= k_max_rep (checked by kv_layout_make's caller)
    for (int64_t h = 0; h < n_rep; h++) inv_sum[h] = softmax_tiled(scores + h * n_pad, n_pos, n_pad);
    values_q8_all(L, v, g, n_rep, scores, n_pad, n_pos, inv_sum, out);
}

}  // namespace strata::attn_detail
