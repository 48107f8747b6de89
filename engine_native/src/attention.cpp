// KV cache layout (tiled K, row V; f16, f32 or q8_0) and attention over it with vec16 (AVX-512, AVX2
// or scalar: the same lane arithmetic on each): one row's query heads of one kv head, or a group of
// rows of one context (a prompt piece, f16 and q8_0) sharing the K and V loads with the same per-row
// floats, or one long row in parts; each with an optional sliding window (only the window's K tiles
// and V rows are read) and per-head sink logits (attention.h).
//
// Not here: threading (the caller deals out the tasks), q8_0's kernels (attention-q8.cpp).
#include "attention.h"
#include "attention-internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "quants.h"
#include "vec16.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace strata {

using namespace attn_detail;

// One query's scores sc[0, n_pad) (n_pad = n_pos rounded up to whole tiles) -> exp(sc - max) in
// place, 0 before n_skip and past n_pos; returns 1 / their sum (plus exp(sink - max) where a sink is
// given: max then includes the sink). The one softmax of the tiled path (single rows and groups of
// rows alike; attention-q8.cpp's too). n_skip 0 and no sink: the operations of the kernels before
// windows and sinks, one for one.
float attn_detail::softmax_tiled(float* sc, int64_t n_pos, int64_t n_pad, int64_t n_skip, float sink) {
    for (int64_t t = 0; t < n_skip; t++) sc[t] = -INFINITY;       // before the row's window
    for (int64_t t = n_pos; t < n_pad; t++) sc[t] = -INFINITY;   // positions past the row's own
    v16 mx = v16_load(sc);
    for (int64_t t = k_tile; t < n_pad; t += k_tile) mx = v16_max(mx, v16_load(sc + t));
    const bool has_sink = sink > -INFINITY;
    const float m_all = has_sink ? std::fmax(v16_reduce_max(mx), sink) : v16_reduce_max(mx);
    const v16 m = v16_set1(m_all);
    v16 sum = v16_zero();
    for (int64_t t = 0; t < n_pad; t += k_tile) {
        v16 e = v16_exp(v16_sub(v16_load(sc + t), m));
        v16_store(sc + t, e);
        if (t + k_tile > n_pos || t < n_skip) {   // v16_exp clamps: masked positions set to exactly 0
            for (int64_t j = t; j < n_skip && j < t + k_tile; j++) sc[j] = 0.0f;
            for (int64_t j = std::max(n_pos, t); j < t + k_tile; j++) sc[j] = 0.0f;
            e = v16_load(sc + t);
        }
        sum = v16_add(sum, e);
    }
    float total = v16_reduce_add(sum);
    if (has_sink) {   // the sink's term: the denominator only, by the same exp as the scores'
        float es[k_tile];
        v16_store(es, v16_exp(v16_set1(sink - m_all)));
        total += es[0];
    }
    return 1.0f / total;
}

