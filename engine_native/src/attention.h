// The KV cache's memory layout and causal grouped-query attention of one query row (or of a group of
// rows of one context) over it.
//
// Not here: projections, RoPE, norms (forward.cpp, forward-rows.h), context bookkeeping (engine.cpp).
// Layouts, per layer of a context (capacity C positions, kv_dim = n_head_kv * head_dim):
//   tiled (f16 / f32 with head_dim % 16 == 0, the default): K as (ceil(C / 16), kv_dim, 16)
//     elements: 16 positions side by side, so a query row scores 16 positions with one fma per
//     dimension; V as (C, kv_dim) rows.
//   tiled q8_0 (head_dim % 32 == 0, up to 256): K as (ceil(C / 16), kv_dim / 32) blocks of 544
//     bytes: quants (8, 16, 4) = [j][position][i] holding k[position][4j + i] + 128 (u8), then the
//     16 positions' fp16 scales; scored with exact int32 dots against the query quantized to q8_0.
//     V as (C, row_bytes) rows of llama.cpp's q8_0 blocks (34 bytes per 32 values).
//   rows (head sizes not a multiple of 16): K and V as (C, row_bytes) rows.
// The engine keeps each kv head's K and V in a region of its own (head-major: the layouts above with
// n_head_kv 1, head g at g * the head's bytes), so that attention streams one head front to back
// (1.7x the read rate of heads interleaved in the rows: benchmarks/kv_head_stride.py).
// Snapshots and kv_read/kv_write always use rows of row_bytes per token (layout-independent; for
// q8_0 llama.cpp's blocks: fp16 d, 32 int8).
// Bitwise rule: every score, softmax and output element is computed by one fixed sequence of
// operations that depends only on the row's own position, window and sinks, never on the batch.
// Sliding window and sinks (gpt-oss; llama.cpp's LLAMA_SWA_TYPE_STANDARD and soft_max with sinks):
//   window > 0: a row at n_pos sees positions [attention_window_start(n_pos, window), n_pos) only;
//     the kernels read only the K tiles and V rows of those positions (the first tile's positions
//     before the window are read from K, then masked: they add exactly 0). 0: all positions.
//   sinks: one logit per query head (not multiplied by scale) added to the softmax's denominator only:
//     p_t = exp(s_t - M) / (sum_t exp(s_t - M) + exp(sink - M)), M = max(max_t s_t, sink).
//   window 0 with no sinks gives every float the kernels gave before these existed.
// Scratch sizes below stay those of the full n_pos: a windowed call uses no more (callers allocate
// for the full history); attention_group with a window needs only
// attention_scratch_floats(n_rep, min(n_pos, window + k_kv_tile - 1)).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace strata {

constexpr int64_t k_kv_tile = 16;   // positions per K tile (the tiled layouts above)

struct kv_layout {
    int32_t type = 1;          // TYPE_F16, TYPE_Q8_0 or TYPE_F32
    int64_t n_layer = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    int64_t kv_dim = 0;
    size_t row_bytes = 0;      // one token's K (or V) of one layer, as rows
    bool k_tiled = false;
    // V is K (deepseek2's latent, which both hold): no V buffer, no V in snapshots or kv_read / kv_write;
    // the values read K's rows (rows layout) or its tiles, each tile's 16 positions turned into rows
    // on the fly, so every output float is the one a V buffer of the same rows gives
    bool v_in_k = false;
    // where V is K: the values' dimensions of each head, its first v_dims (deepseek2's latent, without the
    // rotated key part after it; a multiple of 16 up to head_dim); the outputs past them are not written
    int64_t v_dims = 0;
    size_t bytes_per_token() const { return size_t(n_layer) * (v_in_k ? 1 : 2) * row_bytes; }
    size_t k_bytes(int64_t capacity) const;   // one layer's K buffer
    size_t v_bytes(int64_t capacity) const;   // one layer's V buffer (0 when v_in_k)
};

// Throws std::invalid_argument naming an unsupported combination (v_in_k: f16 / f32 only). v_dims (with
// v_in_k; 0: head_dim) is rounded up to a multiple of 16.
kv_layout kv_layout_make(int32_t kv_type, int64_t n_layer, int64_t n_head_kv, int64_t head_dim, bool v_in_k = false,
                         int64_t v_dims = 0);

// Store one position's K and V (kv_dim floats each; v_row unused when v_in_k).
void kv_store(const kv_layout& L, uint8_t* k, uint8_t* v, int64_t pos, const float* k_row, const float* v_row);
// Positions [t0, t1) of one layer's K (or V) as rows into dst / from src, `stride` bytes apart (0:
// row_bytes; more: one kv head's part of the whole rows, as the engine's head-major buffers use).
void kv_get_rows(const kv_layout& L, const uint8_t* buf, bool is_k, int64_t t0, int64_t t1, uint8_t* dst,
                 size_t stride = 0);
