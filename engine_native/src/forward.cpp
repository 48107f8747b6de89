// The forward pass of a batch of rows (prefill chunk or batched decode): embeddings, per layer
// RMSNorm -> Q/K/V -> RoPE -> KV store -> attention -> output projection -> RMSNorm -> SwiGLU FFN
// (or a mixture of SwiGLU experts), then the final norm and the logits of the rows that want them.
// The architectures' extras ride along where the weights have them (model.h): Q/K/V and output
// biases, Q/K norms, attention sinks and a layer's sliding window (with its own RoPE), router and
// expert biases, gpt-oss's clamped SwiGLU, mistral3's query temperature, glm4moe's sigmoid routing and
// shared experts, gemma3's scaled embeddings, GeGLU, post-attention / post-FFN norms and logit cap,
// deepseek2's multi-head latent attention (one latent KV head; queries absorbed per head by attn_k_b,
// outputs leaving by attn_v_b: mla_queries_and_kv / mla_head_outputs).
//
// Not here: weight formats (quants.h kernels), attention inner loops (attention.cpp).
// Bitwise rule: every per-row step below has a fixed order independent of n_rows, and the products
// come from quants.h's matmul/matvec which promise the same float per (row, weight row).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "attention.h"
#include "engine.h"
#include "quants-packed.h"
#include "quants.h"
#include "vec16.h"

namespace strata {

namespace {

constexpr int64_t k_rows_per_chunk = 8;          // per-row stages: batches below this run inline
constexpr int64_t k_weight_rows_per_chunk = 64;  // products: weight rows per claimed chunk
static_assert(k_weight_rows_per_chunk % PACK_ROWS == 0, "packed products take whole groups of rows");
constexpr int64_t k_min_group_rows = 2;   // attention: shorter runs of one context (decode rows) go row by row
constexpr int64_t k_group_gain = 3;       // a group's work per position, as a task cost, vs a lone row's
// attention of long lone rows in parts (attention_split_ok): from this many positions in the longest
// row, when the tasks leave a thread idle for over 1 / k_split_slack of the ideal time; a scores part
// covers k_split_tiles tiles (1,024 positions)
constexpr int64_t k_split_min_positions = 1024;
constexpr int64_t k_split_slack = 8;
constexpr int64_t k_split_tiles = 64;

// y = x / sqrt(mean(x^2) + eps) * w, with a fixed 8-lane accumulation order.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int l = 0; l < 8; l++) acc[l] += x[i + l] * x[i + l];
    }
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) sum += x[i] * x[i];
    const float scale = 1.0f / std::sqrt(sum / float(n) + eps);
    for (i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
}

// Rotates one head in place with the row's (cos, sin) table: (n_rot / 2, 2).
void rope_head(float* x, const float* cs, int64_t n_rot, rope_style style) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const int64_t i0 = style == ROPE_NORM ? 2 * i : i;
        const int64_t i1 = style == ROPE_NORM ? 2 * i + 1 : i + half;
        const float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

// g = block(g, u) over n elements, 16 lanes at a time (a short tail through a padded block).
template <typename Block>
void gated_rows(float* g, const float* u, int64_t n, Block block) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) v16_store(g + i, block(v16_load(g + i), v16_load(u + i)));
    if (i < n) {
        float tg[16] = {}, tu[16] = {};
        std::memcpy(tg, g + i, sizeof(float) * size_t(n - i));
        std::memcpy(tu, u + i, sizeof(float) * size_t(n - i));
        v16_store(tg, block(v16_load(tg), v16_load(tu)));
        std::memcpy(g + i, tg, sizeof(float) * size_t(n - i));
    }
}

// g = silu(g) * u = g / (1 + exp(-g)) * u
void swiglu_row(float* g, const float* u, int64_t n) {
    gated_rows(g, u, n, [](v16 x, v16 up) {
        return v16_mul(v16_div(x, v16_add(v16_set1(1.0f), v16_exp(v16_sub(v16_zero(), x)))), up);
    });
}

// gemma3's GeGLU with ggml_gelu's tanh form: 0.5 g (1 + tanh(z)) = g / (1 + exp(-2 z)),
// z = sqrt(2 / pi) g (1 + 0.044715 g^2); g = gelu(g) * u
void geglu_row(float* g, const float* u, int64_t n) {
    gated_rows(g, u, n, [](v16 x, v16 up) {
        const v16 z2 = v16_mul(v16_mul(v16_set1(-2.0f * 0.7978845608028654f), x),
                               v16_add(v16_set1(1.0f), v16_mul(v16_set1(0.044715f), v16_mul(x, x))));
        return v16_mul(v16_div(x, v16_add(v16_set1(1.0f), v16_exp(z2))), up);
    });
}

// gpt-oss's clamped SwiGLU (ggml's swiglu_oai): x = min(g, 7), y = clamp(u, -7, 7),
// g = x / (1 + exp(-1.702 x)) * (y + 1)
void swiglu_oai_row(float* g, const float* u, int64_t n) {
    gated_rows(g, u, n, [](v16 gate, v16 up) {
        const v16 limit = v16_set1(7.0f);
        const v16 x = v16_min(gate, limit);
        const v16 y = v16_max(v16_min(up, limit), v16_sub(v16_zero(), limit));
        const v16 s = v16_div(x, v16_add(v16_set1(1.0f), v16_exp(v16_mul(v16_set1(-1.702f), x))));
        return v16_mul(s, v16_add(y, v16_set1(1.0f)));
    });
}

