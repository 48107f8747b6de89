// A llama-family model read from a GGUF file: hyper-parameters and weights (memory-mapped in place).
//
// Not here: KV caches, contexts or the forward pass (forward.cpp). Architectures: llama (SmolLM2,
// Llama 3.x, Mistral-style; Mixtral-style with experts), qwen2 (Q/K/V biases), qwen3 (Q/K RMS norms),
// qwen3moe (qwen3 with a mixture of experts in place of the FFN), gpt-oss (OpenAI's: biases everywhere,
// attention sinks, a sliding window in every other layer, clamped SwiGLU experts), mistral3, smollm3,
// seed_oss, glm4moe, gemma3, deepseek2 (multi-head latent attention: GLM-4.7-Flash, DeepSeek-V2-Lite).
// Anything else, or a weight type the kernels do not compute with, throws model_error naming it.
#pragma once

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf.h"

namespace strata {

class model_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

enum rope_style : int32_t {
    ROPE_NORM = 0,   // adjacent pairs (x[2i], x[2i+1]): llama in GGUF (the converter permutes Q/K)
    ROPE_NEOX = 1,   // halves (x[i], x[i + d/2]): qwen2, qwen3, gpt-oss
};

enum ffn_activation : int32_t {
    FFN_SWIGLU = 0,       // silu(gate) * up
    FFN_SWIGLU_OAI = 1,   // gpt-oss: g = min(gate, 7), u = clamp(up, -7, 7), g * sigmoid(1.702 g) * (u + 1)
    FFN_GEGLU = 2,        // gemma3: gelu(gate) * up, gelu's tanh form (ggml_gelu)
};

// how a MoE layer's router scores become its experts and weights: the softmax of the chosen scores
// (Mixtral-style llama, qwen3moe, gpt-oss), or glm4moe's (llama.cpp's build_moe_ffn): probabilities over
// all experts (the softmax or each score's sigmoid), chosen by probability + exp_probs_b, weighted by
// probability, normalised when expert_weights_norm, times expert_weights_scale
enum moe_gating { GATING_SOFTMAX_CHOSEN, GATING_SOFTMAX, GATING_SIGMOID };

struct model_hparams {
    std::string arch;
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;      // per-head size of Q/K/V
    int64_t n_ff = 0;
    int64_t n_rot = 0;         // rotated dimensions per head (<= head_dim)
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;   // 1 / rope.scaling.factor (linear or YaRN scaling), else 1
    float rope_attn_factor = 1.0f;  // rope.scaling.attn_factor: cos and sin are multiplied by it
    // YaRN (rope.scaling.type "yarn"): frequencies between the "fast" and "slow" dimensions blend the
    // scaled and unscaled angles, and cos / sin are scaled by 1 + 0.1 ln(factor) (factor > 1) too.
    // beta_fast / beta_slow stay llama.cpp's 32 / 1 except for mistral3, the one architecture whose
    // rope.scaling.yarn_beta_* keys llama.cpp reads
    float yarn_ext_factor = 0.0f;   // 0: no YaRN, 1: YaRN
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
    int64_t yarn_orig_ctx = 0;      // rope.scaling.original_context_length (0 in the file: n_ctx_train)
    // mistral3's rope.scaling.yarn_log_multiplier (HF's mscale_all_dim): cos / sin are scaled by
    // (1 + 0.1 ln f) / (1 + 0.1 m ln f) instead of 1 + 0.1 ln f (0: not set)
    float yarn_log_mul = 0.0f;
    // the numerator's multiplier of that ratio: cos / sin scaled by (1 + 0.1 yarn_mscale ln f) /
    // (1 + 0.1 yarn_log_mul ln f) (1 and 0: 1 + 0.1 ln f, every architecture's); deepseek2 sets both
    // to its log multiplier (llama.cpp's cparams.yarn_attn_factor), so its RoPE is unscaled
    float yarn_mscale = 1.0f;
    // mistral3's attention temperature (Llama 4's): each query is multiplied by
    // 1 + attn_temp_scale * ln(1 + floor(pos / attn_temp_floor)), so 1 below attn_temp_floor (the YaRN
    // original context) and growing slowly beyond it (0: off)
    float attn_temp_scale = 0.0f;
    int64_t attn_temp_floor = 0;
    float rms_eps = 1e-5f;
    rope_style rope = ROPE_NORM;
    // Mixture of experts (0 experts: a dense FFN of n_ff). Each token runs the n_expert_used experts
    // its router scores highest, weighted by the softmax of those scores (llama.cpp's softmax, top-k,
    // renormalise: the same numbers).
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;      // one expert's FFN width
    // glm4moe (GLM-4.5 / 4.6): each expert's probability the router's sigmoid (expert_gating_func 2) or
    // the softmax over all experts (1); chosen by probability + the layer's exp_probs_b, weighted by
    // probability, summing to 1 when expert_weights_norm, times expert_weights_scale; n_expert_shared
    // experts' worth of an always-run SwiGLU (n_ff_exp * n_expert_shared wide) beside the chosen ones;
    // the first n_layer_dense_lead layers a dense FFN of n_ff
    moe_gating gating = GATING_SOFTMAX_CHOSEN;
    bool expert_weights_norm = true;
    float expert_weights_scale = 1.0f;
    int64_t n_expert_shared = 0;
    int64_t n_layer_dense_lead = 0;
    ffn_activation ffn_act = FFN_SWIGLU;
    int64_t n_swa = 0;         // attention.sliding_window: the window of the layers that have one (0: none)
    // the windowed layers' RoPE (gpt-oss's rope.freq_base_swa, gemma3's 10000 unscaled beside its global
    // layers' 1e6 x 1/8); 0: the same as the other layers'
    float rope_freq_base_swa = 0.0f;
    float rope_freq_scale_swa = 0.0f;
    // gemma3: queries scaled by attn_scale instead of 1 / sqrt(head_dim) (0), embeddings by embd_scale,
    // logits capped at +-final_logit_softcap by tanh (0: none)
    float attn_scale = 0.0f;
    float embd_scale = 1.0f;
    float final_logit_softcap = 0.0f;
    // deepseek2's multi-head latent attention (MLA, llama.cpp's absorbed form; kv_lora_rank 0: none).
    // The KV cache holds ONE head (n_head_kv 1) of head_dim = kv_lora_rank + n_rot: the normed latent
    // c, then the rotated shared key part, stored once and read as K and as V (kv_layout::v_in_k; q8_0
    // keeps a V row of it too); a head's output is its first kv_lora_rank values. A
    // query head is projected to mla_qk_head (nope = mla_qk_head - n_rot, then n_rot rotated), its nope
    // part taken into the latent space by attn_k_b: q = [k_b q_nope | rope(q_pe)] (head_dim wide), so
    // q . k = q_nope . (k_b^T c) + q_pe . k_pe. Each head's output (the latent) leaves by attn_v_b
    // (mla_v_head wide) into attn_output. q_lora_rank > 0: queries through attn_q_a, a norm and attn_q_b.
    int64_t kv_lora_rank = 0;
    int64_t q_lora_rank = 0;
    int64_t mla_qk_head = 0;
    int64_t mla_v_head = 0;

