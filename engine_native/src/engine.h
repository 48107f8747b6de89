// The engine: a model, its contexts (main + slots, each with token history and KV cache), the KV
// arena and the thread pool; the operations the Python façade exposes.
//
// Not here: the forward pass arithmetic (forward*.cpp, attention*.cpp, the KV layout in kv-layout.cpp),
// snapshot image format (Python, snapshot.py; this file only reads and writes raw KV by token range).
// Bitwise rule: a row's result never depends on the batch or on prefill chunking.
#pragma once

#include <atomic>
#include <memory>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include "arena.h"
#include "attention.h"
#include "model.h"
#include "thread-pool.h"
#ifdef STRATA_WITH_CUDA
#include "cuda-backend.h"   // engine_native/cuda: weights, KV and compute in VRAM for backend "cuda"
#endif

namespace strata {

class engine_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// A forward given up between two layers because interrupt(true) was called (a server's stop: it does not wait
// for a prompt piece under way, 10 s at a deep history on two loaded cores). The call adds none of its tokens: the
// contexts hold what they held before it (their KV past that is unused, as after truncate).
class engine_interrupted : public engine_error {
  public:
    using engine_error::engine_error;
};

struct engine_params {
    int64_t n_ctx = 4096;     // main context capacity
    int n_slots = 0;
    int n_groups = 1;
    int64_t slot_ctx = 0;     // slot capacity; 0 = n_ctx
    int n_threads = 0;        // 0 = physical cores
    std::string kv_type = "f16";   // "f16", "q8_0", or "f32" (a precision reference for tests)
    int64_t max_chunk = 512;  // largest prefill chunk the scratch is sized for
    std::string backend = "cpu";   // "cpu", or "cuda" in a build with STRATA_CUDA (engine_native/cuda)
    // CPU: make the packed copies of the weights this build packs (quants-packed.h; faster products,
    // anonymous memory about those weights' size); false reads every weight in place from the file
    bool pack_weights = true;
};

struct context {
    int id = 0;
    int group = -1;            // -1 for main
    int64_t capacity = 0;
    std::vector<int32_t> tokens;          // (n_tokens,) the history the KV holds
    // (n_layer,) each -> that layer's K / V: head-major, kv head g's own region (the engine's
    // one-head layout, attention.h) at g * k_head_bytes / v_head_bytes, so that a long history's
    // attention streams each head's K and V front to back
    std::vector<uint8_t*> k, v;
    size_t k_head_bytes = 0, v_head_bytes = 0;
    uint8_t* k_head(int64_t il, int64_t g) const { return k[size_t(il)] + size_t(g) * k_head_bytes; }
    uint8_t* v_head(int64_t il, int64_t g) const { return v[size_t(il)] + size_t(g) * v_head_bytes; }
    float* logits = nullptr;              // (n_vocab,) of the last processed position
    bool has_logits = false;
};

// One row of a forward batch: a token of a context at a position.
struct batch_row {
    context* ctx;
    int32_t token;
    int64_t pos;
    float* logits_out;   // (n_vocab,) destination, or nullptr when this row's logits are not needed
};

class engine {
  public:
    engine(const std::string& model_path, const engine_params& params);

    const model& mdl() const { return *model_; }
    const model_hparams& hp() const { return model_->hp; }
    const kv_layout& kv() const { return kv_; }
    const engine_params& params() const { return params_; }
    int n_contexts() const { return int(contexts_.size()); }
    int n_threads() const { return pool_->size(); }
    const std::string& large_pages() const { return arena_->large_pages(); }
    size_t arena_bytes() const { return arena_->total_bytes(); }
    const context& ctx(int id) const;
#ifdef STRATA_WITH_CUDA
    const cuda_backend* gpu() const { return gpu_.get(); }   // null unless backend "cuda"
#endif

    // A context's history, length and logits state, read under the engine's lock.
    std::vector<int32_t> context_tokens(int ctx_id);
    int64_t context_len(int ctx_id);
    bool context_has_logits(int ctx_id);

    // While on, every forward (one under way included, at its next layer) throws engine_interrupted. Any thread,
    // without the engine's lock (that is what it interrupts); off again, computing goes on as before.
    void interrupt(bool on) { interrupted_.store(on, std::memory_order_relaxed); }
    bool interrupted() const { return interrupted_.load(std::memory_order_relaxed); }