// the FFN activation of `act` over n gate / up pairs (dense FFNs and experts)
void gated_activation(ffn_activation act, float* g, const float* u, int64_t n) {
    if (act == FFN_SWIGLU_OAI) swiglu_oai_row(g, u, n);
    else if (act == FFN_GEGLU) geglu_row(g, u, n);
    else swiglu_row(g, u, n);
}

// A run of units [front, back) as one word, claimed from either end by compare-and-swap; one cache
// line each so that the threads' claims on their own runs do not contend.
struct alignas(64) unit_run {
    std::atomic<uint64_t> fb{0};   // front << 32 | back

    void store(uint64_t front, uint64_t back) { fb.store(front << 32 | back, std::memory_order_relaxed); }
    bool take_front(uint32_t* c) {
        uint64_t v = fb.load(std::memory_order_relaxed);
        for (;;) {
            const uint32_t f = uint32_t(v >> 32), b = uint32_t(v);
            if (f >= b) return false;
            if (fb.compare_exchange_weak(v, v + (uint64_t(1) << 32), std::memory_order_relaxed)) {
                *c = f;
                return true;
            }
        }
    }
    bool take_back(uint32_t* c) {
        uint64_t v = fb.load(std::memory_order_relaxed);
        for (;;) {
            const uint32_t f = uint32_t(v >> 32), b = uint32_t(v);
            if (f >= b) return false;
            if (fb.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) {
                *c = b - 1;
                return true;
            }
        }
    }
};

// Whether one long row's attention should run in parts: the longest row has at least
// k_split_min_positions and the tasks (costs in claiming order, costliest first) leave the busiest
// thread over 1 / k_split_slack of the ideal time behind (one row's 3 kv heads on 2 threads: 1/3).
bool split_pays(const std::vector<int64_t>& costs, int64_t max_pos, int n_threads) {
    if (n_threads < 2 || max_pos < k_split_min_positions) return false;
    std::vector<int64_t> load(size_t(n_threads), 0);
    int64_t total = 0;
    for (int64_t c : costs) {
        *std::min_element(load.begin(), load.end()) += c;
        total += c;
    }
    const int64_t busiest = *std::max_element(load.begin(), load.end());
    return (busiest * n_threads - total) * k_split_slack > total;
}

}  // namespace

void engine::plan_attention_parts(const batch_row* rows, int64_t n) {
    const model_hparams& h = model_->hp;
    part_plan& p = parts_;
    // row r's scores: (n_head, n_pad[r]) at part_scores_ + offset[r]
    p.offset.assign(size_t(n) + 1, 0);
    p.n_pad.assign(size_t(n), 0);
    p.scores.clear();
    p.values.clear();
    for (int64_t r = 0; r < n; r++) {
        const int64_t n_pad = (rows[r].pos + k_kv_tile) / k_kv_tile * k_kv_tile, n_tiles = n_pad / k_kv_tile;
        p.n_pad[size_t(r)] = n_pad;
        p.offset[size_t(r) + 1] = p.offset[size_t(r)] + h.n_head * n_pad;
        for (int64_t g = 0; g < h.n_head_kv; g++) {
            for (int64_t t = 0; t < n_tiles; t += k_split_tiles)
                p.scores.push_back({r, g, t, std::min(n_tiles, t + k_split_tiles)});
            for (int64_t d = 0; d < h.head_dim; d += k_attention_split_dims) p.values.push_back({r, g, d, 0});
        }
    }
    if (part_scores_.size() < size_t(p.offset.back())) part_scores_.resize(size_t(p.offset.back()));
    part_inv_.resize(size_t(n * h.n_head));
}

void engine::attention_parts(const batch_row* rows, int64_t n, int64_t il, float scale, const float* sinks) {
    const model_hparams& h = model_->hp;
    const int64_t Q = h.q_dim(), HD = h.head_dim, n_rep = h.n_head / h.n_head_kv;
    const part_plan& p = parts_;
    float* S = part_scores_.data();
    auto head_scores = [&](const part_plan::part& u) {
        return S + p.offset[size_t(u.r)] + u.g * n_rep * p.n_pad[size_t(u.r)];
    };
    pool_->parallel_chunks(int64_t(p.scores.size()), [&](int64_t c, int) {
        const part_plan::part& u = p.scores[size_t(c)];
        attention_scores_part(kvh_, rows[u.r].ctx->k_head(il, u.g), q_ + u.r * Q + u.g * n_rep * HD, 0, n_rep, u.a, u.b,
                              p.n_pad[size_t(u.r)], scale, head_scores(u));
    });
    pool_->parallel_range(n * h.n_head, 1, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; i++) {
            const int64_t r = i / h.n_head, hh = i % h.n_head;
            part_inv_[size_t(i)] = attention_softmax_part(S + p.offset[size_t(r)] + hh * p.n_pad[size_t(r)],
                                                          rows[r].pos + 1, p.n_pad[size_t(r)],
                                                          sinks ? sinks[hh] : -INFINITY);
        }
    });
    pool_->parallel_chunks(int64_t(p.values.size()), [&](int64_t c, int) {
        const part_plan::part& u = p.values[size_t(c)];
        attention_values_part(kvh_, rows[u.r].ctx->v_head(il, u.g), head_scores(u), 0, n_rep, rows[u.r].pos + 1,
                              p.n_pad[size_t(u.r)], part_inv_.data() + u.r * h.n_head + u.g * n_rep, u.a,
                              xn_ + u.r * Q + u.g * n_rep * HD);
    });
}

