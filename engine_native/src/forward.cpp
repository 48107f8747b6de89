// The forward pass of a batch of rows (prefill chunk or batched decode): embeddings, per layer
// RMSNorm -> Q/K/V -> RoPE -> KV store -> attention -> output projection -> RMSNorm -> SwiGLU FFN
// (or a mixture of SwiGLU experts), then the final norm and the logits of the rows that want them.
// The architectures' extras ride along where the weights have them (model.h): Q/K/V and output
// biases, Q/K norms, attention sinks and a layer's sliding window (with its own RoPE), router and
// expert biases, gpt-oss's clamped SwiGLU, mistral3's query temperature, glm4moe's sigmoid routing and
// shared experts, gemma3's scaled embeddings, GeGLU, post-attention / post-FFN norms and logit cap,
// deepseek2's multi-head latent attention (one latent KV head; queries absorbed per head by attn_k_b,
// outputs leaving by attn_v_b).
//
// Not here: weight formats (quants.h kernels), attention inner loops (attention.cpp, attention-grouped.cpp,
// attention-q8.cpp), the KV store and layout (kv-layout.cpp), the per-row steps
// (forward-rows.h), the mixture of experts (forward-moe.cpp), the latent attention's projections
// (forward-mla.cpp).
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
#include "forward-rows.h"
#include "op-times.h"
#include "vec16.h"

namespace strata {

namespace {

constexpr int64_t k_weight_rows_per_chunk = 64;  // products: weight rows per claimed chunk
static_assert(k_weight_rows_per_chunk % PACK_ROWS == 0, "packed products take whole groups of rows");
static_assert(k_weight_rows_per_chunk % 16 == 0, "gated units start on gated_rows' 16-lane boundaries");
// One activation row: longer chunks, so that a packed product's two streams (quants-packed-avx2.cpp's
// packed_tile_pair: the chunk's first and second halves) are 8 groups apart (session 37: 64 rows, 2 apart, gained
// little; 256 rows ~11% over 64 on the default model's decode, one thread).
constexpr int64_t k_decode_rows_per_chunk = 256;
static_assert(k_decode_rows_per_chunk % k_weight_rows_per_chunk == 0, "decode chunks are whole product chunks");
constexpr int64_t k_min_group_rows = 2;   // attention: shorter runs of one context (decode rows) go row by row
constexpr int64_t k_group_gain = 3;       // a group's work per position, as a task cost, vs a lone row's
// attention of long lone rows in parts (attention_split_ok): from this many positions in the longest
// row, when the tasks leave a thread idle for over 1 / k_split_slack of the ideal time; a scores part
// covers k_split_tiles tiles (1,024 positions)
constexpr int64_t k_split_min_positions = 1024;
constexpr int64_t k_split_slack = 8;
constexpr int64_t k_split_tiles = 64;
#ifdef STRATA_OP_TIMES   // profiling builds (op-times.h): the op a matmuls() call's products are timed as
thread_local int products_op = OP_QKV;
#define STRATA_PRODUCTS_AS(kind) (products_op = (kind))
#else
#define STRATA_PRODUCTS_AS(kind) ((void)0)
#endif


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
            const int64_t v_dims = kvh_.v_in_k ? kvh_.v_dims : h.head_dim;   // deepseek2: the latent's only
            for (int64_t d = 0; d < v_dims; d += k_attention_split_dims) p.values.push_back({r, g, d, 0});
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

int engine::act_slots::slot_of(const weight& w) const {
    const int32_t k = w.packed ? 1000 + w.type : act_type_for(w.type);
    for (int s = 0; s < n; s++)
        if (key[s] == k) return s;
    throw engine_error("act_slots: a weight outside the group");
}

engine::act_slots engine::quantize_acts(const float* x, int64_t n_rows, int64_t n_cols, const weight* const* ws,
                                        int n_ws) {
    // distinct activation formats among the weights, each quantized once into its own xq_ buffer
    // (fixed arrays: a decode step makes ~120 of these calls, none allocates)
    act_slots a;
    int32_t wtype[3];
    for (int i = 0; i < n_ws; i++) {
        const weight* w = ws[i];
        const int32_t k = w->packed ? 1000 + w->type : act_type_for(w->type);
        int s = 0;
        while (s < a.n && a.key[s] != k) s++;
        if (s < a.n) continue;
        if (a.n == 3) throw engine_error("matmuls: more than 3 activation types in one group");
        a.key[s] = k;
        wtype[s] = w->type;
        a.row_bytes[s] = w->packed ? packed_act_row_bytes(w->type, n_cols) : act_row_bytes(w->type, n_cols);
        a.n++;
    }
    pool_->parallel_range(n_rows * a.n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; i++) {
            const int64_t s = i / n_rows, r = i % n_rows;
            uint8_t* dst = xq_[s] + size_t(r) * a.row_bytes[s];
            if (a.key[s] >= 1000) {
                quantize_act_row_packed(wtype[s], x + r * n_cols, dst, n_cols);
            } else {
                quantize_act_row(wtype[s], x + r * n_cols, dst, n_cols);
            }
        }
    });
    STRATA_OP_LAP(OP_ACT_QUANT);
    return a;
}

