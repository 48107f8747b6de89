// Engine construction (model, KV layout, arena plan, contexts, thread pool) and the context
// operations: prefill, decode, logits, truncate, copy, raw KV read/write.
//
// Not here: the forward pass itself (forward.cpp).
#include "engine.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <set>

#include "attention.h"
#include "mapped-read-guard.h"
#include "quants-packed.h"
#include "quants.h"

namespace strata {

namespace {

// Row-interleaved copies (quants-packed.h) of the product weights whose type this build packs, in
// 64-byte aligned buffers owned by the model, packed over the pool in runs of groups. The GGUF data
// stays mapped and in use (embeddings read token_embd, which `output` may share).
void pack_product_weights(model& m, thread_pool& pool) {
    constexpr int64_t k_groups_per_task = 64;   // 1024 rows a task
    struct task {
        const weight* w;
        uint8_t* dst;
        int64_t g0, g1;
    };
    std::vector<task> tasks;
    for (weight* w : m.product_weights()) {
        if (!packed_supported(w->type)) continue;
        const size_t nb = packed_bytes(w->type, w->n_rows, w->n_cols);
        uint8_t* p = nullptr;
        try {   // aligned operator new: std::aligned_alloc is missing from MSVC
            p = static_cast<uint8_t*>(::operator new[](nb, std::align_val_t(64)));
        } catch (const std::bad_alloc&) {
            throw engine_error("out of memory for the packed copy of a weight (" + std::to_string(nb) + " bytes)");
        }
        m.packed_store.emplace_back(p, [](uint8_t* q) { ::operator delete[](q, std::align_val_t(64)); });
        w->packed = p;
        const int64_t n_groups = (w->n_rows + PACK_ROWS - 1) / PACK_ROWS;
        for (int64_t g = 0; g < n_groups; g += k_groups_per_task) {
            tasks.push_back({w, p, g, std::min(n_groups, g + k_groups_per_task)});
        }
    }
    pool.parallel_chunks(int64_t(tasks.size()), [&](int64_t i, int) {
        const task& t = tasks[size_t(i)];
        pack_rows(t.w->type, t.w->data, t.w->row_bytes, t.w->n_rows, t.w->n_cols, t.dst, t.g0, t.g1);
    });
}

}  // namespace

engine::engine(const std::string& model_path, const engine_params& params) : params_(params) {
    if (params_.n_ctx <= 0) throw engine_error("n_ctx must be positive, got " + std::to_string(params_.n_ctx));
    if (params_.n_slots < 0) throw engine_error("n_slots must be >= 0, got " + std::to_string(params_.n_slots));
    if (params_.n_groups < 1) throw engine_error("n_groups must be >= 1, got " + std::to_string(params_.n_groups));
    if (params_.slot_ctx < 0) throw engine_error("slot_ctx must be >= 0, got " + std::to_string(params_.slot_ctx));
    if (params_.n_threads < 0) throw engine_error("n_threads must be >= 0, got " + std::to_string(params_.n_threads));
    if (params_.max_chunk < 1) throw engine_error("max_chunk must be >= 1");
    if (params_.slot_ctx == 0) params_.slot_ctx = params_.n_ctx;
    if (params_.n_threads == 0) params_.n_threads = physical_core_count();

    model_ = model_load(std::make_shared<gguf_file>(model_path));
    const model_hparams& h = model_->hp;

    int32_t kv_type_id;
    if (params_.kv_type == "f16") {
        kv_type_id = TYPE_F16;
    } else if (params_.kv_type == "f32") {
        kv_type_id = TYPE_F32;
    } else if (params_.kv_type == "q8_0") {
        kv_type_id = TYPE_Q8_0;
    } else {
        throw engine_error("unknown kv_type '" + params_.kv_type + "' (use f16, q8_0 or f32)");
    }
    try {
        // deepseek2: the latent is K and V at once (one buffer; the values read the keys), save in q8_0
        // (whose K tiles hold quantized blocks: V keeps rows of its own there)
        const bool v_in_k = h.mla() && kv_type_id != TYPE_Q8_0;
        // (the heads' outputs past the latent, the rotated key part's, are never read: not computed)
        kv_ = kv_layout_make(kv_type_id, h.n_layer, h.n_head_kv, h.head_dim, v_in_k, h.kv_lora_rank);
        kvh_ = kv_layout_make(kv_type_id, h.n_layer, 1, h.head_dim, v_in_k, h.kv_lora_rank);
    } catch (const std::invalid_argument& e) {
        throw engine_error(std::string("kv_type ") + params_.kv_type + ": " + e.what());
    }
    const bool on_gpu = params_.backend == "cuda";
    if (!on_gpu && params_.backend != "cpu") {
        throw engine_error("unknown backend '" + params_.backend + "' (use cpu or cuda)");
    }
    if (on_gpu && h.moe()) {
        throw engine_error("backend 'cuda': models with experts (" + h.arch + ", " + std::to_string(h.n_expert) +
                           " experts) run on the CPU backend only (use backend cpu)");
    }
    if (on_gpu && (h.arch == "smollm3")) {
        throw engine_error("backend 'cuda': smollm3 (layers without RoPE) runs on the CPU backend only (use backend cpu)");
    }
    if (on_gpu && (h.arch == "gemma3" || h.swa_rope())) {
        throw engine_error("backend 'cuda': " + h.arch + " (GeGLU, sandwich norms, the windowed layers' RoPE) runs "
                           "on the CPU backend only (use backend cpu)");
    }
    if (on_gpu && h.mla()) {
        throw engine_error("backend 'cuda': " + h.arch + " (multi-head latent attention) runs on the CPU backend only "
                           "(use backend cpu)");
    }
    if (on_gpu && h.attn_temp_scale != 0.0f) {
        throw engine_error("backend 'cuda': models with an attention temperature (" + h.arch +
                           ", attention.temperature_scale) run on the CPU backend only (use backend cpu)");
    }
#ifndef STRATA_WITH_CUDA
    if (on_gpu) throw engine_error("backend 'cuda': this build has no CUDA backend (rebuild with -Ccmake.define.STRATA_CUDA=ON)");
#endif

    // ---- arena plan: contexts' KV and logits, then scratch
    const int n_ctx_total = 1 + params_.n_slots;
    arena_ = std::make_unique<arena>();
    auto kv_handles = std::vector<std::vector<size_t>>(size_t(n_ctx_total));
    std::vector<size_t> logit_handles;
    contexts_.resize(size_t(n_ctx_total));
    for (int i = 0; i < n_ctx_total; i++) {
        context& c = contexts_[size_t(i)];
        c.id = i;
        c.group = i == 0 ? -1 : (i - 1) % params_.n_groups;
        c.capacity = i == 0 ? params_.n_ctx : params_.slot_ctx;
        c.k_head_bytes = kvh_.k_bytes(c.capacity);
        c.v_head_bytes = kvh_.v_bytes(c.capacity);
        max_capacity_ = std::max(max_capacity_, c.capacity);
        for (int64_t il = 0; il < h.n_layer; il++) {
            kv_handles[size_t(i)].push_back(arena_->add(on_gpu ? 0 : size_t(h.n_head_kv) * c.k_head_bytes));   // K
            kv_handles[size_t(i)].push_back(arena_->add(on_gpu ? 0 : size_t(h.n_head_kv) * c.v_head_bytes));   // V
        }
        logit_handles.push_back(arena_->add(sizeof(float) * size_t(h.n_vocab)));
    }
    max_rows_ = std::max<int64_t>(params_.max_chunk, n_ctx_total);
    const int64_t R = max_rows_;
    // a MoE model's experts have buffers of their own (below); gate_ / up_ hold its dense leading layers'
    // and shared experts' activations (glm4moe)
    const int64_t dense_ff = std::max(h.moe() && h.n_layer_dense_lead == 0 ? 0 : h.n_ff, h.n_ff_exp * h.n_expert_shared);
    // deepseek2's per-head products (head_products) quantize n_head rows per row into xq_[0]: attn_k_b's
    // of nope, attn_v_b's of kv_lora_rank; nope may exceed head_dim (a KV row of 16 + 8, nope 256)
    const int64_t mla_nope = h.mla() ? h.mla_qk_head - h.n_rot : 0;
    const int64_t wide = std::max({h.n_embd, h.q_dim(), dense_ff, h.n_head * h.mla_v_head, h.q_lora_rank,
                                   h.n_head * std::max(mla_nope, h.kv_lora_rank)});
    auto fbuf = [&](int64_t n) { return arena_->add(sizeof(float) * size_t(n)); };
    // xn_ also holds deepseek2's heads' outputs (n_head * mla_v_head) for attn_output
    size_t hx = fbuf(R * h.n_embd), hxn = fbuf(R * std::max({h.n_embd, h.q_dim(), h.n_head * h.mla_v_head}));
    size_t hq = fbuf(R * h.q_dim());
    size_t hk = fbuf(R * h.kv_dim()), hv = fbuf(R * h.kv_dim()), hg = fbuf(R * dense_ff), hu = fbuf(R * dense_ff);
    size_t ho = fbuf(R * h.n_embd);
    const int64_t pairs = R * h.n_expert_used;   // 0 without experts: the handles below stay empty
    size_t hrouter = fbuf(R * h.n_expert), hmg = fbuf(pairs * h.n_ff_exp), hmu = fbuf(pairs * h.n_ff_exp);
    size_t hmo = fbuf(pairs * h.n_embd);
    size_t hmla_q = fbuf(R * h.n_head * h.mla_qk_head), hmla_qa = fbuf(R * h.q_lora_rank);
    size_t hmla_in = fbuf(h.n_head * R * std::max(mla_nope, h.kv_lora_rank));
    size_t hmla_out = fbuf(h.n_head * R * std::max(h.kv_lora_rank, h.mla_v_head));
    moe_xq_row_bytes_ = h.moe() ? (sizeof(float) * size_t(std::max(h.n_embd, h.n_ff_exp)) + 127) / 64 * 64 : 0;
    size_t hmxq[2];
    for (auto& hh : hmxq) hh = arena_->add(moe_xq_row_bytes_ * size_t(pairs));
    // f32 activations (4 bytes/element) are the widest format; Q8_0/Q8_1/Q8_K and the packed
    // products' prepared rows (40 bytes per 32 elements, 288 / 336 per 256 for Q4_K and Q5_K / Q6_K) all take less
    xq_bytes_ = (sizeof(float) * size_t(wide) + 127) / 64 * 64;
    size_t hxq[3];
    for (auto& hh : hxq) hh = arena_->add(xq_bytes_ * size_t(R));
    size_t hatt = fbuf(int64_t(params_.n_threads) * attention_scratch_floats(h.n_head / h.n_head_kv, max_capacity_));
    size_t hrope = fbuf(R * h.n_rot), hrope_swa = fbuf(h.swa_rope() ? R * h.n_rot : 0);
    // never above max_rows_ (>= n_ctx_total, so every decode row still has room): extend()'s one limit
    max_logit_rows_ = std::min(max_rows_, std::max<int64_t>(n_ctx_total, k_extend_logit_rows));
    size_t hlog = fbuf(max_logit_rows_ * h.n_vocab);
    arena_->allocate();

    for (int i = 0; i < n_ctx_total; i++) {
        context& c = contexts_[size_t(i)];
        for (int64_t il = 0; il < h.n_layer; il++) {
            c.k.push_back(arena_->ptr(kv_handles[size_t(i)][size_t(2 * il)]));
            c.v.push_back(kvh_.v_in_k ? c.k.back() : arena_->ptr(kv_handles[size_t(i)][size_t(2 * il + 1)]));
        }
        c.logits = reinterpret_cast<float*>(arena_->ptr(logit_handles[size_t(i)]));
    }
    auto fp = [&](size_t hh) { return reinterpret_cast<float*>(arena_->ptr(hh)); };
    x_ = fp(hx); xn_ = fp(hxn); q_ = fp(hq); kbuf_ = fp(hk); vbuf_ = fp(hv); gate_ = fp(hg); up_ = fp(hu);
    out_ = fp(ho);
    if (h.moe()) {
        router_ = fp(hrouter); moe_gate_ = fp(hmg); moe_up_ = fp(hmu); moe_out_ = fp(hmo);
        for (int i = 0; i < 2; i++) moe_xq_[i] = arena_->ptr(hmxq[i]);
    }
    for (int i = 0; i < 3; i++) xq_[i] = arena_->ptr(hxq[i]);
    if (h.mla()) {
        mla_q_ = fp(hmla_q); mla_qa_ = fp(hmla_qa); mla_in_ = fp(hmla_in); mla_out_ = fp(hmla_out);
    }
    att_scratch_ = fp(hatt);
    rope_ = fp(hrope);
    rope_swa_ = h.swa_rope() ? fp(hrope_swa) : nullptr;
    if (h.swa_rope()) swa_rope_hp_ = h.swa_rope_hparams();
    logits_tmp_ = fp(hlog);

    pool_ = std::make_unique<thread_pool>(params_.n_threads);
    // Every context's KV backed now, at load, rather than by its first request (arena::populate).
    const auto pieces = arena_->pieces(size_t(16) << 20);
    pool_->parallel_chunks(int64_t(pieces.size()), [&](int64_t i, int) {
        arena::populate(pieces[size_t(i)].first, pieces[size_t(i)].second);
    });
    if (!on_gpu && params_.pack_weights) pack_product_weights(*model_, *pool_);
#ifdef STRATA_WITH_CUDA
    if (on_gpu) {
        std::vector<int64_t> capacities;
        for (const context& c : contexts_) capacities.push_back(c.capacity);
        try {
            gpu_ = std::make_unique<cuda_backend>(*model_, kv_.type, kv_.row_bytes, capacities, max_rows_, max_logit_rows_);
        } catch (const cuda_error& e) {
            throw engine_error(std::string("backend 'cuda': ") + e.what());
        }
    }
#endif
}

const context& engine::ctx(int id) const {
    if (id < 0 || id >= int(contexts_.size())) {
        throw engine_error("context id " + std::to_string(id) + " out of range [0, " +
                           std::to_string(contexts_.size()) + ")");
    }
    return contexts_[size_t(id)];
}

context& engine::ctx_mut(int id) { return const_cast<context&>(ctx(id)); }

std::vector<int32_t> engine::context_tokens(int ctx_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return ctx(ctx_id).tokens;
}

int64_t engine::context_len(int ctx_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return int64_t(ctx(ctx_id).tokens.size());
}

bool engine::context_has_logits(int ctx_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    return ctx(ctx_id).has_logits;
}

void engine::check_tokens(const int32_t* tokens, int64_t n) const {
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= hp().n_vocab) {
            throw engine_error("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                               " is outside the vocabulary [0, " + std::to_string(hp().n_vocab) + ")");
        }
    }
}