namespace {

size_t elem_bytes(int32_t type) { return type == TYPE_F32 ? 4 : 2; }

// ---- rows layout (f16 / f32 head sizes not a multiple of 16): scalar dot / axpy per position

float load_elem(int32_t type, const uint8_t* row, int64_t i) {
    if (type == TYPE_F32) {
        float f;
        std::memcpy(&f, row + 4 * i, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    return fp16_to_fp32(h);
}

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

// sc[t] := exp(sc[t] - max(sc)) in place, in position order; returns their sum (the softmax's divisor),
// plus exp(sink - max) where a sink above -INFINITY is given (max then includes the sink)
float exp_shifted(float* sc, int64_t n_pos, float sink) {
    float mx = sc[0];
    for (int64_t t = 1; t < n_pos; t++) mx = std::fmax(mx, sc[t]);
    const bool has_sink = sink > -INFINITY;
    if (has_sink) mx = std::fmax(mx, sink);
    float sum = 0.0f;
    for (int64_t t = 0; t < n_pos; t++) {
        sc[t] = std::exp(sc[t] - mx);
        sum += sc[t];
    }
    if (has_sink) sum += std::exp(sink - mx);
    return sum;
}

// Positions [w0, n_pos) only (the window), position by position: scores (n_rep, n_pos - w0)
void attention_rows(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t g,
                    int64_t n_rep, int64_t n_pos, float scale, float* out, float* scores, int64_t window,
                    const float* sinks) {
    const int64_t hd = L.head_dim, off = g * hd;
    const int64_t w0 = attention_window_start(n_pos, window), n_vis = n_pos - w0;
    for (int64_t h = 0; h < n_rep; h++) {
        const float* qh = q + h * hd;
        float* sc = scores + h * n_vis;
        for (int64_t t = 0; t < n_vis; t++) {
            const uint8_t* krow = k + size_t(w0 + t) * L.row_bytes;
            float s = 0.0f;
            for (int64_t d = 0; d < hd; d++) s = std::fma(qh[d], load_elem(L.type, krow, off + d), s);
            sc[t] = s * scale;
        }
        const float sum = exp_shifted(sc, n_vis, sinks ? sinks[h] : -INFINITY);
        float* oh = out + h * hd;
        std::fill(oh, oh + hd, 0.0f);
        for (int64_t t = 0; t < n_vis; t++) {
            const uint8_t* vrow = v + size_t(w0 + t) * L.row_bytes;
            for (int64_t d = 0; d < hd; d++) oh[d] = std::fma(sc[t], load_elem(L.type, vrow, off + d), oh[d]);
        }
        const float inv = 1.0f / sum;
        for (int64_t d = 0; d < hd; d++) oh[d] *= inv;
    }
}

// ---- tiled layout

// The loops over a block's accumulators must unroll (else GCC keeps the accumulators in memory).
#if defined(__GNUC__) || defined(__clang__)
#define STRATA_UNROLL _Pragma("GCC unroll 32")
#else
#define STRATA_UNROLL
#endif

// Query heads that share one pass over K (scores) or V (values): each head's chains are its own, so
// the block size changes no float, only how often K and V are read: n_rep 8 (Qwen3-Coder, gpt-oss)
// once instead of twice, deepseek2's 20 heads over one latent KV head once instead of five times
// (scores; 12% faster than two passes of 16 + 4 over a 576-wide head at 8,192 positions).
// AVX-512: 32 zmm, accumulators up to 24; AVX2: a v16 is two of the 16 ymm.
#if defined(STRATA_V16_AVX512)
constexpr int k_score_heads = 24;
template <int CH> constexpr int k_value_heads = CH >= 8 ? 2 : CH >= 4 ? 4 : CH >= 2 ? 12 : 20;
#else
constexpr int k_score_heads = 4;
template <int CH> constexpr int k_value_heads = CH >= 8 ? 2 : 4;
#endif

// Calls f(std::integral_constant<int, n>) for a runtime n in [1, N] (the exact block of the heads left).
template <int N, typename F>
void with_heads(int64_t n, F&& f) {
    if constexpr (N > 1) {
        if (n < N) return with_heads<N - 1>(n, f);
    }
    f(std::integral_constant<int, N>());
}

// scores[h][t] for NH heads over whole tiles [0, n_tiles): one fma per (dimension, 16 positions)
template <int NH, typename T>
void scores_tiled(const T* k, int64_t kv_dim, int64_t g, int64_t hd, const float* q, int64_t n_tiles, float scale,
                  float* scores, int64_t n_pad) {
    const v16 vs = v16_set1(scale);
    for (int64_t tile = 0; tile < n_tiles; tile++) {
        const T* base = k + (tile * kv_dim + g * hd) * k_tile;
        if (tile + k_prefetch_tiles < n_tiles) {
            prefetch_bytes(base + k_prefetch_tiles * kv_dim * k_tile, size_t(hd * k_tile) * sizeof(T));
        }
        v16 acc[NH];
        STRATA_UNROLL
        for (int h = 0; h < NH; h++) acc[h] = v16_zero();
        for (int64_t d = 0; d < hd; d++) {
            const v16 kv = v16_load(base + d * k_tile);
            STRATA_UNROLL
            for (int h = 0; h < NH; h++) acc[h] = v16_fma(v16_set1(q[h * hd + d]), kv, acc[h]);
        }
        STRATA_UNROLL
        for (int h = 0; h < NH; h++) v16_store(scores + h * n_pad + tile * k_tile, v16_mul(acc[h], vs));
    }
}

// out[d] = sum_t p[t] v[t][d] / sum for NH heads, CH chunks of 16 dimensions, sharing each V row's
// loads (every head's lanes the same chain: acc = fma(p[t], v[t][d], acc) from t = 0, then x 1 / sum)
template <int NH, int CH, typename T>
void weighted_values_heads(const T* v, int64_t kv_dim, int64_t off, const float* p, int64_t n_pad, int64_t n_pos,
                           const float* inv_sum, int64_t hd, float* out) {
    v16 acc[NH][CH];
    STRATA_UNROLL
    for (int h = 0; h < NH; h++)
        STRATA_UNROLL
        for (int c = 0; c < CH; c++) acc[h][c] = v16_zero();
    for (int64_t t = 0; t < n_pos; t++) {
        const T* row = v + t * kv_dim + off;
        if (t + k_prefetch_rows < n_pos) prefetch_bytes(row + k_prefetch_rows * kv_dim, size_t(CH * 16) * sizeof(T));
        v16 x[CH];
        STRATA_UNROLL
        for (int c = 0; c < CH; c++) x[c] = v16_load(row + c * 16);
        STRATA_UNROLL
        for (int h = 0; h < NH; h++) {
            const v16 w = v16_set1(p[h * n_pad + t]);
            STRATA_UNROLL
            for (int c = 0; c < CH; c++) acc[h][c] = v16_fma(w, x[c], acc[h][c]);
        }
    }
    for (int h = 0; h < NH; h++) {
        const v16 inv = v16_set1(inv_sum[h]);
        for (int c = 0; c < CH; c++) v16_store(out + h * hd + c * 16, v16_mul(acc[h][c], inv));
    }
}

// All n_heads heads' values of dimensions [off, off + 16 CH) in passes of k_value_heads<CH> heads (the
// rest in one pass of its own: one pass over V per block is what keeps long-history decode from
// reading V once per head)
template <int CH, typename T>
void weighted_values_group(const T* v, int64_t kv_dim, int64_t off, const float* p, int64_t n_pad, int64_t n_pos,
                           const float* inv_sum, int64_t n_heads, int64_t hd, float* out) {
    constexpr int G = k_value_heads<CH>;
    for (int64_t h = 0; h < n_heads; h += G) {
        with_heads<G>(std::min<int64_t>(G, n_heads - h), [&](auto nh) {
            weighted_values_heads<decltype(nh)::value, CH>(v, kv_dim, off, p + h * n_pad, n_pad, n_pos, inv_sum + h,
                                                           hd, out + h * hd);
        });
    }
}

// ---- values read from K's tiles (kv_layout::v_in_k): a tile holds 16 positions of each dimension side
// by side; 16 dimensions of it turned into 16 position rows give the V rows weighted_values_heads reads,
// and the chains below run over them in the same position order: the same floats.

// r[i] = dimension i's 16 positions in, r[j] = position j's 16 dimensions out
inline void transpose16(v16 r[16]) {
#if defined(STRATA_V16_AVX512)
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {   // pairs: a0 b0 a1 b1 | a4 b4 a5 b5 | ...
        t[i] = _mm512_unpacklo_ps(r[i].v, r[i + 1].v);
        t[i + 1] = _mm512_unpackhi_ps(r[i].v, r[i + 1].v);
    }
    __m512 u[16];
    for (int i = 0; i < 16; i += 4) {   // quads: a0 b0 c0 d0 | a4 b4 c4 d4 | ...
        u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    // 128-bit lanes: u[q] (q < 4) holds position q, q + 4, q + 8, q + 12 of rows 0-3; u[4 + q] of rows 4-7 ...
    for (int q = 0; q < 4; q++) {
        const __m512 lo02 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88), lo13 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xdd);
        const __m512 hi02 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
        const __m512 hi13 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xdd);
        r[q].v = _mm512_shuffle_f32x4(lo02, hi02, 0x88);        // position q
        r[q + 8].v = _mm512_shuffle_f32x4(lo02, hi02, 0xdd);    // q + 8
        r[q + 4].v = _mm512_shuffle_f32x4(lo13, hi13, 0x88);    // q + 4
        r[q + 12].v = _mm512_shuffle_f32x4(lo13, hi13, 0xdd);   // q + 12
    }
#else
    float m[16][16], c[16];
    for (int i = 0; i < 16; i++) v16_store(m[i], r[i]);
    for (int j = 0; j < 16; j++) {
        for (int i = 0; i < 16; i++) c[i] = m[i][j];
        r[j] = v16_load(c);
    }
#endif
}

#if defined(STRATA_V16_AVX512)
constexpr int k_tile_value_heads = 12;   // + 16 position rows + a weight: 29 of the 32 zmm
#else
constexpr int k_tile_value_heads = 4;
#endif

// weighted_values_heads<NH, 1> over K's tiles: dimensions [off, off + 16) (off: within the tiles' rows),
// positions [t0, t1) counted from kt's first tile, weights p[h * n_pad + t]
template <int NH, typename T>
void tile_values_heads(const T* kt, int64_t kv_dim, int64_t off, const float* p, int64_t n_pad, int64_t t0, int64_t t1,
                       const float* inv_sum, int64_t hd, float* out) {
    v16 acc[NH];
    STRATA_UNROLL
    for (int h = 0; h < NH; h++) acc[h] = v16_zero();
    const int64_t last = (t1 - 1) / k_tile;
    for (int64_t tile = t0 / k_tile; tile <= last; tile++) {
        const T* base = kt + (tile * kv_dim + off) * k_tile;
        if (tile + k_prefetch_tiles <= last) prefetch_bytes(base + k_prefetch_tiles * kv_dim * k_tile, 16 * k_tile * sizeof(T));
        v16 r[16];
        STRATA_UNROLL
        for (int i = 0; i < 16; i++) r[i] = v16_load(base + i * k_tile);
        transpose16(r);
        const float* pt = p + tile * k_tile;
        const int64_t j0 = std::max<int64_t>(0, t0 - tile * k_tile), j1 = std::min<int64_t>(k_tile, t1 - tile * k_tile);
        if (j0 == 0 && j1 == k_tile) {
            STRATA_UNROLL
            for (int j = 0; j < 16; j++)
                STRATA_UNROLL
                for (int h = 0; h < NH; h++) acc[h] = v16_fma(v16_set1(pt[h * n_pad + j]), r[j], acc[h]);
        } else {   // the window's first tile, the history's last: only the positions in [t0, t1)
            STRATA_UNROLL
            for (int j = 0; j < 16; j++) {
                if (j < j0 || j >= j1) continue;
                STRATA_UNROLL
                for (int h = 0; h < NH; h++) acc[h] = v16_fma(v16_set1(pt[h * n_pad + j]), r[j], acc[h]);
            }
        }
    }
    for (int h = 0; h < NH; h++) v16_store(out + h * hd, v16_mul(acc[h], v16_set1(inv_sum[h])));
}

// Every head's values of dimensions [off, off + n_dims) (n_dims a multiple of 16) from K's tiles
template <typename T>
void tile_values_group(const T* kt, int64_t kv_dim, int64_t off, const float* p, int64_t n_pad, int64_t t0, int64_t t1,
                       const float* inv_sum, int64_t n_heads, int64_t hd, int64_t n_dims, float* out) {
    constexpr int G = k_tile_value_heads;
    for (int64_t d = 0; d < n_dims; d += 16) {
        for (int64_t h = 0; h < n_heads; h += G) {
            with_heads<G>(std::min<int64_t>(G, n_heads - h), [&](auto nh) {
                tile_values_heads<decltype(nh)::value>(kt, kv_dim, off + d, p + h * n_pad, n_pad, t0, t1, inv_sum + h,
                                                       hd, out + h * hd + d);
            });
        }
    }
}

// scores[h][t] of the n_rep heads for the positions of tiles [tile0, tile1) (rows of n_pad floats)
template <typename T>
void scores_heads(const T* k, int64_t kv_dim, int64_t g, int64_t hd, const float* q, int64_t n_rep, int64_t tile0,
                  int64_t tile1, float scale, float* scores, int64_t n_pad) {
    const T* kt = k + tile0 * kv_dim * k_tile;
    for (int64_t h0 = 0; h0 < n_rep; h0 += k_score_heads) {
        with_heads<k_score_heads>(std::min<int64_t>(k_score_heads, n_rep - h0), [&](auto nh) {
            scores_tiled<decltype(nh)::value>(kt, kv_dim, g, hd, q + h0 * hd, tile1 - tile0, scale,
                                              scores + h0 * n_pad + tile0 * k_tile, n_pad);
        });
    }
}

// One row over its window: K from the window's first tile, V from its first position; the scores
// (n_rep, n_pad) cover the tiles from the first (position base + j at scores[h * n_pad + j]).
template <typename T>
void attention_tiled(const kv_layout& L, const T* k, const T* v, const float* q, int64_t g, int64_t n_rep,
                     int64_t n_pos, float scale, float* out, float* scores, int64_t window, const float* sinks) {
    const int64_t hd = L.head_dim, kv_dim = L.kv_dim;
    const tile_window w = tile_window_of(n_pos, window);
    const int64_t n_loc = n_pos - w.base, n_tiles = (n_loc + k_tile - 1) / k_tile, n_pad = n_tiles * k_tile;
    scores_heads(k + w.first_tile * kv_dim * k_tile, kv_dim, g, hd, q, n_rep, 0, n_tiles, scale, scores, n_pad);
    float inv_sum[k_max_rep];   // n_rep <= k_max_rep (checked by kv_layout_make's caller)
    for (int64_t h = 0; h < n_rep; h++)
        inv_sum[h] = softmax_tiled(scores + h * n_pad, n_loc, n_pad, w.w0 - w.base, sinks ? sinks[h] : -INFINITY);
    const int64_t off = g * hd, n_vis = n_pos - w.w0;
    if (L.v_in_k) {   // the values from K's tiles (v is k), positions counted from the window's first tile
        tile_values_group(k + w.first_tile * kv_dim * k_tile, kv_dim, off, scores, n_pad, w.w0 - w.base, n_pos - w.base,
                          inv_sum, n_rep, hd, L.v_dims, out);
        return;
    }
    const T* vw = v + w.w0 * kv_dim;              // V rows [w0, n_pos)
    const float* p = scores + (w.w0 - w.base);    // their weights, rows n_pad apart
    switch (hd / 16) {
        case 2: weighted_values_group<2>(vw, kv_dim, off, p, n_pad, n_vis, inv_sum, n_rep, hd, out); break;
        case 4: weighted_values_group<4>(vw, kv_dim, off, p, n_pad, n_vis, inv_sum, n_rep, hd, out); break;
        case 8: weighted_values_group<8>(vw, kv_dim, off, p, n_pad, n_vis, inv_sum, n_rep, hd, out); break;
        default:   // other sizes (deepseek2's 576): 32 dimensions at a time, all heads per pass
            for (int64_t d = 0; d < hd; d += 32) {
                if (d + 32 <= hd) weighted_values_group<2>(vw, kv_dim, off + d, p, n_pad, n_vis, inv_sum, n_rep, hd, out + d);
                else weighted_values_group<1>(vw, kv_dim, off + d, p, n_pad, n_vis, inv_sum, n_rep, hd, out + d);
            }
    }
}

// ---- groups of rows of one context (prefill chunks): the query vectors of all the rows' heads share
// each K tile's and V row's loads (a widened K vector feeds up to k_group_acc fmas, a V row up to
// k_group_acc / CH query vectors). Lanes mean what they mean in scores_tiled / weighted_values_heads
// (positions, then dimensions), and every chain runs in the same order from 0, so each query's
// scores, softmax and outputs are the same floats as attention_tiled's for its row alone.

#if defined(STRATA_V16_AVX512)
constexpr int k_group_acc = 24;   // v16 accumulators per block (32 zmm: the rest hold K / V)
#else
constexpr int k_group_acc = 6;    // AVX2: a v16 is two of the 16 ymm
#endif

// One block of NQ query vectors (qb: (NQ, HD) contiguous) over whole tiles [0, n_tiles) of f16 K:
// sc_i[tile * 16 + j] for query i at scores + i * n_pad.
template <int NQ, int HD>
void group_scores_block(const uint16_t* k, int64_t kv_dim, int64_t g, const float* qb, int64_t n_tiles, float scale,
                        float* scores, int64_t n_pad) {
    const v16 vs = v16_set1(scale);
    for (int64_t tile = 0; tile < n_tiles; tile++) {
        const uint16_t* base = k + (tile * kv_dim + g * HD) * k_tile;
        if (tile + k_prefetch_tiles < n_tiles) {
            prefetch_bytes(base + k_prefetch_tiles * kv_dim * k_tile, size_t(HD * k_tile) * sizeof(uint16_t));
        }
        v16 acc[NQ];
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++) acc[i] = v16_zero();
        for (int64_t d = 0; d < HD; d++) {
            const v16 kv = v16_load(base + d * k_tile);
            STRATA_UNROLL
            for (int i = 0; i < NQ; i++) acc[i] = v16_fma(v16_set1(qb[i * HD + d]), kv, acc[i]);
        }
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++) v16_store(scores + i * n_pad + tile * k_tile, v16_mul(acc[i], vs));
    }
}