    // Each of these locks the engine (one compute at a time) and may run on the thread pool.
    void prefill(int ctx_id, const int32_t* tokens, int64_t n_tokens, int64_t chunk);
    // One token per context, one batch; logits_out is (n, n_vocab).
    void decode(const int* ctx_ids, const int32_t* tokens, int64_t n, float* logits_out);
    // The continuous agenda's mixed step, in ONE forward: prompt pieces of n_pieces contexts
    // (piece i: piece_lens[i] tokens of piece_ids[i], concatenated in piece_tokens) and one token for
    // each of n_d other contexts, so every row rides along the same weight reads. All rows <=
    // max_rows(). logits_out is (n_d, n_vocab); each piece's context keeps its last-position logits
    // as after prefill(). Validated whole before anything is computed.
    void step(const int* piece_ids, const int64_t* piece_lens, int64_t n_pieces, const int32_t* piece_tokens,
              const int* ctx_ids, const int32_t* d_tokens, int64_t n_d, float* logits_out);
    // Feeds pieces of n_pieces contexts in ONE forward, as step() without decode rows, but keeps the
    // logits after EVERY token: logits_out is (sum of piece_lens, n_vocab), the pieces' rows in order
    // (the draft check of lookup decoding). Bitwise equal to feeding the tokens one decode at a time.
    void extend(const int* piece_ids, const int64_t* piece_lens, int64_t n_pieces, const int32_t* piece_tokens,
                float* logits_out);
    int64_t max_rows() const { return max_rows_; }
    // The most rows whose logits one forward keeps: extend()'s limit, at most max_rows().
    int64_t max_logit_rows() const { return max_logit_rows_; }
    // Throws "<op>: N tokens exceed the limit ..." when n is above max_logit_rows().
    void check_logit_rows(const char* op, int64_t n) const;
    // Copies the last position's logits into out (n_vocab,); throws when there are none.
    void logits(int ctx_id, float* out);
    void truncate(int ctx_id, int64_t n_tokens);
    void copy(int src_id, int dst_id, int64_t n_tokens);
    // Raw KV of tokens [t0, t1): for each layer, K rows then V rows (K rows only when V is K:
    // deepseek2's latent), (t1 - t0) * bytes_per_token bytes.
    void kv_read(int ctx_id, int64_t t0, int64_t t1, uint8_t* dst);
    // Sets tokens [t0, t0 + n) (t0 must equal the context's length) and their KV from kv_read's layout.
    // src_mapped: src is a memory-mapped file another process may truncate; its reads are guarded
    // (mapped-read-guard.h) and a truncated page returns false with the context unchanged.
    bool kv_write(int ctx_id, int64_t t0, const int32_t* tokens, int64_t n, const uint8_t* src,
                  bool src_mapped = false);

    // One piece of splice(): n cells of the context's history moved from position src (src >= 0), or n new
    // tokens read (src -1, `tokens` its n ids).
    struct splice_piece {
        int64_t src;
        int64_t n;
        const int32_t* tokens;
    };
    // llama.cpp's --cache-reuse on one context (its seq_rm + seq_add, engine-splice.cpp): keeps [0, keep), then
    // lays the pieces out one after another from `keep`: a moved piece's K re-rotated by (its new position - src)
    // with the model's own RoPE and V unchanged, a new piece read at its place (attending to what precedes it
    // only). The moved cells' K / V were computed beside tokens that are gone: an approximation of a fresh read
    // of the same tokens, not equal to it. Moved pieces in history order, not overlapping, each src >= keep.
    // The context's logits are the last piece's when it is new, else none. Throws shift_refusal() when not "".
    // Bad pieces are refused with the context unchanged; a failure past the checks (memory, the forward) leaves
    // it holding [0, keep).
    void splice(int ctx_id, int64_t keep, const splice_piece* pieces, int64_t n_pieces);
    // Why this engine cannot move cells (multi-head latent attention, windowed layers, the CUDA backend), or "".
    std::string shift_refusal() const;