void engine::prefill(int ctx_id, const int32_t* tokens, int64_t n_tokens, int64_t chunk) {
    std::lock_guard<std::mutex> lock(mutex_);
    context& c = ctx_mut(ctx_id);
    if (n_tokens < 0) throw engine_error("prefill: negative token count");
    if (chunk < 1) throw engine_error("prefill: chunk must be >= 1, got " + std::to_string(chunk));
    int64_t n0 = int64_t(c.tokens.size());
    if (n0 + n_tokens > c.capacity) {
        throw engine_error("prefill: context " + std::to_string(ctx_id) + " holds " + std::to_string(n0) +
                           " tokens; " + std::to_string(n_tokens) + " more exceed its capacity " +
                           std::to_string(c.capacity));
    }
    check_tokens(tokens, n_tokens);
    if (n_tokens == 0) return;
    chunk = std::min(chunk, max_rows_);   // results do not depend on chunking (bitwise rule)
    std::vector<batch_row> rows;
    const bool had_logits = c.has_logits;   // an interrupted call gives them back: the forward writes none before its end
    c.has_logits = false;
    try {
        for (int64_t b = 0; b < n_tokens; b += chunk) {
            int64_t e = std::min(n_tokens, b + chunk);
            rows.clear();
            for (int64_t i = b; i < e; i++) {
                rows.push_back({&c, tokens[i], n0 + i, i == n_tokens - 1 ? c.logits : nullptr});
            }
            forward(rows.data(), int64_t(rows.size()));
            c.tokens.insert(c.tokens.end(), tokens + b, tokens + e);
        }
    } catch (const engine_interrupted&) {
        c.tokens.resize(size_t(n0));   // none of the call's tokens, its earlier chunks' neither: as its caller knows it
        c.has_logits = had_logits;
        throw;
    }
    c.has_logits = true;
}