void engine::matmuls(const float* x, int64_t n_rows, int64_t n_cols, std::initializer_list<matmul_job> jobs) {
    // distinct activation formats among the jobs, each quantized once into its own xq_ buffer: the
    // weight type's act_type_for(), or for a packed weight its prepared rows (keyed 1000 + type)
    int32_t act_types[3];
    int n_act = 0;
    std::vector<int> job_slot;
    for (const matmul_job& j : jobs) {
        int32_t at = j.w->packed ? 1000 + j.w->type : act_type_for(j.w->type);
        int slot = -1;
        for (int s = 0; s < n_act; s++)
            if (act_types[s] == at) slot = s;
        if (slot < 0) {
            if (n_act == 3) throw engine_error("matmuls: more than 3 activation types in one group");
            act_types[n_act] = at;
            slot = n_act++;
        }
        job_slot.push_back(slot);
    }
    auto slot_wtype = std::vector<int32_t>(size_t(n_act));
    auto slot_packed = std::vector<char>(size_t(n_act));
    auto slot_row_bytes = std::vector<size_t>(size_t(n_act));
    {
        size_t k = 0;
        for (const matmul_job& j : jobs) {
            int s = job_slot[k++];
            slot_wtype[size_t(s)] = j.w->type;
            slot_packed[size_t(s)] = j.w->packed != nullptr;
            slot_row_bytes[size_t(s)] = j.w->packed ? packed_act_row_bytes(j.w->type, n_cols) : act_row_bytes(j.w->type, n_cols);
        }
    }
    pool_->parallel_range(n_rows * n_act, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; i++) {
            const int64_t s = i / n_rows, r = i % n_rows;
            uint8_t* dst = xq_[s] + size_t(r) * slot_row_bytes[size_t(s)];
            if (slot_packed[size_t(s)]) {
                quantize_act_row_packed(slot_wtype[size_t(s)], x + r * n_cols, dst, n_cols);
            } else {
                quantize_act_row(slot_wtype[size_t(s)], x + r * n_cols, dst, n_cols);
            }
        }
    });
    std::vector<product_unit> units;
    {
        size_t k = 0;
        for (const matmul_job& j : jobs) {
            const int s = job_slot[k++];
            add_product_units(units, *j.w, xq_[s], slot_row_bytes[size_t(s)], n_rows, j.y);
        }
    }
    run_products(units);
}

void engine::add_product_units(std::vector<product_unit>& units, const weight& w, const uint8_t* xq,
                               size_t xq_row_bytes, int64_t n_act, float* y) {
    for (int64_t r0 = 0; r0 < w.n_rows; r0 += k_weight_rows_per_chunk) {
        units.push_back({w, xq, xq_row_bytes, n_act, y, r0, std::min(w.n_rows, r0 + k_weight_rows_per_chunk)});
    }
}

void engine::run_products(const std::vector<product_unit>& units) {
    auto run_unit = [&](uint32_t c) {
        const product_unit& u = units[c];
        const weight& w = u.w;
        if (w.packed) {   // r0 is a multiple of k_weight_rows_per_chunk, so of PACK_ROWS
            matmul_packed(w.type, w.packed, w.n_rows, u.xq, u.xq_row_bytes, u.n_act, u.y, w.n_rows, w.n_cols, u.r0,
                          u.r1);
        } else if (u.n_act == 1) {
            matvec(w.type, w.data, w.row_bytes, u.xq, u.y + u.r0, w.n_cols, u.r0, u.r1);
        } else {
            matmul(w.type, w.data, w.row_bytes, u.xq, u.xq_row_bytes, u.n_act, u.y, w.n_rows, w.n_cols, u.r0, u.r1);
        }
    };
    // Each thread's share is one contiguous run of units, taken from its front, so that the
    // kernels' prefetch (a fixed distance ahead in the rows) runs into rows the same thread reads
    // next; with units dealt one at a time it ran into the other thread's. A thread done with its run
    // takes units from the back of the others' (a descheduled thread delays only the unit it holds).
    const int n_runs = pool_->size();
    const uint32_t n_units = uint32_t(units.size());
    std::unique_ptr<unit_run[]> runs(new unit_run[size_t(n_runs)]);
    for (int i = 0; i < n_runs; i++) {
        runs[size_t(i)].store(uint64_t(n_units) * uint64_t(i) / uint64_t(n_runs),
                              uint64_t(n_units) * uint64_t(i + 1) / uint64_t(n_runs));
    }
    pool_->parallel_chunks(n_runs, [&](int64_t own, int) {
        uint32_t c;
        while (runs[size_t(own)].take_front(&c)) run_unit(c);
        for (int k = 1; k < n_runs; k++) {
            unit_run& other = runs[size_t((own + k) % n_runs)];
            while (other.take_back(&c)) run_unit(c);
        }
    });
}