  private:
    context& ctx_mut(int id);
    void check_tokens(const int32_t* tokens, int64_t n) const;
    void forward(const batch_row* rows, int64_t n_rows);
    // step(), decode() and extend() with the lock held: validates everything, then one forward; `op`
    // names the caller in error messages. piece_logits null: a piece keeps only its last position's
    // logits (in its context); else every piece row's logits go there, rows in order.
    void run_step(const char* op, const int* piece_ids, const int64_t* piece_lens, int64_t n_pieces,
                  const int32_t* piece_tokens, const int* ctx_ids, const int32_t* d_tokens, int64_t n_d,
                  float* logits_out, float* piece_logits = nullptr);
    struct matmul_job {
        const weight* w;
        float* y;   // (n_rows, w->n_rows)
    };
    // y = x @ W^T for each job: x (n_rows, n_cols) quantized once per activation type, one dispatch.
    void matmuls(const float* x, int64_t n_rows, int64_t n_cols, std::initializer_list<matmul_job> jobs);
    // A gated FFN's first half in one dispatch: gate = x @ gate^T, up = x @ up^T, then gate = act(gate, up)
    // (gate, up: (n_rows, n_ff)); each unit computes both products of its rows and their activation on
    // the thread that holds them.
    void gated_matmuls(const float* x, int64_t n_rows, int64_t n_cols, const weight& gate, float* y_gate,
                       const weight& up, float* y_up, ffn_activation act);
    // The activation formats of a group of products, x quantized once into xq_[slot] for each.
    struct act_slots {
        int n = 0;
        int32_t key[3];        // act_type_for(type), or 1000 + type for a packed weight's prepared rows
        size_t row_bytes[3];   // one quantized row of xq_[slot]
        int slot_of(const weight& w) const;
    };
    act_slots quantize_acts(const float* x, int64_t n_rows, int64_t n_cols, const weight* const* ws, int n_ws);
    // Output rows [r0, r1) of one product: y[t * w.n_rows + r] = dot(W[r], xq row t), t < n_act; with
    // y_up, then the same rows of up into y_up and y = act(y, y_up) over them (gated_matmuls).
    struct product_unit {
        weight w;
        const uint8_t* xq;   // n_act activation rows, xq_row_bytes apart (packed rows when w.packed)
        size_t xq_row_bytes;
        int64_t n_act;
        float* y;
        int64_t r0, r1;
        const weight* up = nullptr;
        const uint8_t* up_xq = nullptr;
        size_t up_xq_row_bytes = 0;
        float* y_up = nullptr;
        ffn_activation act = FFN_SWIGLU;
    };
    // Runs the units over the threads in one dispatch (each thread a contiguous run first).
    void run_products(const std::vector<product_unit>& units);
    std::vector<product_unit> units_;   // matmuls' units, reused call after call
    // Appends the units of y = xq @ W^T, k_weight_rows_per_chunk weight rows each.
    static void add_product_units(std::vector<product_unit>& units, const weight& w, const uint8_t* xq,
                                  size_t xq_row_bytes, int64_t n_act, float* y);
    // The mixture-of-experts FFN (forward-moe.cpp): out_ (n, n_embd) from the normed rows in xn_.
    void moe_ffn(const layer_weights& L, int64_t n);
    // glm4moe's routing of row r (GATING_SOFTMAX / GATING_SIGMOID): its experts and weights into
    // moe_expert_ / moe_weight_; `score` (n_expert,) becomes the probabilities
    void route_probs(const layer_weights& L, float* score, int64_t r, std::vector<int32_t>& order,
                     std::vector<float>& chosen_by);
    // deepseek2's multi-head latent attention (forward-mla.cpp, model_hparams' MLA): the rows' queries into
    // q_ (n, n_head, head_dim) and their latent K/V into the cache; after attention, each head's latent
    // output through attn_v_b into xn_ as (n, n_head * mla_v_head), attn_output's input
    void mla_queries_and_kv(const layer_weights& L, const batch_row* rows, int64_t n, int64_t il);
    void mla_head_outputs(const layer_weights& L, int64_t n);
    // y (n_heads, n, w's rows) = head h's matrix of w times the rows x (n_heads, n, w's columns) of head h
    void head_products(const expert_weights& w, int64_t n_heads, const float* x, int64_t n, float* y);
    // attention of lone rows in parts over the threads (forward.cpp, split_pays): the parts of a
    // forward's rows, then layer il's attention by them
    void plan_attention_parts(const batch_row* rows, int64_t n);
    // sinks: the layer's (n_head,) attention sink logits, or nullptr
    void attention_parts(const batch_row* rows, int64_t n, int64_t il, float scale, const float* sinks);