void engine::matmuls(const float* x, int64_t n_rows, int64_t n_cols, std::initializer_list<matmul_job> jobs) {
    const weight* ws[3];
    int n_w = 0;
    for (const matmul_job& j : jobs) {
        if (n_w == 3) throw engine_error("matmuls: more than 3 products in one group");
        ws[n_w++] = j.w;
    }
    const act_slots a = quantize_acts(x, n_rows, n_cols, ws, n_w);
    units_.clear();
    for (const matmul_job& j : jobs) {
        const int s = a.slot_of(*j.w);
        add_product_units(units_, *j.w, xq_[s], a.row_bytes[s], n_rows, j.y);
    }
    run_products(units_);
    STRATA_OP_LAP(products_op);
}

void engine::gated_matmuls(const float* x, int64_t n_rows, int64_t n_cols, const weight& gate, float* y_gate,
                           const weight& up, float* y_up, ffn_activation act) {
    if (gate.n_rows != up.n_rows) throw engine_error("gated_matmuls: gate and up differ in rows");
    const weight* ws[2] = {&gate, &up};
    const act_slots a = quantize_acts(x, n_rows, n_cols, ws, 2);
    const int sg = a.slot_of(gate), su = a.slot_of(up);
    units_.clear();
    add_product_units(units_, gate, xq_[sg], a.row_bytes[sg], n_rows, y_gate);
    for (product_unit& u : units_) {
        u.up = &up;
        u.up_xq = xq_[su];
        u.up_xq_row_bytes = a.row_bytes[su];
        u.y_up = y_up;
        u.act = act;
    }
    run_products(units_);
    STRATA_OP_LAP(products_op);
}

void engine::add_product_units(std::vector<product_unit>& units, const weight& w, const uint8_t* xq,
                               size_t xq_row_bytes, int64_t n_act, float* y) {
    const int64_t chunk = n_act == 1 ? k_decode_rows_per_chunk : k_weight_rows_per_chunk;
    for (int64_t r0 = 0; r0 < w.n_rows; r0 += chunk) {
        units.push_back({w, xq, xq_row_bytes, n_act, y, r0, std::min(w.n_rows, r0 + chunk)});
    }
}

