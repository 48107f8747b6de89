// Per-row attention pieces: storing K/V rows in the cache format, and causal grouped-query
// attention of one query row over a context's cached K/V.
//
// Not here: projections, RoPE, norms (forward.cpp). Fixed accumulation order per row (positions in
// increasing order, lanes in a fixed pattern) so results do not depend on batching.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata {

// KV cache row formats: TYPE_F16 (kv_dim halves), TYPE_F32 (precision reference for tests) or TYPE_Q8_0 (kv_dim / 32 blocks of fp16 d + 32 int8).
size_t kv_row_bytes(int32_t kv_type, int64_t kv_dim);
void kv_store_row(int32_t kv_type, const float* src, uint8_t* dst, int64_t kv_dim);

// Attention of the query heads [g * n_rep, (g + 1) * n_rep) of one row, over positions [0, n_pos):
//   q:   (n_rep, head_dim) of this group, already RoPE'd
//   k/v: (n_pos, kv_row_bytes) cache rows; this group's head starts at element g * head_dim
//   out: (n_rep, head_dim)
//   scores: scratch (n_rep, n_pos)
void attention_group(int32_t kv_type, const float* q, const uint8_t* k, const uint8_t* v, size_t row_bytes,
                     int64_t g, int64_t n_rep, int64_t head_dim, int64_t n_pos, float scale, float* out,
                     float* scores);

}  // namespace strata