// Each row's experts: the n_expert_used best router scores (ties: the lower expert), weighted by
// the softmax of those scores; glm4moe's (llama.cpp's build_moe_ffn): the best probability +
// exp_probs_b, each weighted by its probability (the softmax of all scores, or each score's sigmoid),
// summing to 1 when expert_weights_norm, times expert_weights_scale. Pairs (row, choice) are numbered in
// expert order so that an expert's rows lie together; each expert's products run once over its rows
// (unused experts are not read). A row's output sums its experts in its own choice order, then the
// shared experts' output: no result depends on the other rows.
void engine::route_probs(const layer_weights& L, float* score, int64_t r, std::vector<int32_t>& order,
                         std::vector<float>& chosen_by) {
    const model_hparams& h = model_->hp;
    const int64_t NE = h.n_expert, K = h.n_expert_used;
    chosen_by.resize(size_t(NE));
    if (h.gating == GATING_SIGMOID) {
        for (int64_t i = 0; i < NE; i++) score[i] = 1.0f / (1.0f + std::exp(-score[i]));
    } else {   // the softmax over every expert (not only the chosen: their weights need not sum to 1)
        const float top = *std::max_element(score, score + NE);
        double sum = 0.0;
        for (int64_t i = 0; i < NE; i++) sum += double(score[i] = std::exp(score[i] - top));
        const float inv = float(1.0 / sum);
        for (int64_t i = 0; i < NE; i++) score[i] *= inv;
    }
    for (int64_t i = 0; i < NE; i++)   // score[i]: the expert's weight, if chosen
        chosen_by[size_t(i)] = L.exp_probs_b.empty() ? score[i] : score[i] + L.exp_probs_b[size_t(i)];
    order.resize(size_t(NE));
    for (int64_t i = 0; i < NE; i++) order[size_t(i)] = int32_t(i);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t c) {
        return chosen_by[size_t(a)] > chosen_by[size_t(c)] || (chosen_by[size_t(a)] == chosen_by[size_t(c)] && a < c);
    });
    float sum = 0.0f;
    for (int64_t j = 0; j < K; j++) {
        moe_expert_[size_t(r * K + j)] = order[size_t(j)];
        moe_weight_[size_t(r * K + j)] = score[order[size_t(j)]];
        sum += score[order[size_t(j)]];
    }
    // llama.cpp clamps the sum to f16's smallest normal before dividing
    const float div = h.expert_weights_norm ? std::max(sum, 6.103515625e-5f) : 1.0f;
    for (int64_t j = 0; j < K; j++) {
        float& w = moe_weight_[size_t(r * K + j)];
        if (h.expert_weights_norm) w /= div;
        if (h.expert_weights_scale != 1.0f) w *= h.expert_weights_scale;
    }
}