// Blocks of NQ query vectors, then the rest by halves.
template <int NQ, int HD>
void group_scores(const uint16_t* k, int64_t kv_dim, int64_t g, const float* qb, int64_t n_q, int64_t n_tiles,
                  float scale, float* scores, int64_t n_pad) {
    int64_t i = 0;
    for (; i + NQ <= n_q; i += NQ)
        group_scores_block<NQ, HD>(k, kv_dim, g, qb + i * HD, n_tiles, scale, scores + i * n_pad, n_pad);
    if constexpr (NQ > 1) {
        if (i < n_q) {
            group_scores<NQ / 2, HD>(k, kv_dim, g, qb + i * HD, n_q - i, n_tiles, scale, scores + i * n_pad, n_pad);
        }
    }
}

// The values' chains out_i[d] = sum_{t < n_pos_i} p_i[t] v[t][d], in spans of positions that every
// query of the group sees (V rows of a span stay in L1 while each block of NQ queries passes over
// them; the accumulators wait in acc between spans: (n_q, CH * 16) floats, stored and reloaded
// exactly), then each query's own causal tail alone (a chain never takes a position past its n_pos).
template <int NQ, int CH>
void group_values_span_block(const uint16_t* v, int64_t kv_dim, int64_t off, const float* p, int64_t n_pad,
                             int64_t t0, int64_t t1, int64_t pf_end, float* acc_mem) {
    v16 acc[NQ][CH];
    STRATA_UNROLL
    for (int i = 0; i < NQ; i++)
        STRATA_UNROLL
        for (int c = 0; c < CH; c++) acc[i][c] = v16_load(acc_mem + (i * CH + c) * 16);
    const int64_t pf = t1 - t0;   // the next span's rows (only the first block of a span asks)
    for (int64_t t = t0; t < t1; t++) {
        const uint16_t* row = v + t * kv_dim + off;
        if (t + pf < pf_end) prefetch_bytes(row + pf * kv_dim, size_t(CH * 16) * sizeof(uint16_t));
        v16 x[CH];
        STRATA_UNROLL
        for (int c = 0; c < CH; c++) x[c] = v16_load(row + c * 16);
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++) {
            const v16 w = v16_set1(p[i * n_pad + t]);
            STRATA_UNROLL
            for (int c = 0; c < CH; c++) acc[i][c] = v16_fma(w, x[c], acc[i][c]);
        }
    }
    STRATA_UNROLL
    for (int i = 0; i < NQ; i++)
        STRATA_UNROLL
        for (int c = 0; c < CH; c++) v16_store(acc_mem + (i * CH + c) * 16, acc[i][c]);
}