void engine::run_products(const std::vector<product_unit>& units) {
    auto product = [](const weight& w, const uint8_t* xq, size_t xq_row_bytes, int64_t n_act, float* y, int64_t r0,
                      int64_t r1) {
        if (w.packed) {   // r0 is a multiple of k_weight_rows_per_chunk, so of PACK_ROWS
            matmul_packed(w.type, w.packed, w.n_rows, xq, xq_row_bytes, n_act, y, w.n_rows, w.n_cols, r0, r1);
        } else if (n_act == 1) {
            matvec(w.type, w.data, w.row_bytes, xq, y + r0, w.n_cols, r0, r1);
        } else {
            matmul(w.type, w.data, w.row_bytes, xq, xq_row_bytes, n_act, y, w.n_rows, w.n_cols, r0, r1);
        }
    };
    auto run_unit = [&](uint32_t c) {
        const product_unit& u = units[c];
        product(u.w, u.xq, u.xq_row_bytes, u.n_act, u.y, u.r0, u.r1);
        if (!u.y_up) return;
        // a gated FFN: up's same rows, then the activation over them (elementwise, and r0 a multiple of
        // 16: the lanes of gated_rows over the whole row, so the same floats)
        product(*u.up, u.up_xq, u.up_xq_row_bytes, u.n_act, u.y_up, u.r0, u.r1);
        const int64_t F = u.w.n_rows;
        for (int64_t t = 0; t < u.n_act; t++)
            gated_activation(u.act, u.y + t * F + u.r0, u.y_up + t * F + u.r0, u.r1 - u.r0);
    };
    // Each thread's share is one contiguous run of units, taken from its front, so that the
    // kernels' prefetch (a fixed distance ahead in the rows) runs into rows the same thread reads
    // next; with units dealt one at a time it ran into the other thread's. A thread done with its run
    // takes units from the back of the others' (a descheduled thread delays only the unit it holds).
    const int n_runs = pool_->size();
    const uint32_t n_units = uint32_t(units.size());
    thread_local std::unique_ptr<unit_run[]> held;   // the caller's, as large as its largest pool so far
    thread_local int n_held = 0;
    if (n_runs > n_held) {
        held.reset(new unit_run[size_t(n_runs)]);
        n_held = n_runs;
    }
    unit_run* runs = held.get();   // (the chunks below run on other threads: not their thread_local)
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

void engine::forward(const batch_row* rows, int64_t n) {
#ifdef STRATA_WITH_CUDA
    if (gpu_) {   // the same rows on the GPU (engine_native/cuda/cuda-backend.cu)
        std::vector<cuda_row> g;
        for (int64_t r = 0; r < n; r++) g.push_back({rows[r].ctx->id, rows[r].token, rows[r].pos, rows[r].logits_out});
        gpu_->forward(g.data(), n);
        return;
    }
#endif
    STRATA_OP_TIME(OP_FORWARD);
    const model& m = *model_;
    const model_hparams& h = m.hp;
    const int64_t E = h.n_embd, Q = h.q_dim(), KV = h.kv_dim(), F = h.n_ff, HD = h.head_dim;
    const int64_t n_rep = h.n_head / h.n_head_kv;
    const float scale = h.attn_scale != 0.0f ? h.attn_scale : 1.0f / std::sqrt(float(HD));
    const bool swa_rope = h.swa_rope();
    STRATA_OP_LAP_START();

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
    STRATA_OP_LAP(OP_EMBED);

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
    // Decode rows of distinct contexts, each attention task one row: a task prepares its own heads'
    // queries and K / V (rope_store below) before it attends, so that this per-row stage runs on every
    // thread; below k_rows_per_chunk rows it ran on the caller alone, the other threads waiting. Rows of
    // one context (one attends to the other's K / V) and the split path keep the stage before attention.
    bool rope_in_tasks = lone_rows_only && !split && !h.mla();
    if (rope_in_tasks) {
        std::vector<const context*> ctxs;
        for (int64_t r = 0; r < n; r++) ctxs.push_back(rows[r].ctx);
        std::sort(ctxs.begin(), ctxs.end());
        rope_in_tasks = std::adjacent_find(ctxs.begin(), ctxs.end()) == ctxs.end();
    }

    for (int64_t il = 0; il < h.n_layer; il++) {
        // between layers: no row's token is added yet (the callers add them after the forward), so an
        // interrupted forward leaves every context as it was
        if (interrupted_.load(std::memory_order_relaxed)) {
            throw engine_interrupted("interrupted at layer " + std::to_string(il) + " of " +
                                     std::to_string(h.n_layer) + ": none of the forward's " + std::to_string(n) +
                                     " tokens were added");
        }
        const layer_weights& L = m.layers[size_t(il)];

        pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++) rms_norm(x_ + r * E, L.attn_norm.data(), xn_ + r * E, E, h.rms_eps);
        });
        STRATA_OP_LAP(OP_ATTN_NORM);
        STRATA_PRODUCTS_AS(OP_QKV);
        if (h.mla()) mla_queries_and_kv(L, rows, n, il);
        else matmuls(xn_, n, E, {{&L.wq, q_}, {&L.wk, kbuf_}, {&L.wv, vbuf_}});

        // biases, Q/K norms, RoPE, then K/V into the cache at the row's position, for kv heads [g0, g1) of
        // row r and their query heads (each element the same operations whichever heads a call covers)
        auto rope_store = [&](int64_t r, int64_t g0, int64_t g1) {
            float* q = q_ + r * Q;
            float* k = kbuf_ + r * KV;
            float* v = vbuf_ + r * KV;
            const int64_t q0 = g0 * n_rep * HD, q1 = g1 * n_rep * HD, k0 = g0 * HD, k1 = g1 * HD;
            if (!L.bq.empty()) {
                for (int64_t i = q0; i < q1; i++) q[i] += L.bq[size_t(i)];
                for (int64_t i = k0; i < k1; i++) k[i] += L.bk[size_t(i)];
                for (int64_t i = k0; i < k1; i++) v[i] += L.bv[size_t(i)];
            }
            if (!L.q_norm.empty()) {
                for (int64_t hh = g0 * n_rep; hh < g1 * n_rep; hh++)
                    rms_norm(q + hh * HD, L.q_norm.data(), q + hh * HD, HD, h.rms_eps);
                for (int64_t hh = g0; hh < g1; hh++) rms_norm(k + hh * HD, L.k_norm.data(), k + hh * HD, HD, h.rms_eps);
            }
            const float* cs = (swa_rope && L.window > 0 ? rope_swa_ : rope_) + r * h.n_rot;
            if (L.rope) {
                for (int64_t hh = g0 * n_rep; hh < g1 * n_rep; hh++) rope_head(q + hh * HD, cs, h.n_rot, h.rope);
                for (int64_t hh = g0; hh < g1; hh++) rope_head(k + hh * HD, cs, h.n_rot, h.rope);
            }
            const batch_row& row = rows[r];
            if (h.attn_temp_scale != 0.0f) {   // mistral3: the query's temperature at this position
                const float t = h.attn_temperature(row.pos);
                for (int64_t i = q0; i < q1; i++) q[i] *= t;
            }
            for (int64_t g = g0; g < g1; g++)
                kv_store(kvh_, row.ctx->k_head(il, g), row.ctx->v_head(il, g), row.pos, k + g * HD, v + g * HD);
        };
        if (!h.mla() && !rope_in_tasks) pool_->parallel_range(n, 1, k_rows_per_chunk, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; r++) rope_store(r, 0, h.n_head_kv);
        });
        STRATA_OP_LAP(OP_ROPE_KV);

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
            if (rope_in_tasks) rope_store(r, task.g0, task.g0 + task.n_heads);
            for (int64_t g = task.g0; g < task.g0 + task.n_heads; g++) {
                attention_group(kvh_, row.ctx->k_head(il, g), row.ctx->v_head(il, g), q_ + r * Q + g * n_rep * HD, 0,
                                n_rep, row.pos + 1, scale, xn_ + r * Q + g * n_rep * HD, scores, L.window,
                                sinks ? sinks + g * n_rep : nullptr);
            }
        });
        if (h.mla()) mla_head_outputs(L, n);
        STRATA_OP_LAP(OP_ATTENTION);
        STRATA_PRODUCTS_AS(OP_WO);
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
        STRATA_OP_LAP(OP_FFN_NORM);
        STRATA_PRODUCTS_AS(OP_GATE_UP);
        if (L.moe()) {
            moe_ffn(L, n);
        } else {
            gated_matmuls(xn_, n, E, L.w_gate, gate_, L.w_up, up_, h.ffn_act);
            STRATA_OP_LAP(OP_ACTIVATION);
            STRATA_PRODUCTS_AS(OP_DOWN);
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
        STRATA_OP_LAP(OP_RESIDUAL);
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
    STRATA_OP_LAP(OP_OUTPUT_NORM);
    STRATA_PRODUCTS_AS(OP_OUTPUT);
    // straight into the rows' buffers when they lie n_vocab floats apart in row order (decode's and
    // extend's output arrays): no pass over (n_out, n_vocab) floats through logits_tmp_
    float* direct = rows[out_rows[0]].logits_out;
    for (int64_t j = 1; j < n_out && direct; j++)
        if (rows[out_rows[size_t(j)]].logits_out != direct + j * h.n_vocab) direct = nullptr;
    float* y = direct ? direct : logits_tmp_;
    matmuls(xn_, n_out, E, {{&m.output, y}});
    if (h.final_logit_softcap != 0.0f) {   // gemma3 files that ask for it: cap * tanh(logit / cap)
        const float cap = h.final_logit_softcap;
        for (int64_t i = 0; i < n_out * h.n_vocab; i++) y[i] = cap * std::tanh(y[i] / cap);
    }
    for (int64_t j = 0; j < n_out && !direct; j++) {
        std::memcpy(rows[out_rows[size_t(j)]].logits_out, logits_tmp_ + j * h.n_vocab, sizeof(float) * size_t(h.n_vocab));
    }
    STRATA_OP_LAP(OP_LOGITS_COPY);
}

}  // namespace strata