void engine::moe_ffn(const layer_weights& L, int64_t n) {
    const model_hparams& h = model_->hp;
    const int64_t E = h.n_embd, NE = h.n_expert, K = h.n_expert_used, FE = h.n_ff_exp;
    matmuls(xn_, n, E, {{&L.ffn_gate_inp, router_}});
    if (!L.router_b.empty()) {
        pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++)
                for (int64_t x = 0; x < NE; x++) router_[r * NE + x] += L.router_b[size_t(x)];
        });
    }

    moe_expert_.resize(size_t(n * K));
    moe_weight_.resize(size_t(n * K));
    moe_pair_.resize(size_t(n * K));
    const bool by_probs = h.gating != GATING_SOFTMAX_CHOSEN;
    pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<int32_t> order;
        thread_local std::vector<float> chosen_by;   // (n_expert,) glm4moe: probability + selection bias
        for (int64_t r = b; r < e; r++) {
            if (by_probs) {
                route_probs(L, router_ + r * NE, r, order, chosen_by);
                continue;
            }
            const float* score = router_ + r * NE;
            order.resize(size_t(NE));
            for (int64_t i = 0; i < NE; i++) order[size_t(i)] = int32_t(i);
            std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t a, int32_t c) {
                return score[a] > score[c] || (score[a] == score[c] && a < c);
            });
            const float top = score[order[0]];
            float sum = 0.0f;
            for (int64_t j = 0; j < K; j++) {
                const float w = std::exp(score[order[size_t(j)]] - top);
                moe_expert_[size_t(r * K + j)] = order[size_t(j)];
                moe_weight_[size_t(r * K + j)] = w;
                sum += w;
            }
            for (int64_t j = 0; j < K; j++) moe_weight_[size_t(r * K + j)] /= sum;
        }
    });
    moe_first_.assign(size_t(NE + 1), 0);
    for (int64_t i = 0; i < n * K; i++) moe_first_[size_t(moe_expert_[size_t(i)]) + 1]++;
    for (int64_t x = 0; x < NE; x++) moe_first_[size_t(x + 1)] += moe_first_[size_t(x)];
    moe_pair_expert_.resize(size_t(n * K));
    {
        std::vector<int64_t> next(moe_first_.begin(), moe_first_.end() - 1);
        for (int64_t i = 0; i < n * K; i++) {
            moe_pair_[size_t(i)] = next[size_t(moe_expert_[size_t(i)])]++;
            moe_pair_expert_[size_t(moe_pair_[size_t(i)])] = moe_expert_[size_t(i)];
        }
    }

    // gate and up: each pair's activation row (its row's, quantized for the expert weights' types)
    const int32_t gate_type = L.gate_exps.first.type, up_type = L.up_exps.first.type;
    const size_t xrb = moe_xq_row_bytes_;
    pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            uint8_t* first_g = moe_xq_[0] + size_t(moe_pair_[size_t(r * K)]) * xrb;
            uint8_t* first_u = moe_xq_[1] + size_t(moe_pair_[size_t(r * K)]) * xrb;
            quantize_act_row(gate_type, xn_ + r * E, first_g, E);
            if (up_type != gate_type) quantize_act_row(up_type, xn_ + r * E, first_u, E);
            for (int64_t j = 1; j < K; j++) {
                const size_t p = size_t(moe_pair_[size_t(r * K + j)]);
                std::memcpy(moe_xq_[0] + p * xrb, first_g, act_row_bytes(gate_type, E));
                if (up_type != gate_type) std::memcpy(moe_xq_[1] + p * xrb, first_u, act_row_bytes(up_type, E));
            }
        }
    });
    std::vector<product_unit> units;
    const uint8_t* up_xq = up_type != gate_type ? moe_xq_[1] : moe_xq_[0];
    for (int64_t x = 0; x < NE; x++) {
        const int64_t p0 = moe_first_[size_t(x)], cnt = moe_first_[size_t(x + 1)] - p0;
        if (cnt == 0) continue;
        add_product_units(units, L.gate_exps.expert(x), moe_xq_[0] + size_t(p0) * xrb, xrb, cnt, moe_gate_ + p0 * FE);
        add_product_units(units, L.up_exps.expert(x), up_xq + size_t(p0) * xrb, xrb, cnt, moe_up_ + p0 * FE);
    }
    run_products(units);

    // down, over the activation of gate and up (plus their biases, gpt-oss)
    const int32_t down_type = L.down_exps.first.type;
    pool_->parallel_range(n * K, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t p = b; p < e; p++) {
            float* g = moe_gate_ + p * FE;
            float* u = moe_up_ + p * FE;
            if (!L.gate_exps_b.empty()) {
                const float* gb = L.gate_exps_b.data() + size_t(moe_pair_expert_[size_t(p)]) * size_t(FE);
                const float* ub = L.up_exps_b.data() + size_t(moe_pair_expert_[size_t(p)]) * size_t(FE);
                for (int64_t i = 0; i < FE; i++) g[i] += gb[i];
                for (int64_t i = 0; i < FE; i++) u[i] += ub[i];
            }
            gated_activation(h.ffn_act, g, u, FE);
            quantize_act_row(down_type, moe_gate_ + p * FE, moe_xq_[0] + size_t(p) * xrb, FE);
        }
    });
    units.clear();
    for (int64_t x = 0; x < NE; x++) {
        const int64_t p0 = moe_first_[size_t(x)], cnt = moe_first_[size_t(x + 1)] - p0;
        if (cnt == 0) continue;
        add_product_units(units, L.down_exps.expert(x), moe_xq_[0] + size_t(p0) * xrb, xrb, cnt, moe_out_ + p0 * E);
    }
    run_products(units);
    if (!L.down_exps_b.empty()) {
        pool_->parallel_range(n * K, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t p = b; p < e; p++) {
                const float* db = L.down_exps_b.data() + size_t(moe_pair_expert_[size_t(p)]) * size_t(E);
                for (int64_t i = 0; i < E; i++) moe_out_[p * E + i] += db[i];
            }
        });
    }

    pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            float* o = out_ + r * E;
            for (int64_t j = 0; j < K; j++) {
                const float w = moe_weight_[size_t(r * K + j)];
                const float* d = moe_out_ + moe_pair_[size_t(r * K + j)] * E;
                if (j == 0) {
                    for (int64_t i = 0; i < E; i++) o[i] = w * d[i];
                } else {
                    for (int64_t i = 0; i < E; i++) o[i] += w * d[i];
                }
            }
        }
    });

    // the shared experts (glm4moe): a SwiGLU every row runs, added to the chosen experts' sum
    if (L.gate_shexp.data) {
        const int64_t FS = L.gate_shexp.n_rows;
        matmuls(xn_, n, E, {{&L.gate_shexp, gate_}, {&L.up_shexp, up_}});
        pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++) swiglu_row(gate_ + r * FS, up_ + r * FS, FS);
        });
        matmuls(gate_, n, FS, {{&L.down_shexp, moe_out_}});   // the pairs' outputs are summed above
        pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++)
                for (int64_t i = 0; i < E; i++) out_[r * E + i] += moe_out_[r * E + i];
        });
    }
}

void engine::head_products(const expert_weights& w, int64_t n_heads, const float* x, int64_t n, float* y) {
    const int32_t type = w.first.type;
    const int64_t cols = w.first.n_cols, out = w.first.n_rows;
    const size_t rb = act_row_bytes(type, cols);
    pool_->parallel_range(n_heads * n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; i++) quantize_act_row(type, x + i * cols, xq_[0] + size_t(i) * rb, cols);
    });
    std::vector<product_unit> units;
    for (int64_t hh = 0; hh < n_heads; hh++)
        add_product_units(units, w.expert(hh), xq_[0] + size_t(hh * n) * rb, rb, n, y + hh * n * out);
    run_products(units);
}