void kv_set_rows(const kv_layout& L, uint8_t* buf, bool is_k, int64_t t0, int64_t t1, const uint8_t* src,
                 size_t stride = 0);
// One row as kv_get_rows gives it (row_bytes: L.kv_dim values) to floats and back (f16 rounded, q8_0
// quantized as kv_store stores): what re-rotating stored keys (engine::splice) reads and writes.
void kv_row_to_float(const kv_layout& L, const uint8_t* row, float* out);
void kv_row_from_float(const kv_layout& L, const float* in, uint8_t* row);
// Bytes of one layer's K (or V) buffer that hold positions [0, n) (whole tiles for tiled K).
size_t kv_prefix_bytes(const kv_layout& L, bool is_k, int64_t n);

// The first position a row at n_pos sees with a sliding window of `window` positions (0: no window).
inline int64_t attention_window_start(int64_t n_pos, int64_t window) {
    return window > 0 && n_pos > window ? n_pos - window : 0;
}

// Attention of the query heads [g * n_rep, (g + 1) * n_rep) of one row over positions [0, n_pos)
// (with window > 0: [max(0, n_pos - window), n_pos) only; 0: all):
//   q: (n_rep, head_dim) of this group, already RoPE'd; out: (n_rep, head_dim)
//   scores: scratch of attention_scratch_floats(n_rep, n_pos) floats; n_rep <= 64
//   sinks: (n_rep,) the sink logits of this call's query heads (head i: sinks[i]), or nullptr
// Throws std::invalid_argument for a negative window.
void attention_group(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t g,
                     int64_t n_rep, int64_t n_pos, float scale, float* out, float* scores, int64_t window = 0,
                     const float* sinks = nullptr);
int64_t attention_scratch_floats(int64_t n_rep, int64_t capacity);

// The same attention for n_rows rows of one context at once (a prefill chunk's rows): row i's query
// heads at q + i * q_stride (n_rep, head_dim), its positions [0, n_pos[i]), its output at
// out + i * out_stride (n_rep, head_dim); window and sinks as attention_group's, the same for every
// row (each row's window ends at its own n_pos). Each row's output is bitwise the one attention_group
// gives for that row alone. Grouped kernels where attention_rows_grouped(L) (f16 or q8_0 tiled K, head_dim
// 32, 64 or 128, V not in K: the rows share every K tile's and V row's loads), else attention_group row by row.
//   scratch: attention_rows_scratch_floats(n_rep, n_rows, max n_pos) floats; n_rows * n_rep <= 1024
// Throws std::invalid_argument naming a group too large or a negative window.
bool attention_rows_grouped(const kv_layout& L);
// Rows per group that fill the grouped kernels' blocks of query vectors (24 / n_rep, at least 2).
constexpr int64_t k_attention_group_max_rows = 24;
int64_t attention_group_rows(int64_t n_rep);
void attention_row_group(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t q_stride,
                         int64_t g, int64_t n_rep, int64_t n_rows, const int64_t* n_pos, float scale, float* out,
                         int64_t out_stride, float* scratch, int64_t window = 0, const float* sinks = nullptr);
int64_t attention_rows_scratch_floats(int64_t n_rep, int64_t n_rows, int64_t max_n_pos);

// One long row's attention cut into parts, so that the threads share it (decode of a long history
// has one row's few kv heads to spread over the threads): the scores of tiles [tile0, tile1) of 16
// positions, then each query head's softmax (returns 1 / the sum; `sink`: that head's sink logit, or
// -INFINITY for none), then the values of dimensions
// [d0, d0 + k_attention_split_dims) of each head. Each part runs attention_group's own loops on its
// share, so every score, weight and output element is the same float attention_group gives. Only
// where attention_split_ok(L) (f16 or q8_0 tiled K, head sizes a multiple of 32). For q8_0 the values
// part of d0 = 0 computes all of the head's dimensions and the others nothing (34-byte blocks share
// cache lines: two passes over V cost twice one). No window here: windowed layers are not split.
//   scores: (n_rep, n_pad) for this kv head, n_pad = n_pos rounded up to whole tiles; q, out: (n_rep, head_dim)
constexpr int64_t k_attention_split_dims = 32;
bool attention_split_ok(const kv_layout& L);
void attention_scores_part(const kv_layout& L, const uint8_t* k, const float* q, int64_t g, int64_t n_rep,
                           int64_t tile0, int64_t tile1, int64_t n_pad, float scale, float* scores);
float attention_softmax_part(float* scores, int64_t n_pos, int64_t n_pad, float sink = -INFINITY);
void attention_values_part(const kv_layout& L, const uint8_t* v, const float* p, int64_t g, int64_t n_rep,
                           int64_t n_pos, int64_t n_pad, const float* inv_sum, int64_t d0, float* out);

}  // namespace strata