void engine::decode(const int* ctx_ids, const int32_t* tokens, int64_t n, float* logits_out) {
    std::lock_guard<std::mutex> lock(mutex_);
    run_step("decode", nullptr, nullptr, 0, nullptr, ctx_ids, tokens, n, logits_out);
}

void engine::step(const int* piece_ids, const int64_t* piece_lens, int64_t n_pieces, const int32_t* piece_tokens,
                  const int* ctx_ids, const int32_t* d_tokens, int64_t n_d, float* logits_out) {
    std::lock_guard<std::mutex> lock(mutex_);
    run_step("step", piece_ids, piece_lens, n_pieces, piece_tokens, ctx_ids, d_tokens, n_d, logits_out);
}

void engine::extend(const int* piece_ids, const int64_t* piece_lens, int64_t n_pieces, const int32_t* piece_tokens,
                    float* logits_out) {
    std::lock_guard<std::mutex> lock(mutex_);
    run_step("extend", piece_ids, piece_lens, n_pieces, piece_tokens, nullptr, nullptr, 0, nullptr, logits_out);
}

void engine::check_logit_rows(const char* op, int64_t n) const {
    if (n > max_logit_rows_) {
        throw engine_error(std::string(op) + ": " + std::to_string(n) + " tokens exceed the limit of " +
                           std::to_string(max_logit_rows_) + " rows with logits in one forward");
    }
}