void engine::mla_queries_and_kv(const layer_weights& L, const batch_row* rows, int64_t n, int64_t il) {
    const model_hparams& h = model_->hp;
    const int64_t E = h.n_embd, NH = h.n_head, HD = h.head_dim, Q = h.q_dim(), R = h.kv_lora_rank;
    const int64_t QK = h.mla_qk_head, NOPE = QK - h.n_rot, QR = h.q_lora_rank;
    if (L.wq_a.data) {   // the q LoRA: attn_q_a, its norm, attn_q_b
        matmuls(xn_, n, E, {{&L.wq_a, mla_qa_}, {&L.wkv_a, kbuf_}});
        pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++) rms_norm(mla_qa_ + r * QR, L.q_a_norm.data(), mla_qa_ + r * QR, QR, h.rms_eps);
        });
        matmuls(mla_qa_, n, QR, {{&L.wq_b, mla_q_}});
    } else {
        matmuls(xn_, n, E, {{&L.wq, mla_q_}, {&L.wkv_a, kbuf_}});
    }
    // per row: the latent normed and the shared key part rotated, stored as the row's K (its V too where
    // the layout keeps one: q8_0); each
    // head's query part rotated into q_ and its nope part set out per head for attn_k_b
    pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            const batch_row& row = rows[r];
            const float* cs = rope_ + r * h.n_rot;
            float* kv = kbuf_ + r * HD;
            rms_norm(kv, L.kv_a_norm.data(), kv, R, h.rms_eps);
            rope_head(kv + R, cs, h.n_rot, h.rope);
            kv_store(kvh_, row.ctx->k_head(il, 0), row.ctx->v_head(il, 0), row.pos, kv, kv);
            for (int64_t hh = 0; hh < NH; hh++) {
                float* qh = mla_q_ + (r * NH + hh) * QK;
                rope_head(qh + NOPE, cs, h.n_rot, h.rope);
                std::memcpy(q_ + r * Q + hh * HD + R, qh + NOPE, sizeof(float) * size_t(h.n_rot));
                std::memcpy(mla_in_ + (hh * n + r) * NOPE, qh, sizeof(float) * size_t(NOPE));
            }
        }
    });
    head_products(L.wk_b, NH, mla_in_, n, mla_out_);   // (NH, n, R): each head's nope query in latent space
    pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            float* q = q_ + r * Q;
            for (int64_t hh = 0; hh < NH; hh++)
                std::memcpy(q + hh * HD, mla_out_ + (hh * n + r) * R, sizeof(float) * size_t(R));
            if (h.attn_temp_scale != 0.0f) {   // Mistral Large 3's temperature at this position
                const float t = h.attn_temperature(rows[r].pos);
                for (int64_t i = 0; i < Q; i++) q[i] *= t;
            }
        }
    });
}

void engine::mla_head_outputs(const layer_weights& L, int64_t n) {
    const model_hparams& h = model_->hp;
    const int64_t NH = h.n_head, HD = h.head_dim, Q = h.q_dim(), R = h.kv_lora_rank, VH = h.mla_v_head;
    // each head's output: the latent part (its first R values: the values are the KV row, latent then key part)
    pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++)
            for (int64_t hh = 0; hh < NH; hh++)
                std::memcpy(mla_in_ + (hh * n + r) * R, xn_ + r * Q + hh * HD, sizeof(float) * size_t(R));
    });
    head_products(L.wv_b, NH, mla_in_, n, mla_out_);   // (NH, n, VH)
    pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++)
            for (int64_t hh = 0; hh < NH; hh++)
                std::memcpy(xn_ + r * NH * VH + hh * VH, mla_out_ + (hh * n + r) * VH, sizeof(float) * size_t(VH));
    });
}

