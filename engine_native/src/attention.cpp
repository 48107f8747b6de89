// Attention of one query row over the KV cache (attention.h's attention_group) and of one long row in
// parts (attention_scores_part / _softmax_part / _values_part), with vec16 (AVX-512, AVX2 or scalar:
// the same lane arithmetic on each) over tiled K (f16 / f32) and V rows, or V read from K's tiles
// (v_in_k); the rows layout (head sizes not a multiple of 16) position by position. Each with an
// optional sliding window (only the window's K tiles and V rows are read) and per-head sink logits;
// the one tiled softmax every path shares (softmax_tiled).
//
// Not here: the KV layout and its store / rows conversions (kv-layout.cpp), groups of rows of one
// context (attention-grouped.cpp), q8_0's kernels (attention-q8.cpp), threading (the caller deals out
// the tasks).
#include "attention.h"
#include "attention-internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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
}  // namespace

// ---- entry points

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