void engine::run_step(const char* op, const int* piece_ids, const int64_t* piece_lens, int64_t n_pieces,
                      const int32_t* piece_tokens, const int* ctx_ids, const int32_t* d_tokens, int64_t n_d,
                      float* logits_out, float* piece_logits) {
    const std::string where = std::string(op) + ": ";
    const size_t V = size_t(hp().n_vocab);
    if (n_pieces < 0 || n_d < 0) throw engine_error(where + "negative count");
    int64_t n_p = 0;
    for (int64_t k = 0; k < n_pieces; k++) {
        if (piece_lens[k] < 1) throw engine_error(where + "an empty prompt piece");
        n_p += piece_lens[k];
    }
    if (piece_logits) check_logit_rows(op, n_p);
    if (n_p + n_d > max_rows_) {
        throw engine_error(where + std::to_string(n_p) + " prompt tokens + " + std::to_string(n_d) +
                           " decode rows exceed the batch limit of " + std::to_string(max_rows_) + " rows");
    }
    std::set<int> seen;
    std::vector<batch_row> rows;
    rows.reserve(size_t(n_p + n_d));
    std::vector<context*> pieces;
    const int32_t* pt = piece_tokens;
    for (int64_t k = 0; k < n_pieces; k++) {
        context& c = ctx_mut(piece_ids[k]);
        if (!seen.insert(c.id).second) throw engine_error(where + "context " + std::to_string(c.id) + " appears twice");
        const int64_t n0 = int64_t(c.tokens.size()), n = piece_lens[k];
        if (n0 + n > c.capacity) {
            throw engine_error(where + "context " + std::to_string(c.id) + " holds " + std::to_string(n0) +
                               " tokens; " + std::to_string(n) + " more exceed its capacity " +
                               std::to_string(c.capacity));
        }
        for (int64_t i = 0; i < n; i++) {
            float* out = piece_logits ? piece_logits + size_t(rows.size()) * V : (i == n - 1 ? c.logits : nullptr);
            rows.push_back({&c, pt[i], n0 + i, out});
        }
        pieces.push_back(&c);
        pt += n;
    }
    check_tokens(piece_tokens, n_p);
    for (int64_t i = 0; i < n_d; i++) {
        context& c = ctx_mut(ctx_ids[i]);
        if (!seen.insert(c.id).second) throw engine_error(where + "context " + std::to_string(c.id) + " appears twice");
        if (int64_t(c.tokens.size()) + 1 > c.capacity) {
            throw engine_error(where + "context " + std::to_string(c.id) + " is full (" + std::to_string(c.capacity) +
                               " tokens)");
        }
        // into the caller's array (rows V floats apart: the forward writes them there in place), then
        // into the context's own logits below
        rows.push_back({&c, d_tokens[i], int64_t(c.tokens.size()), logits_out + size_t(i) * V});
    }
    check_tokens(d_tokens, n_d);
    if (rows.empty()) return;
    // interrupted (engine_interrupted), the contexts keep their logits: a row's are written only after the last layer
    std::vector<std::pair<context*, bool>> had_logits;
    for (auto& r : rows) had_logits.push_back({r.ctx, r.ctx->has_logits});
    for (auto& r : rows) r.ctx->has_logits = false;
    try {
        forward(rows.data(), int64_t(rows.size()));
    } catch (const engine_interrupted&) {
        for (auto it = had_logits.rbegin(); it != had_logits.rend(); ++it) it->first->has_logits = it->second;
        throw;
    }
    pt = piece_tokens;
    int64_t row_end = 0;
    for (int64_t k = 0; k < n_pieces; k++) {
        context& c = *pieces[size_t(k)];
        c.tokens.insert(c.tokens.end(), pt, pt + piece_lens[k]);
        row_end += piece_lens[k];
        // extend(): the context's own logits are its last row's, as after prefill()
        if (piece_logits) std::memcpy(c.logits, piece_logits + size_t(row_end - 1) * V, V * sizeof(float));
        c.has_logits = true;
        pt += piece_lens[k];
    }
    for (int64_t i = 0; i < n_d; i++) {
        context& c = *rows[size_t(n_p + i)].ctx;
        c.tokens.push_back(d_tokens[i]);
        c.has_logits = true;
        std::memcpy(c.logits, logits_out + size_t(i) * V, V * sizeof(float));
    }
}