    bool moe() const { return n_expert > 0; }
    bool mla() const { return kv_lora_rank > 0; }
    bool swa_rope() const { return rope_freq_base_swa != 0.0f || rope_freq_scale_swa != 0.0f; }
    // the hyper-parameters the windowed layers' RoPE table is made with (rope_table)
    model_hparams swa_rope_hparams() const {
        model_hparams s = *this;
        if (rope_freq_base_swa != 0.0f) s.rope_freq_base = rope_freq_base_swa;
        if (rope_freq_scale_swa != 0.0f) s.rope_freq_scale = rope_freq_scale_swa;
        return s;
    }
    float attn_temperature(int64_t pos) const {
        return attn_temp_scale == 0.0f ? 1.0f
                                       : float(1.0 + double(attn_temp_scale) *
                                                         std::log(std::floor(double(pos) / double(attn_temp_floor)) + 1.0));
    }
    int64_t q_dim() const { return n_head * head_dim; }
    int64_t kv_dim() const { return n_head_kv * head_dim; }
};

// A 2-D weight used in place: n_rows rows of n_cols elements, row_bytes apart. `packed`, when set,
// is a row-interleaved copy of the same rows (quants-packed.h) that the CPU products read instead;
// everything else (embedding lookups, the CUDA backend) reads `data`.
struct weight {
    int32_t type = 0;
    const uint8_t* data = nullptr;
    size_t row_bytes = 0;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    const uint8_t* packed = nullptr;   // (packed_bytes(type, n_rows, n_cols),) owned by model::packed_store, or null
};

// n_expert weights of one shape stacked in one GGUF tensor (ffn_gate_exps, ffn_up_exps,
// ffn_down_exps): expert e's rows follow expert e - 1's. Products read them in place (never packed).
struct expert_weights {
    weight first;             // expert 0
    size_t expert_bytes = 0;  // from one expert's first row to the next one's