void engine::forward(const batch_row* rows, int64_t n) {
#ifdef STRATA_WITH_CUDA
    if (gpu_) {   // the same rows on the GPU (engine_native/cuda/cuda-backend.cu)
        std::vector<cuda_row> g;
        for (int64_t r = 0; r < n; r++) g.push_back({rows[r].ctx->id, rows[r].token, rows[r].pos, rows[r].logits_out});
        gpu_->forward(g.data(), n);
        return;
    }
#endif
    const model& m = *model_;
    const model_hparams& h = m.hp;
    const int64_t E = h.n_embd, Q = h.q_dim(), KV = h.kv_dim(), F = h.n_ff, HD = h.head_dim;
    const int64_t n_rep = h.n_head / h.n_head_kv;
    const float scale = h.attn_scale != 0.0f ? h.attn_scale : 1.0f / std::sqrt(float(HD));
    const bool swa_rope = h.swa_rope();

    // embeddings and per-row RoPE tables (a second one for the windowed layers when theirs differs)
    pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            const batch_row& row = rows[r];
            float* x = x_ + r * E;
            dequantize_row(m.token_embd.type, m.token_embd.data + size_t(row.token) * m.token_embd.row_bytes, x, E);
            if (h.embd_scale != 1.0f)
                for (int64_t i = 0; i < E; i++) x[i] *= h.embd_scale;
            rope_table(h, m.rope_freq_factors, row.pos, rope_ + r * h.n_rot);
            if (swa_rope) rope_table(swa_rope_hp_, m.rope_freq_factors, row.pos, rope_swa_ + r * h.n_rot);
        }
    });

    int64_t max_pos = 0, sum_pos = 0;
    for (int64_t r = 0; r < n; r++) {
        max_pos = std::max(max_pos, rows[r].pos + 1);
        sum_pos += rows[r].pos + 1;
    }
    const bool whole_rows = max_pos * pool_->size() <= sum_pos;

    // attention tasks (the same in every layer): rows of one context at consecutive positions (a
    // prefill chunk, a prompt piece) form groups of up to group_rows that attend together per kv
    // head (f16 or q8_0 tiled KV: the rows share each K tile's and V row's loads). The other rows run alone:
    // a task of one row (all its kv heads: its K tiles and V rows are read front to back by one core,
    // no prefetched lines wasted on the other core's heads) when no row is longer than a thread's
    // fair share of all the positions, else of one (row, kv head) so that a long row's heads still
    // spread. Claimed costliest first (the longest rows, then by estimated work).
    struct attn_task {
        int64_t r0, n_rows, g0, n_heads, cost;
    };
    std::vector<attn_task> tasks;
    const bool grouped = attention_rows_grouped(kvh_);
    const int64_t group_rows = attention_group_rows(n_rep);
    int64_t group_scratch = 0;
    for (int64_t r = 0; r < n;) {
        int64_t e = r + 1;
        while (grouped && e < n && rows[e].ctx == rows[r].ctx && rows[e].pos == rows[e - 1].pos + 1) e++;
        const int64_t run = e - r;
        if (run >= k_min_group_rows) {
            const int64_t n_groups = (run + group_rows - 1) / group_rows;
            for (int64_t i = 0; i < n_groups; i++) {
                const int64_t a = r + run * i / n_groups, b = r + run * (i + 1) / n_groups;
                int64_t cost = 0;
                for (int64_t x = a; x < b; x++) cost += rows[x].pos + 1;
                group_scratch =
                    std::max(group_scratch, attention_rows_scratch_floats(n_rep, b - a, rows[b - 1].pos + 1));
                for (int64_t g = 0; g < h.n_head_kv; g++) tasks.push_back({a, b - a, g, 1, cost / k_group_gain});
            }
        } else {
            for (int64_t x = r; x < e; x++) {
                if (whole_rows) {
                    tasks.push_back({x, 1, 0, h.n_head_kv, (rows[x].pos + 1) * h.n_head_kv});
                } else {
                    for (int64_t g = 0; g < h.n_head_kv; g++) tasks.push_back({x, 1, g, 1, rows[x].pos + 1});
                }
            }
        }
        r = e;
    }
    std::stable_sort(tasks.begin(), tasks.end(),
                     [](const attn_task& a, const attn_task& b) { return a.cost > b.cost; });
    const int64_t n_tasks = int64_t(tasks.size());
    std::vector<int64_t> task_costs;
    bool lone_rows_only = true;
    for (const attn_task& t : tasks) {
        task_costs.push_back(t.cost);
        lone_rows_only = lone_rows_only && t.n_rows == 1;
    }
    const bool split =
        lone_rows_only && attention_split_ok(kvh_) && split_pays(task_costs, max_pos, pool_->size());
    if (split) plan_attention_parts(rows, n);   // the same parts in every layer

    for (int64_t il = 0; il < h.n_layer; il++) {
        const layer_weights& L = m.layers[size_t(il)];

        pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++) rms_norm(x_ + r * E, L.attn_norm.data(), xn_ + r * E, E, h.rms_eps);
        });
        if (h.mla()) mla_queries_and_kv(L, rows, n, il);
        else matmuls(xn_, n, E, {{&L.wq, q_}, {&L.wk, kbuf_}, {&L.wv, vbuf_}});

        // biases, Q/K norms, RoPE, then K/V into the cache at each row's position
        if (!h.mla()) pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++) {
                float* q = q_ + r * Q;
                float* k = kbuf_ + r * KV;
                float* v = vbuf_ + r * KV;
                if (!L.bq.empty()) {
                    for (int64_t i = 0; i < Q; i++) q[i] += L.bq[size_t(i)];
                    for (int64_t i = 0; i < KV; i++) k[i] += L.bk[size_t(i)];
                    for (int64_t i = 0; i < KV; i++) v[i] += L.bv[size_t(i)];
                }
                if (!L.q_norm.empty()) {
                    for (int64_t hh = 0; hh < h.n_head; hh++)
                        rms_norm(q + hh * HD, L.q_norm.data(), q + hh * HD, HD, h.rms_eps);
                    for (int64_t hh = 0; hh < h.n_head_kv; hh++)
                        rms_norm(k + hh * HD, L.k_norm.data(), k + hh * HD, HD, h.rms_eps);
                }
                const float* cs = (swa_rope && L.window > 0 ? rope_swa_ : rope_) + r * h.n_rot;
                if (L.rope) {
                    for (int64_t hh = 0; hh < h.n_head; hh++) rope_head(q + hh * HD, cs, h.n_rot, h.rope);
                    for (int64_t hh = 0; hh < h.n_head_kv; hh++) rope_head(k + hh * HD, cs, h.n_rot, h.rope);
                }
                const batch_row& row = rows[r];
                if (h.attn_temp_scale != 0.0f) {   // mistral3: the query's temperature at this position
                    const float t = h.attn_temperature(row.pos);
                    for (int64_t i = 0; i < Q; i++) q[i] *= t;
                }
                for (int64_t g = 0; g < h.n_head_kv; g++)
                    kv_store(kvh_, row.ctx->k_head(il, g), row.ctx->v_head(il, g), row.pos, k + g * HD, v + g * HD);
            }
        });

        // attention (tasks above, or in parts: attention_parts; a layer with a window reads at most
        // its window, never long enough to split)
        const float* sinks = L.sinks.empty() ? nullptr : L.sinks.data();
        if (split && L.window == 0) {
            attention_parts(rows, n, il, scale, sinks);
        } else pool_->parallel_chunks(n_tasks, [&](int64_t c, int ith) {
            const attn_task& task = tasks[size_t(c)];
            const batch_row& row = rows[task.r0];
            if (task.n_rows > 1) {   // one kv head (task.g0) of a group of rows
                const uint8_t* k = row.ctx->k_head(il, task.g0);
                const uint8_t* v = row.ctx->v_head(il, task.g0);
                thread_local std::vector<float> scratch;   // grows to the largest group seen, then reused
                if (int64_t(scratch.size()) < group_scratch) scratch.resize(size_t(group_scratch));
                int64_t n_pos[k_attention_group_max_rows];
                for (int64_t i = 0; i < task.n_rows; i++) n_pos[i] = rows[task.r0 + i].pos + 1;
                const int64_t qo = task.r0 * Q + task.g0 * n_rep * HD;
                attention_row_group(kvh_, k, v, q_ + qo, Q, 0, n_rep, task.n_rows, n_pos, scale, xn_ + qo, Q,
                                    scratch.data(), L.window, sinks ? sinks + task.g0 * n_rep : nullptr);
                return;
            }
            float* scores = att_scratch_ + int64_t(ith) * attention_scratch_floats(n_rep, max_capacity_);
            const int64_t r = task.r0;
            for (int64_t g = task.g0; g < task.g0 + task.n_heads; g++) {
                attention_group(kvh_, row.ctx->k_head(il, g), row.ctx->v_head(il, g), q_ + r * Q + g * n_rep * HD, 0,
                                n_rep, row.pos + 1, scale, xn_ + r * Q + g * n_rep * HD, scores, L.window,
                                sinks ? sinks + g * n_rep : nullptr);
            }
        });
        if (h.mla()) mla_head_outputs(L, n);
        matmuls(xn_, n, h.mla() ? h.n_head * h.mla_v_head : Q, {{&L.wo, out_}});

        pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++) {
                float* x = x_ + r * E;
                float* o = out_ + r * E;
                if (!L.attn_post_norm.empty()) rms_norm(o, L.attn_post_norm.data(), o, E, h.rms_eps);   // gemma3
                if (L.bo.empty()) {
                    for (int64_t i = 0; i < E; i++) x[i] += o[i];
                } else {
                    for (int64_t i = 0; i < E; i++) x[i] += o[i] + L.bo[size_t(i)];
                }
                rms_norm(x, L.ffn_norm.data(), xn_ + r * E, E, h.rms_eps);
            }
        });
        if (L.moe()) {
            moe_ffn(L, n);
        } else {
            matmuls(xn_, n, E, {{&L.w_gate, gate_}, {&L.w_up, up_}});
            pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
                for (int64_t r = b; r < e; r++) gated_activation(h.ffn_act, gate_ + r * F, up_ + r * F, F);
            });
            matmuls(gate_, n, F, {{&L.w_down, out_}});
        }
        pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++) {
                float* x = x_ + r * E;
                float* o = out_ + r * E;
                if (!L.ffn_post_norm.empty()) rms_norm(o, L.ffn_post_norm.data(), o, E, h.rms_eps);   // gemma3
                for (int64_t i = 0; i < E; i++) x[i] += o[i];
            }
        });
    }

    // logits of the rows that want them
    std::vector<int64_t> out_rows;
    for (int64_t r = 0; r < n; r++)
        if (rows[r].logits_out) out_rows.push_back(r);
    const int64_t n_out = int64_t(out_rows.size());
    if (n_out == 0) return;
    for (int64_t j = 0; j < n_out; j++) {
        rms_norm(x_ + out_rows[size_t(j)] * E, m.output_norm.data(), xn_ + j * E, E, h.rms_eps);
    }
    matmuls(xn_, n_out, E, {{&m.output, logits_tmp_}});
    if (h.final_logit_softcap != 0.0f) {   // gemma3 files that ask for it: cap * tanh(logit / cap)
        const float cap = h.final_logit_softcap;
        for (int64_t i = 0; i < n_out * h.n_vocab; i++) logits_tmp_[i] = cap * std::tanh(logits_tmp_[i] / cap);
    }
    for (int64_t j = 0; j < n_out; j++) {
        std::memcpy(rows[out_rows[size_t(j)]].logits_out, logits_tmp_ + j * h.n_vocab, sizeof(float) * size_t(h.n_vocab));
    }
}

}  // namespace strata