void engine::logits(int ctx_id, float* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    const context& c = ctx(ctx_id);
    if (!c.has_logits) {
        throw engine_error("context " + std::to_string(ctx_id) +
                           " has no logits: its last position was not computed here (empty, truncated, copied "
                           "or restored); prefill or decode at least one token first");
    }
    std::memcpy(out, c.logits, sizeof(float) * size_t(hp().n_vocab));
}

void engine::truncate(int ctx_id, int64_t n_tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    context& c = ctx_mut(ctx_id);
    if (n_tokens < 0 || n_tokens > int64_t(c.tokens.size())) {
        throw engine_error("truncate: context " + std::to_string(ctx_id) + " holds " +
                           std::to_string(c.tokens.size()) + " tokens, cannot truncate to " + std::to_string(n_tokens));
    }
    if (n_tokens < int64_t(c.tokens.size())) c.has_logits = false;
    c.tokens.resize(size_t(n_tokens));
}

void engine::copy(int src_id, int dst_id, int64_t n_tokens) {
    std::lock_guard<std::mutex> lock(mutex_);
    const context& s = ctx(src_id);
    context& d = ctx_mut(dst_id);
    if (src_id == dst_id) throw engine_error("copy: source and destination are both context " + std::to_string(src_id));
    if (n_tokens < 0 || n_tokens > int64_t(s.tokens.size())) {
        throw engine_error("copy: context " + std::to_string(src_id) + " holds " + std::to_string(s.tokens.size()) +
                           " tokens, cannot copy " + std::to_string(n_tokens));
    }
    if (n_tokens > d.capacity) {
        throw engine_error("copy: " + std::to_string(n_tokens) + " tokens exceed context " + std::to_string(dst_id) +
                           "'s capacity " + std::to_string(d.capacity));
    }
    const size_t nk = kv_prefix_bytes(kvh_, true, n_tokens), nv = kv_prefix_bytes(kvh_, false, n_tokens);
#ifdef STRATA_WITH_CUDA
    if (gpu_) gpu_->kv_copy(src_id, dst_id, n_tokens);
    else
#endif
    pool_->parallel_range(2 * kv_.n_layer, 1, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; i++) {
            const int64_t il = i / 2;
            for (int64_t g = 0; g < kv_.n_head_kv; g++) {   // per head: the two may differ in capacity
                if (i % 2 == 0) std::memcpy(d.k_head(il, g), s.k_head(il, g), nk);
                else std::memcpy(d.v_head(il, g), s.v_head(il, g), nv);
            }
        }
    });
    d.tokens.assign(s.tokens.begin(), s.tokens.begin() + n_tokens);
    d.has_logits = s.has_logits && n_tokens == int64_t(s.tokens.size());
    if (d.has_logits) std::memcpy(d.logits, s.logits, sizeof(float) * size_t(hp().n_vocab));
}