    weight expert(int64_t e) const {
        weight w = first;
        w.data += size_t(e) * expert_bytes;
        return w;
    }
};

struct layer_weights {
    std::vector<float> attn_norm;   // (n_embd,)
    std::vector<float> ffn_norm;    // (n_embd,)
    weight wq, wk, wv, wo;          // (q_dim, n_embd), (kv_dim, n_embd) x2, (n_embd, q_dim)
    weight w_gate, w_up, w_down;    // (n_ff, n_embd) x2, (n_embd, n_ff); unset (no data) in a MoE model
    weight ffn_gate_inp;            // MoE router: (n_expert, n_embd)
    expert_weights gate_exps, up_exps, down_exps;   // MoE: (n_ff_exp, n_embd) x2, (n_embd, n_ff_exp) each
    std::vector<float> bq, bk, bv;  // qwen2 biases: (q_dim,), (kv_dim,), (kv_dim,); empty otherwise
    std::vector<float> q_norm, k_norm;   // qwen3: (head_dim,) each; empty otherwise
    // gpt-oss (empty otherwise): the output projection's bias (n_embd,), the query heads' attention
    // sink logits (n_head,), the router's bias (n_expert,) and the experts' biases, expert-major:
    // (n_expert, n_ff_exp) for gate and up, (n_expert, n_embd) for down
    std::vector<float> bo, sinks, router_b, gate_exps_b, up_exps_b, down_exps_b;
    // > 0: a row at position p attends to positions (p - window, p] only (llama.cpp's standard
    // sliding window); 0: the whole history
    int64_t window = 0;
    bool rope = true;   // false: Q and K are not rotated (SmolLM3's every fourth layer)
    // glm4moe (empty / unset otherwise): the experts' selection bias (n_expert,) and the shared
    // experts' SwiGLU: (n_ff_exp * n_expert_shared, n_embd) x2, (n_embd, n_ff_exp * n_expert_shared)
    std::vector<float> exp_probs_b;
    weight gate_shexp, up_shexp, down_shexp;
    // gemma3 (empty otherwise): RMSNorms of the attention's and the FFN's outputs before each residual add
    std::vector<float> attn_post_norm, ffn_post_norm;   // (n_embd,) each
    // deepseek2 (model_hparams' MLA; unset otherwise; wq is attn_q when there is no q LoRA): attn_q_a
    // (q_lora_rank, n_embd) and its norm, attn_q_b (n_head * mla_qk_head, q_lora_rank), attn_kv_a_mqa
    // (head_dim, n_embd), the latent's norm (kv_lora_rank,), per head attn_k_b (kv_lora_rank, nope) and
    // attn_v_b (mla_v_head, kv_lora_rank), stacked like experts
    weight wq_a, wq_b, wkv_a;
    std::vector<float> q_a_norm, kv_a_norm;
    expert_weights wk_b, wv_b;

    bool moe() const { return ffn_gate_inp.data != nullptr; }   // experts here (else the dense FFN)
};

// Row `pos`'s rotation table: (n_rot / 2) pairs (cos, sin) of each dimension pair's angle, with
// rope_freqs factors (may be empty), linear or YaRN scaling. Both backends rotate with it.
void rope_table(const model_hparams& h, const std::vector<float>& freq_factors, int64_t pos, float* cs);

struct model {
    std::shared_ptr<gguf_file> file;
    model_hparams hp;
    weight token_embd;               // (n_vocab, n_embd)
    weight output;                   // (n_vocab, n_embd): output.weight, or token_embd when tied
    std::vector<float> output_norm;  // (n_embd,)
    std::vector<float> rope_freq_factors;   // (n_rot / 2,) from rope_freqs.weight, or empty
    std::vector<layer_weights> layers;
    std::vector<std::shared_ptr<uint8_t>> packed_store;   // the buffers `weight::packed` points into

    size_t weight_bytes() const;
    // The weights products read whole (per layer wq wk wv wo, w_gate w_up w_down or the MoE router,
    // then output): the ones the CPU backend may pack. Experts are read in place.
    std::vector<weight*> product_weights();
};

// Reads hyper-parameters and binds every weight; throws model_error / gguf_error naming the problem.
std::unique_ptr<model> model_load(std::shared_ptr<gguf_file> file);

}  // namespace strata