    engine_params params_;
    std::unique_ptr<model> model_;
    kv_layout kv_;    // whole rows (snapshots, kv_read / kv_write, the CUDA backend)
    kv_layout kvh_;   // one kv head's region in the CPU buffers (n_head_kv 1)
    std::unique_ptr<arena> arena_;
    std::unique_ptr<thread_pool> pool_;
    std::vector<context> contexts_;
    std::mutex mutex_;
    std::atomic<bool> interrupted_{false};   // interrupt(): read between a forward's layers

    // scratch (from the arena), sized for max_rows = max(max_chunk, n_contexts) rows
    int64_t max_rows_ = 0;
    int64_t max_capacity_ = 0;
    float* x_ = nullptr;        // (max_rows, n_embd) residual stream
    float* xn_ = nullptr;       // (max_rows, max(n_embd, q_dim)) normed input / attention output
    float* q_ = nullptr;        // (max_rows, q_dim)
    float* kbuf_ = nullptr;     // (max_rows, kv_dim)
    float* vbuf_ = nullptr;     // (max_rows, kv_dim)
    float* gate_ = nullptr;     // (max_rows, n_ff)
    float* up_ = nullptr;       // (max_rows, n_ff)
    float* out_ = nullptr;      // (max_rows, n_embd) projection outputs before the residual add
    // MoE only: a pair is (row, one of its experts); pairs sorted by expert, max_rows * n_expert_used
    float* router_ = nullptr;     // (max_rows, n_expert) router scores
    float* rope_swa_ = nullptr;   // (max_rows, n_rot) the windowed layers' RoPE when it differs, or null
    model_hparams swa_rope_hp_;   // what rope_swa_ is made with (model_hparams::swa_rope_hparams), set once
    float* moe_gate_ = nullptr;   // (pairs, n_ff_exp)
    float* moe_up_ = nullptr;     // (pairs, n_ff_exp)
    float* moe_out_ = nullptr;    // (pairs, n_embd) each pair's expert output
    uint8_t* moe_xq_[2] = {};     // (pairs, moe_xq_row_bytes_) the pairs' quantized activations
    size_t moe_xq_row_bytes_ = 0;
    std::vector<int32_t> moe_expert_;    // (rows * n_expert_used,) row r's choice j: expert
    std::vector<float> moe_weight_;      //   its weight
    std::vector<int64_t> moe_pair_;      //   its pair (position in expert order)
    std::vector<int64_t> moe_first_;     // (n_expert + 1,) expert e's pairs: [first[e], first[e + 1])
    std::vector<int32_t> moe_pair_expert_;   // (rows * n_expert_used,) pair p's expert (its biases)
    // deepseek2 only (model_hparams' MLA): queries before absorption, the q LoRA's rows, per-head
    // activations and products of attn_k_b / attn_v_b
    float* mla_q_ = nullptr;      // (max_rows, n_head * mla_qk_head)
    float* mla_qa_ = nullptr;     // (max_rows, q_lora_rank)
    float* mla_in_ = nullptr;     // (n_head, max_rows, max(nope, kv_lora_rank))
    float* mla_out_ = nullptr;    // (n_head, max_rows, max(kv_lora_rank, mla_v_head))
    uint8_t* xq_[3] = {};       // (max_rows, act_row_bytes(max cols)) quantized activations, one per act type
    size_t xq_bytes_ = 0;       // bytes of each xq_ buffer
    struct part_plan {
        struct part {
            int64_t r, g, a, b;   // row, kv head; scores: tiles [a, b); values: dimensions from a
        };
        std::vector<int64_t> offset, n_pad;   // (n + 1,) row r's scores at part_scores_ + offset[r]; (n,)
        std::vector<part> scores, values;
    };
    part_plan parts_;                             // plan_attention_parts, reused across forwards
    std::vector<float> part_scores_, part_inv_;   // attention_parts: the rows' scores, 1 / softmax sums
    float* att_scratch_ = nullptr;   // (n_threads, attention_scratch_floats(n_rep, max_capacity)) scores
    float* rope_ = nullptr;          // (max_rows, n_rot / 2, 2) cos, sin per row
    static constexpr int64_t k_extend_logit_rows = 32;   // extend()'s rows with logits, at least
    int64_t max_logit_rows_ = 0;
    float* logits_tmp_ = nullptr;    // (max_logit_rows, n_vocab) logits rows of one forward
#ifdef STRATA_WITH_CUDA
    std::unique_ptr<cuda_backend> gpu_;   // backend "cuda": the KV lives and forward() runs here
#endif
};

}  // namespace strata