void engine::kv_read(int ctx_id, int64_t t0, int64_t t1, uint8_t* dst) {
    std::lock_guard<std::mutex> lock(mutex_);
    const context& c = ctx(ctx_id);
    if (t0 < 0 || t1 < t0 || t1 > int64_t(c.tokens.size())) {
        throw engine_error("kv_read: range [" + std::to_string(t0) + ", " + std::to_string(t1) +
                           ") outside context " + std::to_string(ctx_id) + "'s " + std::to_string(c.tokens.size()) +
                           " tokens");
    }
    const size_t nb = kv_.row_bytes * size_t(t1 - t0);
#ifdef STRATA_WITH_CUDA
    if (gpu_) gpu_->kv_read(ctx_id, t0, t1, dst);
    else
#endif
    for (int64_t il = 0; il < kv_.n_layer; il++) {
        for (int64_t g = 0; g < kv_.n_head_kv; g++)   // head g's part of each whole row
            kv_get_rows(kvh_, c.k_head(il, g), true, t0, t1, dst + size_t(g) * kvh_.row_bytes, kv_.row_bytes);
        dst += nb;
        if (kv_.v_in_k) continue;   // V is K
        for (int64_t g = 0; g < kv_.n_head_kv; g++)
            kv_get_rows(kvh_, c.v_head(il, g), false, t0, t1, dst + size_t(g) * kvh_.row_bytes, kv_.row_bytes);
        dst += nb;
    }
}