// Blocks of NQ query vectors over [t0, t1), then the rest by halves.
template <int NQ, int CH>
void group_values_span(const uint16_t* v, int64_t kv_dim, int64_t off, const float* p, int64_t n_pad, int64_t n_q,
                       int64_t t0, int64_t t1, int64_t pf_end, float* acc_mem) {
    int64_t i = 0;
    for (; i + NQ <= n_q; i += NQ) {
        group_values_span_block<NQ, CH>(v, kv_dim, off, p + i * n_pad, n_pad, t0, t1, i == 0 ? pf_end : 0,
                                        acc_mem + i * CH * 16);
    }
    if constexpr (NQ > 1) {
        if (i < n_q) {
            group_values_span<NQ / 2, CH>(v, kv_dim, off, p + i * n_pad, n_pad, n_q - i, t0, t1, i == 0 ? pf_end : 0,
                                          acc_mem + i * CH * 16);
        }
    }
}

// One query's chain over [t0, t1) continued from acc_mem, then out = acc * inv, or (out null) the
// chain stored back to acc_mem exactly (a windowed query's head before the group's shared span).
template <int CH>
void group_values_finish(const uint16_t* v, int64_t kv_dim, int64_t off, const float* p, int64_t t0, int64_t t1,
                         float inv, float* acc_mem, float* out) {
    v16 acc[CH];
    STRATA_UNROLL
    for (int c = 0; c < CH; c++) acc[c] = v16_load(acc_mem + c * 16);
    for (int64_t t = t0; t < t1; t++) {
        const uint16_t* row = v + t * kv_dim + off;
        const v16 w = v16_set1(p[t]);
        STRATA_UNROLL
        for (int c = 0; c < CH; c++) acc[c] = v16_fma(w, v16_load(row + c * 16), acc[c]);
    }
    if (out == nullptr) {
        STRATA_UNROLL
        for (int c = 0; c < CH; c++) v16_store(acc_mem + c * 16, acc[c]);
        return;
    }
    const v16 vi = v16_set1(inv);
    STRATA_UNROLL
    for (int c = 0; c < CH; c++) v16_store(out + c * 16, v16_mul(acc[c], vi));
}

