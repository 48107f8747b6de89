// Attention of a group of rows of one context at once (a prefill chunk's rows: attention.h's
// attention_row_group) over f16 tiled K and V rows, head sizes 32, 64 and 128: the query vectors of all
// the rows' heads share each K tile's and V row's loads, and each row's outputs are bitwise those
// attention_group gives for it alone. Dispatches q8_0 to attention-q8.cpp's grouped kernel and every
// other layout to attention_group row by row.
//
// Not here: single rows and rows in parts (attention.cpp), the KV layout (kv-layout.cpp), q8_0's
// kernels (attention-q8.cpp), threading.
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

namespace strata {

using namespace attn_detail;

namespace {

// A widened K vector feeds up to k_group_acc fmas, a V row up to k_group_acc / CH query vectors. Lanes
// mean what they mean in attention.cpp's scores_tiled / weighted_values_heads (positions, then
// dimensions), and every chain runs in the same order from 0, so each query's scores, softmax and
// outputs are the same floats as attention_tiled's for its row alone.

#if defined(STRATA_V16_AVX512)
constexpr int k_group_acc = 24;   // v16 accumulators per block (32 zmm: the rest hold K / V)
constexpr int k_value_chunk = 8;  // v16 of a V row per pass: the whole row (head 128: 8 zmm)
#else
constexpr int k_group_acc = 6;    // AVX2: a v16 is two of the 16 ymm
// AVX2 passes over a V span one v16 of the row at a time for k_group_acc queries (12 ymm of chains,
// 2 of V, 1 weight): whole rows of 2 queries at head 128 (32 ymm) spilled every chain to the stack,
// and 1 query at head 64 widened each V row once per query.
constexpr int k_value_chunk = 1;
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
    // CB v16 of each row per pass, the passes one after another: each chain still takes the span's
    // positions in order, so the chunking changes no float
    constexpr int CB = CH < k_value_chunk ? CH : k_value_chunk;
    static_assert(CH % CB == 0, "a V row is whole chunks");
    const int64_t pf = t1 - t0;   // the next span's rows (only the first block of a span asks)
    for (int c0 = 0; c0 < CH; c0 += CB) {
        v16 acc[NQ][CB];
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++)
            STRATA_UNROLL
            for (int c = 0; c < CB; c++) acc[i][c] = v16_load(acc_mem + (i * CH + c0 + c) * 16);
        const int64_t pf_c = c0 == 0 ? pf_end : 0;   // the first pass prefetches the rows whole
        for (int64_t t = t0; t < t1; t++) {
            const uint16_t* row = v + t * kv_dim + off + c0 * 16;
            if (t + pf < pf_c) prefetch_bytes(row + pf * kv_dim, size_t(CH * 16) * sizeof(uint16_t));
            v16 x[CB];
            STRATA_UNROLL
            for (int c = 0; c < CB; c++) x[c] = v16_load(row + c * 16);
            STRATA_UNROLL
            for (int i = 0; i < NQ; i++) {
                const v16 w = v16_set1(p[i * n_pad + t]);
                STRATA_UNROLL
                for (int c = 0; c < CB; c++) acc[i][c] = v16_fma(w, x[c], acc[i][c]);
            }
        }
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++)
            STRATA_UNROLL
            for (int c = 0; c < CB; c++) v16_store(acc_mem + (i * CH + c0 + c) * 16, acc[i][c]);
    }
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

// One span's V rows of one kv head, read once per pass: they and the queries' weights stay in L1
// (32 KiB) across the passes of a chunked build (AVX2 reads a span CH times)
constexpr int64_t k_value_span_bytes = k_value_chunk >= 8 ? 32 * 1024 : 16 * 1024;

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
    constexpr int CBV = CH < k_value_chunk ? CH : k_value_chunk;
    constexpr int NQV = CBV >= 8 ? 2 : k_group_acc / CBV > 0 ? k_group_acc / CBV : 1;
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

}  // namespace strata