bool engine::kv_write(int ctx_id, int64_t t0, const int32_t* tokens, int64_t n, const uint8_t* src, bool src_mapped) {
    const size_t src_bytes = kv_.bytes_per_token() * size_t(n > 0 ? n : 0);
#ifdef STRATA_WITH_CUDA
    std::vector<uint8_t> host;   // the driver's copy must not fault: a mapped src goes through host memory
    if (gpu_ && src_mapped) {
        host.resize(src_bytes);
        if (!mapped_copy(host.data(), src, src_bytes)) return false;
    }
    const uint8_t* const rows = host.empty() ? src : host.data();
    const bool guard_rows = src_mapped && host.empty();
#else
    const uint8_t* const rows = src;
    const bool guard_rows = src_mapped;
#endif
    std::lock_guard<std::mutex> lock(mutex_);
    context& c = ctx_mut(ctx_id);
    if (t0 != int64_t(c.tokens.size())) {
        throw engine_error("kv_write: context " + std::to_string(ctx_id) + " holds " + std::to_string(c.tokens.size()) +
                           " tokens; writes must append at that position, not at " + std::to_string(t0));
    }
    if (n < 0 || t0 + n > c.capacity) {
        throw engine_error("kv_write: " + std::to_string(t0 + n) + " tokens exceed context " + std::to_string(ctx_id) +
                           "'s capacity " + std::to_string(c.capacity));
    }
    check_tokens(tokens, n);
    const size_t nb = kv_.row_bytes * size_t(n);
    // Rows past the context's length are written before its tokens are: a fault leaves it unchanged.
    auto copy_rows = [&](const uint8_t* p) {
#ifdef STRATA_WITH_CUDA
        if (gpu_) return gpu_->kv_write(ctx_id, t0, n, p);
#endif
        for (int64_t il = 0; il < kv_.n_layer; il++) {
            for (int64_t g = 0; g < kv_.n_head_kv; g++)
                kv_set_rows(kvh_, c.k_head(il, g), true, t0, t0 + n, p + size_t(g) * kvh_.row_bytes, kv_.row_bytes);
            p += nb;
            if (kv_.v_in_k) continue;   // V is K
            for (int64_t g = 0; g < kv_.n_head_kv; g++)
                kv_set_rows(kvh_, c.v_head(il, g), false, t0, t0 + n, p + size_t(g) * kvh_.row_bytes, kv_.row_bytes);
            p += nb;
        }
    };
    if (!mapped_read(rows, guard_rows ? src_bytes : 0, [&] { copy_rows(rows); })) return false;
    c.tokens.insert(c.tokens.end(), tokens, tokens + n);
    c.has_logits = false;
    return true;
}

}  // namespace strata