constexpr int64_t k_value_span_bytes = 32 * 1024;   // one span's V rows of one kv head (L1)

constexpr int64_t k_group_max_q = 1024;   // rows x heads of one group task (stack arrays below)

// Query vectors in row-major order (row i, head h -> i * n_rep + h). Positions below are relative to
// base, the first position of the earliest window's first tile (0 without a window): K and V are read
// from there on, and query j's scores of position base + t are at scores[j * n_pad + t]. Each query's
// softmax runs on its own row's tiles (from its window's first tile), as attention_tiled's does.
template <int CH>
void attention_rows_tiled_f16(const kv_layout& L, const uint16_t* k, const uint16_t* v, const float* q,
                              int64_t q_stride, int64_t g, int64_t n_rep, int64_t n_rows, const int64_t* n_pos_rows,
                              float scale, float* out, int64_t out_stride, float* scratch, int64_t window,
                              const float* sinks) {
    constexpr int HD = CH * 16;
    const int64_t kv_dim = L.kv_dim, n_q = n_rows * n_rep;
    int64_t max_pos = 0, base = n_pos_rows[0];
    for (int64_t i = 0; i < n_rows; i++) {
        max_pos = std::max(max_pos, n_pos_rows[i]);
        base = std::min(base, tile_window_of(n_pos_rows[i], window).base);
    }
    const int64_t n_tiles = (max_pos - base + k_tile - 1) / k_tile, n_pad = n_tiles * k_tile;
    const uint16_t* kw = k + base * kv_dim;   // tile base / 16 (base * kv_dim = tiles * kv_dim * 16)
    const uint16_t* vw = v + base * kv_dim;
    float* scores = scratch;                 // (n_q, n_pad)
    float* qb = scores + n_q * n_pad;        // (n_q, HD), then the values' accumulators (n_q, HD)
    float inv[k_group_max_q];
    int64_t n_pos[k_group_max_q], w0[k_group_max_q];   // relative to base
    float* outs[k_group_max_q];
    for (int64_t i = 0; i < n_rows; i++) {
        for (int64_t h = 0; h < n_rep; h++) {
            const int64_t j = i * n_rep + h;
            std::memcpy(qb + j * HD, q + i * q_stride + h * HD, sizeof(float) * HD);
            n_pos[j] = n_pos_rows[i] - base;
            w0[j] = attention_window_start(n_pos_rows[i], window) - base;
            outs[j] = out + i * out_stride + h * HD;
        }
    }
    group_scores<k_group_acc, HD>(kw, kv_dim, g, qb, n_q, n_tiles, scale, scores, n_pad);
    for (int64_t j = 0; j < n_q; j++) {
        const int64_t first = w0[j] / k_tile * k_tile;   // the row's first tile (base is a tile start)
        const int64_t pad_j = (n_pos[j] - first + k_tile - 1) / k_tile * k_tile;
        inv[j] = softmax_tiled(scores + j * n_pad + first, n_pos[j] - first, pad_j, w0[j] - first,
                               sinks ? sinks[j % n_rep] : -INFINITY);
    }
    constexpr int NQV = CH >= 8 ? 2 : k_group_acc / CH > 0 ? k_group_acc / CH : 1;
    constexpr int64_t span = k_value_span_bytes / (HD * int64_t(sizeof(uint16_t)));
    float* acc = qb + n_q * HD;              // (n_q, HD)
    std::fill(acc, acc + n_q * HD, 0.0f);
    // [lo, hi): the positions every query sees; each chain runs from its own w0 in position order
    int64_t lo = w0[0], hi = n_pos[0];
    for (int64_t j = 1; j < n_q; j++) {
        lo = std::max(lo, w0[j]);
        hi = std::min(hi, n_pos[j]);
    }
    if (lo >= hi) lo = hi = 0;   // no common span: each query's chain alone below
    for (int64_t j = 0; j < n_q && lo < hi; j++) {
        if (w0[j] < lo) {
            group_values_finish<CH>(vw, kv_dim, g * HD, scores + j * n_pad, w0[j], lo, 0.0f, acc + j * HD, nullptr);
        }
    }
    for (int64_t t0 = lo; t0 < hi; t0 += span) {
        const int64_t t1 = std::min(hi, t0 + span);
        group_values_span<NQV, CH>(vw, kv_dim, g * HD, scores, n_pad, n_q, t0, t1, hi, acc);
    }
    for (int64_t j = 0; j < n_q; j++) {
        const int64_t t0 = lo < hi ? hi : w0[j];
        group_values_finish<CH>(vw, kv_dim, g * HD, scores + j * n_pad, t0, n_pos[j], inv[j], acc + j * HD,
                                outs[j]);
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

bool attention_rows_grouped(const kv_layout& L) {
    return !L.v_in_k && ((L.type == TYPE_F16 && L.k_tiled && (L.head_dim == 32 || L.head_dim == 64 ||
                                                              L.head_dim == 128)) ||
                         attention_q8_grouped(L));
}

int64_t attention_group_rows(int64_t n_rep) {
    return std::max<int64_t>(2, k_attention_group_max_rows / std::max<int64_t>(1, n_rep));
}

int64_t attention_rows_scratch_floats(int64_t n_rep, int64_t n_rows, int64_t max_n_pos) {
    const int64_t n_pad = (max_n_pos + k_tile - 1) / k_tile * k_tile;
    return n_rows * n_rep * (n_pad + 2 * 128);
}

namespace {
void check_window(const char* who, int64_t window) {
    if (window < 0) {
        throw std::invalid_argument(std::string(who) + ": window " + std::to_string(window) +
                                    " is negative (0: no window, else the positions a row sees)");
    }
}
}  // namespace

void attention_row_group(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t q_stride,
                         int64_t g, int64_t n_rep, int64_t n_rows, const int64_t* n_pos, float scale, float* out,
                         int64_t out_stride, float* scratch, int64_t window, const float* sinks) {
    check_window("attention_row_group", window);
    if (n_rows < 1 || n_rep < 1 || n_rep > k_max_rep || n_rows * n_rep > k_group_max_q) {
        throw std::invalid_argument("attention_row_group: " + std::to_string(n_rows) + " rows of " +
                                    std::to_string(n_rep) + " heads (at most " + std::to_string(k_group_max_q) +
                                    " query vectors, " + std::to_string(k_max_rep) + " heads per kv head)");
    }
    if (!attention_rows_grouped(L)) {
        for (int64_t i = 0; i < n_rows; i++) {
            attention_group(L, k, v, q + i * q_stride, g, n_rep, n_pos[i], scale, out + i * out_stride, scratch, window,
                            sinks);
        }
        return;
    }
    if (L.type == TYPE_Q8_0) {
        attention_rows_q8_tiled(L, k, v, q, q_stride, g, n_rep, n_rows, n_pos, scale, out, out_stride, scratch, window,
                                sinks);
        return;
    }
    const auto* kh = reinterpret_cast<const uint16_t*>(k);
    const auto* vh = reinterpret_cast<const uint16_t*>(v);
    auto run = [&](auto ch) {
        attention_rows_tiled_f16<decltype(ch)::value>(L, kh, vh, q, q_stride, g, n_rep, n_rows, n_pos, scale, out,
                                                      out_stride, scratch, window, sinks);
    };
    switch (L.head_dim) {
        case 32: run(std::integral_constant<int, 2>()); break;
        case 64: run(std::integral_constant<int, 4>()); break;
        default: run(std::integral_constant<int, 8>()); break;
    }
}

int64_t attention_scratch_floats(int64_t n_rep, int64_t capacity) {
    return n_rep * ((capacity + k_tile - 1) / k_tile * k_tile);
}

void attention_group(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t g,
                     int64_t n_rep, int64_t n_pos, float scale, float* out, float* scores, int64_t window,
                     const float* sinks) {
    check_window("attention_group", window);
    if (L.type == TYPE_Q8_0) {
        attention_q8_tiled(L, k, v, q, g, n_rep, n_pos, scale, out, scores, window, sinks);
    } else if (!L.k_tiled) {
        attention_rows(L, k, v, q, g, n_rep, n_pos, scale, out, scores, window, sinks);
    } else if (L.type == TYPE_F16) {
        attention_tiled(L, reinterpret_cast<const uint16_t*>(k), reinterpret_cast<const uint16_t*>(v), q, g, n_rep,
                        n_pos, scale, out, scores, window, sinks);
    } else {
        attention_tiled(L, reinterpret_cast<const float*>(k), reinterpret_cast<const float*>(v), q, g, n_rep, n_pos,
                        scale, out, scores, window, sinks);
    }
}

bool attention_split_ok(const kv_layout& L) {
    return (L.type == TYPE_F16 || L.type == TYPE_Q8_0) && L.k_tiled && L.head_dim % k_attention_split_dims == 0 &&
           L.head_dim >= 32;
}

void attention_scores_part(const kv_layout& L, const uint8_t* k, const float* q, int64_t g, int64_t n_rep,
                           int64_t tile0, int64_t tile1, int64_t n_pad, float scale, float* scores) {
    if (L.type == TYPE_Q8_0) {   // each part quantizes the queries itself: the same bytes every time
        scores_q8_heads(L, k, quantize_queries(q, n_rep, L.head_dim), g, n_rep, tile0, tile1, n_pad, scale, scores);
        return;
    }
    scores_heads(reinterpret_cast<const uint16_t*>(k), L.kv_dim, g, L.head_dim, q, n_rep, tile0, tile1, scale, scores,
                 n_pad);
}

float attention_softmax_part(float* scores, int64_t n_pos, int64_t n_pad, float sink) {
    return softmax_tiled(scores, n_pos, n_pad, 0, sink);
}

void attention_values_part(const kv_layout& L, const uint8_t* v, const float* p, int64_t g, int64_t n_rep,
                           int64_t n_pos, int64_t n_pad, const float* inv_sum, int64_t d0, float* out) {
    static_assert(k_attention_split_dims == 32, "the values part runs 2 lanes of 16 dimensions (one q8_0 block)");
    if (L.type == TYPE_Q8_0) {
        // the part of d0 = 0 computes every dimension of the head, the others nothing: a 34-byte block
        // alone shares its cache lines with the next (V rows read twice), 2x slower than the head at once
        if (d0 == 0) values_q8_all(L, v, g, n_rep, p, n_pad, n_pos, inv_sum, out);
        return;
    }
    if (L.v_in_k) {   // v is k: the part's dimensions from K's tiles (none past the values' dimensions)
        if (d0 >= L.v_dims) return;
        tile_values_group(reinterpret_cast<const uint16_t*>(v), L.kv_dim, g * L.head_dim + d0, p, n_pad, 0, n_pos,
                          inv_sum, n_rep, L.head_dim, std::min<int64_t>(k_attention_split_dims, L.v_dims - d0), out + d0);
        return;
    }
    weighted_values_group<2>(reinterpret_cast<const uint16_t*>(v), L.kv_dim, g * L.head_dim + d0, p, n_pad, n_pos,
                             inv_sum, n_rep, L.head_dim, out + d0);
}

}  // namespace strata
