// model_load: GGUF metadata -> hyper-parameters, GGUF tensors -> weights, with shape and type checks.
//
// Not here: any arithmetic on weights beyond dequantizing the small 1-D ones (norms, biases) to f32.
#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <utility>

#include "quants.h"

namespace strata {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); i++) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

// %g: "-1", "1e-05", "nan", "inf" (std::to_string writes "-1.000000", and 0.000000 for 1e-7)
std::string number_str(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

struct loader {
    const gguf_file& f;
    const std::string& path;

    const gguf_tensor* find(const std::string& name, bool required) const {
        const gguf_tensor* t = f.find_tensor(name);
        if (!t && required) throw model_error("model " + path + ": missing tensor '" + name + "'");
        return t;
    }

    void check_shape(const gguf_tensor& t, std::vector<int64_t> want) const {
        std::vector<int64_t> got = t.shape;
        while (got.size() > want.size() && got.back() == 1) got.pop_back();
        if (got != want) {
            throw model_error("model " + path + ": tensor '" + t.name + "' has shape " + shape_str(t.shape) +
                              ", expected " + shape_str(want));
        }
    }

    weight matrix(const std::string& name, int64_t n_cols, int64_t n_rows) const {
        return rows(name, {n_cols, n_rows}, n_cols, n_rows);
    }

    // n_expert matrices of (n_rows, n_cols) in one 3-D tensor
    expert_weights experts(const std::string& name, int64_t n_cols, int64_t n_rows, int64_t n_expert) const {
        if (!f.find_tensor(name) && f.find_tensor(name.substr(0, name.find("_exps")) + ".0.weight")) {
            throw model_error("model " + path + ": experts stored one tensor each ('" + name.substr(0, name.find("_exps")) +
                              ".0.weight'), an old GGUF layout this engine does not read: convert the model again");
        }
        expert_weights x;
        x.first = rows(name, {n_cols, n_rows, n_expert}, n_cols, n_rows * n_expert);
        x.first.n_rows = n_rows;
        x.expert_bytes = x.first.row_bytes * size_t(n_rows);
        return x;
    }

    // A tensor of `shape` read as n_rows rows of n_cols elements.
    weight rows(const std::string& name, std::vector<int64_t> shape, int64_t n_cols, int64_t n_rows) const {
        const gguf_tensor* t = find(name, true);
        check_shape(*t, std::move(shape));
        if (!type_supported(t->type)) {
            const char* tn = gguf_type_name(t->type);
            throw model_error("model " + path + ": tensor '" + name + "' has type " + (tn ? tn : "?") +
                              ", which this engine does not support (supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 "
                              "Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS MXFP4)");
        }
        weight w;
        w.type = t->type;
        w.data = t->data;
        w.row_bytes = type_row_bytes(t->type, n_cols);
        w.n_rows = n_rows;
        w.n_cols = n_cols;
        if (uint64_t(w.row_bytes) * uint64_t(n_rows) != t->n_bytes) {
            throw model_error("model " + path + ": tensor '" + name + "' byte size does not match its shape");
        }
        return w;
    }

    std::vector<float> vec(const std::string& name, int64_t n, bool required) const {
        return floats(name, {n}, required);
    }

    // A small float tensor (norms, biases, sinks) of `shape`, as f32 in GGUF element order.
    std::vector<float> floats(const std::string& name, std::vector<int64_t> shape, bool required) const {
        const gguf_tensor* t = find(name, required);
        if (!t) return {};
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        check_shape(*t, std::move(shape));
        if (t->type != TYPE_F32 && t->type != TYPE_F16 && t->type != TYPE_BF16) {
            const char* tn = gguf_type_name(t->type);
            throw model_error("model " + path + ": tensor '" + name + "' has type " + (tn ? tn : "?") +
                              " (expected F32, F16 or BF16)");
        }
        auto out = std::vector<float>(size_t(n));
        dequantize_row(t->type, t->data, out.data(), n);
        return out;
    }
};

// Each of a set of optional vectors present, or none: "model P: blk.0.attn_q.bias without blk.0.attn_k.bias".
void require_together(const std::string& path, const std::string& prefix,
                      std::initializer_list<std::pair<const char*, const std::vector<float>*>> set) {
    const char* present = nullptr;
    const char* missing = nullptr;
    for (const auto& [name, v] : set) {
        if (v->empty()) {
            if (!missing) missing = name;
        } else if (!present) {
            present = name;
        }
    }
    if (present && missing) {
        throw model_error("model " + path + ": " + prefix + present + " without " + prefix + missing +
                          " (the engine reads these together)");
    }
}

// llama.cpp's get_mscale (llama-context.cpp): YaRN's factor 1 + 0.1 m ln(factor) for a context stretched
// by `factor`, 1 when it is not stretched (factor <= 1)
double yarn_get_mscale(double factor, double m) { return factor <= 1.0 ? 1.0 : 1.0 + 0.1 * m * std::log(factor); }

}  // namespace

void rope_table(const model_hparams& h, const std::vector<float>& freq_factors, int64_t pos, float* cs) {
    constexpr double k_pi = 3.14159265358979323846;   // M_PI is not standard (MSVC lacks it by default)
    const int64_t half = h.n_rot / 2;
    const bool yarn = h.yarn_ext_factor != 0.0f;
    double low = 0.0, high = 0.0, mscale = double(h.rope_attn_factor);
    if (yarn) {   // the dimension pairs whose wavelength fits the original context (ggml's corr dims)
        auto corr_dim = [&](double n_turns) {
            return double(h.n_rot) * std::log(double(h.yarn_orig_ctx) / (n_turns * 2.0 * k_pi)) /
                   (2.0 * std::log(double(h.rope_freq_base)));
        };
        low = std::max(0.0, std::floor(corr_dim(h.yarn_beta_fast)));
        high = std::min(double(h.n_rot - 1), std::ceil(corr_dim(h.yarn_beta_slow)));
        // 1 + 0.1 ln(factor); with a log multiplier m (mistral3) the ratio of m = 1 to m, deepseek2's m to m
        const double factor = 1.0 / double(h.rope_freq_scale);
        mscale *= yarn_get_mscale(factor, double(h.yarn_mscale)) / yarn_get_mscale(factor, double(h.yarn_log_mul));
    }
    const double p = double(pos) * double(h.rope_freq_scale);
    for (int64_t i = 0; i < half; i++) {
        const double inv_freq = std::pow(double(h.rope_freq_base), -2.0 * double(i) / double(h.n_rot));
        const double factor = freq_factors.empty() ? 1.0 : double(freq_factors[size_t(i)]);
        double theta = p * inv_freq / factor;
        if (yarn) {   // blend towards the unscaled angle for the fast dimensions
            const double extrap = double(pos) * inv_freq / factor;
            const double ramp = (1.0 - std::clamp((double(i) - low) / std::max(0.001, high - low), 0.0, 1.0)) *
                                double(h.yarn_ext_factor);
            theta = theta * (1.0 - ramp) + extrap * ramp;
        }
        cs[2 * i] = float(std::cos(theta) * mscale);
        cs[2 * i + 1] = float(std::sin(theta) * mscale);
    }
}

size_t model::weight_bytes() const {
    size_t n = 0;
    for (const auto& t : file->tensors()) n += t.n_bytes;
    return n;
}

std::vector<weight*> model::product_weights() {
    std::vector<weight*> out;
    for (layer_weights& L : layers) {
        for (weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.ffn_gate_inp, &L.gate_shexp,
                          &L.up_shexp, &L.down_shexp, &L.wq_a, &L.wq_b, &L.wkv_a})
            if (w->data) out.push_back(w);
    }
    out.push_back(&output);
    return out;
}

namespace {

// mistral3's keys, read as llama.cpp reads them: YaRN's betas and log multiplier (whatever the scaling
// type; they matter only with YaRN), and the attention temperature, whose floor is the YaRN original
// context (rope.scaling.original_context_length, else the training context).
void read_mistral3_scaling(const gguf_file& f, const std::string& path, model_hparams& hp) {
    const std::string a = hp.arch;
    auto finite = [&](const std::string& key, double fallback) {
        const double v = f.get_float(a + key, fallback);
        if (!std::isfinite(v)) throw model_error("model " + path + ": " + a + key + " is not a finite number");
        return float(v);
    };
    hp.yarn_beta_fast = finite(".rope.scaling.yarn_beta_fast", hp.yarn_beta_fast);
    hp.yarn_beta_slow = finite(".rope.scaling.yarn_beta_slow", hp.yarn_beta_slow);
    hp.yarn_log_mul = finite(".rope.scaling.yarn_log_multiplier", 0.0);
    // the ramp's ends are logarithms of the original context over 2 pi beta turns; the log multiplier
    // divides cos / sin by 1 + 0.1 m ln(factor): neither may be zero or negative
    const double factor = 1.0 / double(hp.rope_freq_scale);
    if (!(hp.yarn_beta_fast > 0.0f) || !(hp.yarn_beta_slow > 0.0f) ||
        !(yarn_get_mscale(factor, double(hp.yarn_log_mul)) > 0.0)) {
        char msg[200];
        std::snprintf(msg, sizeof msg, ": invalid YaRN keys (yarn_beta_fast %g, yarn_beta_slow %g, yarn_log_multiplier %g)",
                      double(hp.yarn_beta_fast), double(hp.yarn_beta_slow), double(hp.yarn_log_mul));
        throw model_error("model " + path + msg);
    }
    hp.attn_temp_scale = finite(".attention.temperature_scale", 0.0);
    if (hp.attn_temp_scale != 0.0f) {
        hp.attn_temp_floor = hp.yarn_orig_ctx > 0 ? hp.yarn_orig_ctx
                                                  : f.get_int(a + ".rope.scaling.original_context_length", hp.n_ctx_train);
        if (hp.attn_temp_floor <= 0) {
            throw model_error("model " + path + ": attention.temperature_scale needs a positive original context "
                              "length (rope.scaling.original_context_length or context_length), got " +
                              std::to_string(hp.attn_temp_floor));
        }
    }
}

// glm4moe's and deepseek2's keys, as llama.cpp reads them: the trunk is block_count less the
// nextn_predict_layers (multi-token prediction layers at the end, which llama.cpp runs only for its own
// speculation); expert_shared_count (required), leading_dense_block_count, expert_weights_scale (0:
// none), expert_weights_norm (default false), expert_gating_func (1 softmax, 0 or 2 sigmoid; absent:
// `gating_absent`).
void read_glm4moe_experts(const gguf_file& f, const std::string& path, model_hparams& hp, int64_t gating_absent = 2) {
    const std::string a = hp.arch;
    const int64_t nextn = f.get_int(a + ".nextn_predict_layers", 0);
    if (nextn < 0 || nextn >= hp.n_layer) {
        throw model_error("model " + path + ": " + a + ".nextn_predict_layers " + std::to_string(nextn) +
                          " must be in [0, block_count " + std::to_string(hp.n_layer) + ")");
    }
    hp.n_layer -= nextn;
    hp.n_expert_shared = f.get_int(a + ".expert_shared_count");
    hp.n_layer_dense_lead = f.get_int(a + ".leading_dense_block_count", 0);
    if (hp.n_expert_shared < 0 || hp.n_expert_shared > 64 || hp.n_layer_dense_lead < 0 ||
        hp.n_layer_dense_lead > hp.n_layer) {
        throw model_error("model " + path + ": invalid " + a + " experts (expert_shared_count " +
                          std::to_string(hp.n_expert_shared) + ", leading_dense_block_count " +
                          std::to_string(hp.n_layer_dense_lead) + ")");
    }
    const double scale = f.get_float(a + ".expert_weights_scale", 0.0);
    if (!std::isfinite(float(scale)) || scale < 0) {   // float: a double past float's range is infinite there
        throw model_error("model " + path + ": " + a + ".expert_weights_scale " + std::to_string(scale) + " is invalid");
    }
    hp.expert_weights_scale = scale == 0.0 ? 1.0f : float(scale);
    hp.expert_weights_norm = f.get_int(a + ".expert_weights_norm", 0) != 0;
    const int64_t gating = f.get_int(a + ".expert_gating_func", gating_absent);   // 0 (none): the sigmoid, as llama.cpp's
    if (gating < 0 || gating > 2) {
        throw model_error("model " + path + ": " + a + ".expert_gating_func " + std::to_string(gating) +
                          " is not supported (0 or 2 sigmoid, 1 softmax)");
    }
    hp.gating = gating == 1 ? GATING_SOFTMAX : GATING_SIGMOID;
    // llama.cpp turns M-RoPE (GLM-4.5V's) on when any section is non-zero; its numbers are integers of
    // any width (a number is zero when all its bytes are)
    const gguf_value* sections = f.find(a + ".rope.dimension_sections");
    if (sections && sections->type == GGUF_TYPE_ARRAY && sections->arr_data) {
        const size_t n_bytes = size_t(sections->arr_n) * gguf_scalar_size(sections->arr_type);
        for (size_t i = 0; i < n_bytes; i++) {
            if (sections->arr_data[i] != 0) {
                throw model_error("model " + path + ": " + a + ".rope.dimension_sections (multimodal M-RoPE) is not supported");
            }
        }
    }
}

// gemma3's keys and constants, as llama.cpp reads them: an optional window (attention.sliding_window,
// 0 or none: every layer global), GeGLU, embeddings x sqrt(n_embd), queries x 1 / sqrt(head_dim) (the
// 27B, 62 layers: 1 / sqrt(n_embd / n_head)), an optional final_logit_softcapping.
void read_gemma3(const gguf_file& f, const std::string& path, model_hparams& hp) {
    const std::string a = hp.arch;
    hp.ffn_act = FFN_GEGLU;
    hp.n_swa = f.get_int(a + ".attention.sliding_window", 0);
    if (hp.n_swa < 0) {
        throw model_error("model " + path + ": attention.sliding_window " + std::to_string(hp.n_swa) + " is negative");
    }
    if (hp.n_swa == 0) hp.rope_freq_base_swa = 0.0f;   // no windowed layers: one RoPE
    else if (hp.rope_freq_scale != 1.0f) hp.rope_freq_scale_swa = 1.0f;
    hp.embd_scale = std::sqrt(float(hp.n_embd));
    hp.attn_scale = hp.n_layer == 62 ? 1.0f / std::sqrt(float(hp.n_embd / hp.n_head)) : 1.0f / std::sqrt(float(hp.head_dim));
    const double cap = f.get_float(a + ".final_logit_softcapping", 0.0);
    if (!std::isfinite(float(cap)) || cap < 0) {   // float: a double past float's range is infinite there
        throw model_error("model " + path + ": final_logit_softcapping " + std::to_string(cap) + " is invalid");
    }
    hp.final_logit_softcap = float(cap);
}

// deepseek2's multi-head latent attention keys (model_hparams' MLA), as llama.cpp reads an MLA conversion:
// one KV head of key_length = kv_lora_rank + n_rot and value_length = kv_lora_rank, the per-head sizes
// key_length_mla / value_length_mla, q_lora_rank (0 or none: attn_q), and the query scale
// mscale^2 / sqrt(key_length_mla) with mscale = the YaRN factor times 1 + 0.1 m ln(factor), m the file's
// rope.scaling.yarn_log_multiplier / 0.1 (llama.cpp's [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]); with a log
// multiplier its RoPE is unscaled (yarn_mscale). An optional attention temperature (Mistral Large 3)
// floors at attention.temperature_length.
void read_deepseek2(const gguf_file& f, const std::string& path, model_hparams& hp, bool yarn) {
    const std::string a = hp.arch;
    hp.kv_lora_rank = f.get_int(a + ".attention.kv_lora_rank");
    hp.q_lora_rank = f.get_int(a + ".attention.q_lora_rank", 0);
    if (!f.find(a + ".attention.key_length_mla") || !f.find(a + ".attention.value_length_mla")) {
        throw model_error("model " + path + ": " + a + " without attention.key_length_mla / value_length_mla (an old "
                          "conversion with one attn_kv_b tensor): convert the model again with a current llama.cpp");
    }
    hp.mla_qk_head = f.get_int(a + ".attention.key_length_mla");
    hp.mla_v_head = f.get_int(a + ".attention.value_length_mla");
    const int64_t v_len = f.get_int(a + ".attention.value_length", hp.head_dim);
    if (hp.kv_lora_rank <= 0 || hp.kv_lora_rank > 8192 || hp.q_lora_rank < 0 || hp.q_lora_rank > 65536 ||
        hp.n_head_kv != 1 || hp.head_dim != hp.kv_lora_rank + hp.n_rot || v_len != hp.kv_lora_rank ||
        hp.mla_qk_head <= hp.n_rot || hp.mla_qk_head > 1024 || hp.mla_v_head <= 0 || hp.mla_v_head > 1024) {
        throw model_error("model " + path + ": invalid " + a + " attention (head_count_kv " + std::to_string(hp.n_head_kv) +
                          ", kv_lora_rank " + std::to_string(hp.kv_lora_rank) + ", q_lora_rank " +
                          std::to_string(hp.q_lora_rank) + ", key_length " + std::to_string(hp.head_dim) +
                          ", value_length " + std::to_string(v_len) + ", rope.dimension_count " + std::to_string(hp.n_rot) +
                          ", key_length_mla " + std::to_string(hp.mla_qk_head) + ", value_length_mla " +
                          std::to_string(hp.mla_v_head) + "): an MLA conversion has head_count_kv 1, key_length = "
                          "kv_lora_rank + rope.dimension_count, value_length = kv_lora_rank, key_length_mla > "
                          "rope.dimension_count");
    }
    const double m_file = f.get_float(a + ".rope.scaling.yarn_log_multiplier", 0.0);
    if (!std::isfinite(m_file)) throw model_error("model " + path + ": " + a + ".rope.scaling.yarn_log_multiplier is not a finite number");
    const double m = m_file / 0.1, factor = 1.0 / double(hp.rope_freq_scale), ln_f = std::log(factor);
    double attn_factor = double(hp.rope_attn_factor) * (1.0 + 0.1 * ln_f);   // without YaRN, as llama.cpp's
    if (yarn) {
        hp.yarn_log_mul = float(m);
        hp.yarn_mscale = m != 0.0 ? float(m) : 1.0f;
        if (!(yarn_get_mscale(factor, m) > 0.0)) {
            throw model_error("model " + path + ": " + a + ".rope.scaling.yarn_log_multiplier " + std::to_string(m_file) +
                              " makes no YaRN scale (1 + m ln(factor) <= 0)");
        }
        attn_factor = double(hp.rope_attn_factor) * yarn_get_mscale(factor, double(hp.yarn_mscale)) /
                      yarn_get_mscale(factor, m);
    }
    const double mscale = attn_factor * (1.0 + 0.1 * m * ln_f);
    hp.attn_scale = float(mscale * mscale / std::sqrt(double(hp.mla_qk_head)));
    if (!(hp.attn_scale > 0.0f) || !std::isfinite(hp.attn_scale)) {
        throw model_error("model " + path + ": " + a + "'s rope scaling keys make no query scale (" +
                          std::to_string(hp.attn_scale) + ")");
    }
    const double temp = f.get_float(a + ".attention.temperature_scale", 0.0);
    if (!std::isfinite(temp)) throw model_error("model " + path + ": " + a + ".attention.temperature_scale is not a finite number");
    hp.attn_temp_scale = float(temp);
    if (hp.attn_temp_scale != 0.0f) {
        hp.attn_temp_floor = f.get_int(a + ".attention.temperature_length", 0);
        if (hp.attn_temp_floor <= 0) {
            throw model_error("model " + path + ": " + a + ".attention.temperature_scale needs a positive "
                              "attention.temperature_length, got " + std::to_string(hp.attn_temp_floor));
        }
    }
}

// deepseek2's attention weights of one layer (model_hparams' MLA)
void read_mla_layer(const loader& ld, const std::string& p, const model_hparams& hp, layer_weights& L) {
    const int64_t E = hp.n_embd, NH = hp.n_head, R = hp.kv_lora_rank, QK = hp.mla_qk_head;
    if (hp.q_lora_rank > 0) {
        L.wq_a = ld.matrix(p + "attn_q_a.weight", E, hp.q_lora_rank);
        L.q_a_norm = ld.vec(p + "attn_q_a_norm.weight", hp.q_lora_rank, true);
        L.wq_b = ld.matrix(p + "attn_q_b.weight", hp.q_lora_rank, NH * QK);
    } else {
        L.wq = ld.matrix(p + "attn_q.weight", E, NH * QK);
    }
    L.wkv_a = ld.matrix(p + "attn_kv_a_mqa.weight", E, hp.head_dim);
    L.kv_a_norm = ld.vec(p + "attn_kv_a_norm.weight", R, true);
    L.wk_b = ld.experts(p + "attn_k_b.weight", QK - hp.n_rot, R, NH);
    L.wv_b = ld.experts(p + "attn_v_b.weight", R, hp.mla_v_head, NH);
    L.wo = ld.matrix(p + "attn_output.weight", NH * hp.mla_v_head, E);
}

// deepseek2's expert_gating_func when the file has none, as llama.cpp decides it: the sigmoid for
// GLM-4.7-Flash (47 or 48 trunk layers, a vocabulary of 154880), else the softmax (DeepSeek V2 / V2.5's files)
int64_t deepseek2_gating_absent(const gguf_file& f, const model_hparams& hp) {
    int64_t n_vocab = f.get_int(hp.arch + ".vocab_size", 0);
    const gguf_value* tokens = f.find("tokenizer.ggml.tokens");
    if (n_vocab == 0 && tokens && tokens->type == GGUF_TYPE_ARRAY) n_vocab = int64_t(tokens->arr_n);
    const int64_t trunk = hp.n_layer - f.get_int(hp.arch + ".nextn_predict_layers", 0);   // llama.cpp's n_layer()
    const bool glm47 = n_vocab == 154880 && (trunk == 47 || trunk == 48);
    return glm47 ? 2 : 1;
}

}  // namespace

std::unique_ptr<model> model_load(std::shared_ptr<gguf_file> file) {
    const gguf_file& f = *file;
    const std::string& path = f.path();
    auto m = std::make_unique<model>();
    m->file = file;
    model_hparams& hp = m->hp;

    hp.arch = f.get_str("general.architecture");
    const std::string& a = hp.arch;
    const bool oss = a == "gpt-oss";
    const bool mistral3 = a == "mistral3";   // llama's layers plus YaRN keys and an attention temperature
    const bool glm = a == "glm4moe";          // sigmoid routing, shared experts, dense leading layers
    const bool gemma = a == "gemma3";         // windows of 5 layers in 6, sandwich norms, GeGLU
    const bool seed = a == "seed_oss";        // llama's layers, Q/K/V biases, NEOX RoPE
    const bool smollm3 = a == "smollm3";      // llama's layers, every 4th without RoPE
    const bool ds2 = a == "deepseek2";        // multi-head latent attention, glm4moe's experts
    if (a != "llama" && a != "qwen2" && a != "qwen3" && a != "qwen3moe" && !oss && !mistral3 && !glm && !gemma &&
        !seed && !smollm3 && !ds2) {
        throw model_error("model " + path + ": unsupported architecture '" + a +
                          "' (supported: llama, mistral3, smollm3, qwen2, qwen3, qwen3moe, gpt-oss, glm4moe, gemma3, "
                          "seed_oss, deepseek2)");
    }
    hp.n_embd = f.get_int(a + ".embedding_length");
    hp.n_layer = f.get_int(a + ".block_count");
    hp.n_head = f.get_int(a + ".attention.head_count");
    hp.n_head_kv = f.get_int(a + ".attention.head_count_kv", hp.n_head);
    hp.n_expert = f.get_int(a + ".expert_count", 0);
    hp.n_expert_used = f.get_int(a + ".expert_used_count", 0);
    hp.n_ff = f.get_int(a + ".feed_forward_length", hp.n_expert > 0 ? 1 : 0);
    // without the key, llama.cpp's widths: qwen3moe's experts share feed_forward_length out (n_ff / used),
    // a Mixtral-style llama's are each n_ff wide
    const bool ff_shared_out = a == "qwen3moe" && hp.n_expert_used > 0;
    const int64_t ff_exp_default = hp.n_expert <= 0 ? 0 : ff_shared_out ? hp.n_ff / hp.n_expert_used : hp.n_ff;
    hp.n_ff_exp = f.get_int(a + ".expert_feed_forward_length", ff_exp_default);
    if ((a == "qwen3moe" || oss || glm) && hp.n_expert == 0) throw model_error("model " + path + ": " + a + " without expert_count");
    if (hp.n_expert < 0 || hp.n_expert > 4096 || hp.n_expert_used < 0 || hp.n_expert_used > hp.n_expert ||
        (hp.n_expert > 0 && (hp.n_expert_used == 0 || hp.n_ff_exp <= 0 || hp.n_ff_exp > (1 << 22)))) {
        throw model_error("model " + path + ": invalid experts in metadata (expert_count " + std::to_string(hp.n_expert) +
                          ", expert_used_count " + std::to_string(hp.n_expert_used) + ", expert_feed_forward_length " +
                          std::to_string(hp.n_ff_exp) + ")");
    }
    // llama.cpp routes within the best expert_group_used_count of expert_group_count groups (DeepSeek-V2 / V3's
    // n_group / topk_group); the router here sees every expert, the same only with one group or all of them used
    const int64_t n_groups = f.get_int(a + ".expert_group_count", 0);
    const int64_t n_groups_used = f.get_int(a + ".expert_group_used_count", 0);
    if (hp.n_expert > 0 && n_groups > 1 && n_groups_used != n_groups) {
        throw model_error("model " + path + ": " + a + ".expert_group_count " + std::to_string(n_groups) + " with " +
                          a + ".expert_group_used_count " + std::to_string(n_groups_used) +
                          " (routing within the best groups) is not supported");
    }
    hp.n_ctx_train = f.get_int(a + ".context_length", 4096);
    hp.rms_eps = float(f.get_float(a + ".attention.layer_norm_rms_epsilon", 1e-5));
    hp.rope_freq_base = float(f.get_float(a + ".rope.freq_base", 10000.0));
    // a crafted or damaged file's NaN, infinity (a double past float's range too) or negative number loaded and
    // made every request's logits NaN: refused here, naming the key
    if (!std::isfinite(hp.rms_eps) || hp.rms_eps < 0.0f) {
        throw model_error("model " + path + ": " + a + ".attention.layer_norm_rms_epsilon " + number_str(hp.rms_eps) +
                          " must be a finite number >= 0");
    }
    if (!std::isfinite(hp.rope_freq_base) || !(hp.rope_freq_base > 0.0f)) {
        throw model_error("model " + path + ": " + a + ".rope.freq_base " + number_str(hp.rope_freq_base) +
                          " must be a finite number > 0");
    }
    // qwen2, qwen3, qwen3moe, gpt-oss, glm4moe, gemma3, seed_oss: NEOX
    hp.rope = a == "llama" || mistral3 || smollm3 || ds2 ? ROPE_NORM : ROPE_NEOX;
    if (glm) read_glm4moe_experts(f, path, hp);
    if (ds2) read_glm4moe_experts(f, path, hp, deepseek2_gating_absent(f, hp));
    if (oss) {
        hp.ffn_act = FFN_SWIGLU_OAI;
        hp.n_swa = f.get_int(a + ".attention.sliding_window");
        if (hp.n_swa <= 0) {
            throw model_error("model " + path + ": attention.sliding_window " + std::to_string(hp.n_swa) +
                              " must be positive");
        }
    }
    if (oss || gemma) {
        // the windowed layers' RoPE base, as llama.cpp's: gpt-oss's the other layers' unless the file says,
        // gemma3's 10000 unless it says, and unscaled (its global layers carry the file's linear factor)
        const double base_swa = f.get_float(a + ".rope.freq_base_swa", oss ? hp.rope_freq_base : 10000.0);
        if (!(base_swa > 0.0) || !std::isfinite(float(base_swa))) {
            throw model_error("model " + path + ": rope.freq_base_swa " + std::to_string(base_swa) + " must be positive");
        }
        if (float(base_swa) != hp.rope_freq_base) hp.rope_freq_base_swa = float(base_swa);
    }
    if (hp.n_embd <= 0 || hp.n_layer <= 0 || hp.n_head <= 0 || hp.n_head_kv <= 0 || hp.n_ff <= 0) {
        throw model_error("model " + path + ": non-positive size in metadata (n_embd " + std::to_string(hp.n_embd) +
                          ", n_layer " + std::to_string(hp.n_layer) + ", n_head " + std::to_string(hp.n_head) +
                          ", n_head_kv " + std::to_string(hp.n_head_kv) + ", n_ff " + std::to_string(hp.n_ff) + ")");
    }
    if (hp.n_layer > 1024 || hp.n_head > 1024 || hp.n_embd > (1 << 20) || hp.n_ff > (1 << 22)) {
        throw model_error("model " + path + ": absurd model size in metadata");
    }
    if (hp.n_head % hp.n_head_kv != 0) {
        throw model_error("model " + path + ": head_count " + std::to_string(hp.n_head) +
                          " is not a multiple of head_count_kv " + std::to_string(hp.n_head_kv));
    }
    if (hp.n_head / hp.n_head_kv > 64) {   // the attention kernels' query heads per KV head
        throw model_error("model " + path + ": more than 64 query heads per KV head (" +
                          std::to_string(hp.n_head / hp.n_head_kv) + ") is not supported");
    }
    hp.head_dim = f.get_int(a + ".attention.key_length", hp.n_embd / hp.n_head);
    if (!ds2 && f.get_int(a + ".attention.value_length", hp.head_dim) != hp.head_dim) {   // deepseek2's: read_deepseek2
        throw model_error("model " + path + ": key_length != value_length is not supported");
    }
    if (hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.head_dim > 1024) {
        throw model_error("model " + path + ": unsupported head size " + std::to_string(hp.head_dim));
    }
    hp.n_rot = f.get_int(a + ".rope.dimension_count", hp.head_dim);
    if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
        throw model_error("model " + path + ": rope.dimension_count " + std::to_string(hp.n_rot) + " is invalid");
    }
    // as llama.cpp reads them: no type is "linear" (a factor of 0 or none: no scaling), the factor under
    // its old key rope.scale_linear too; rope.scaling.attn_factor multiplies cos and sin whatever the type
    std::string scaling = f.get_str(a + ".rope.scaling.type", "linear");
    if (scaling == "linear" || scaling == "yarn") {
        double factor = f.get_float(a + ".rope.scaling.factor", f.get_float(a + ".rope.scale_linear", 0.0));
        if (factor == 0.0) factor = 1.0;
        if (!(factor > 0) || !std::isfinite(float(factor))) {
            throw model_error("model " + path + ": rope.scaling.factor " + number_str(factor) + " must be positive and finite");
        }
        hp.rope_freq_scale = float(1.0 / factor);
    } else if (scaling != "none" && scaling != "") {
        throw model_error("model " + path + ": unsupported rope scaling '" + scaling + "' (supported: linear, yarn)");
    }
    hp.rope_attn_factor = float(f.get_float(a + ".rope.scaling.attn_factor", 1.0));
    if (!(hp.rope_attn_factor > 0) || !std::isfinite(hp.rope_attn_factor)) {
        throw model_error("model " + path + ": rope.scaling.attn_factor " + std::to_string(hp.rope_attn_factor) +
                          " must be positive and finite");
    }
    if (scaling == "yarn") {
        // llama.cpp reads no rope.scaling.yarn_* key for these architectures: ext_factor 1, beta_fast 32,
        // beta_slow 1 whatever the file says; an original context of 0 or none is the training context
        hp.yarn_ext_factor = 1.0f;
        hp.yarn_orig_ctx = f.get_int(a + ".rope.scaling.original_context_length", 0);
        if (hp.yarn_orig_ctx == 0) hp.yarn_orig_ctx = hp.n_ctx_train;
        if (hp.yarn_orig_ctx <= 0) {
            throw model_error("model " + path + ": invalid YaRN original context length " +
                              std::to_string(hp.yarn_orig_ctx));
        }
    }
    if (mistral3) read_mistral3_scaling(f, path, hp);
    if (ds2) read_deepseek2(f, path, hp, scaling == "yarn");
    if (gemma) read_gemma3(f, path, hp);

    loader ld{f, path};
    const gguf_tensor* embd = ld.find("token_embd.weight", true);
    if (embd->shape.size() != 2 || embd->shape[0] != hp.n_embd) {
        throw model_error("model " + path + ": token_embd.weight has shape " + shape_str(embd->shape) +
                          ", expected [" + std::to_string(hp.n_embd) + ", n_vocab]");
    }
    hp.n_vocab = embd->shape[1];
    int64_t meta_vocab = f.get_int(a + ".vocab_size", hp.n_vocab);
    if (meta_vocab != hp.n_vocab) {
        throw model_error("model " + path + ": vocab_size " + std::to_string(meta_vocab) +
                          " disagrees with token_embd rows " + std::to_string(hp.n_vocab));
    }
    m->token_embd = ld.matrix("token_embd.weight", hp.n_embd, hp.n_vocab);
    m->output = f.find_tensor("output.weight") ? ld.matrix("output.weight", hp.n_embd, hp.n_vocab) : m->token_embd;
    m->output_norm = ld.vec("output_norm.weight", hp.n_embd, true);
    m->rope_freq_factors = ld.vec("rope_freqs.weight", hp.n_rot / 2, false);

    // gpt-oss and gemma3: which layers have the window, as llama.cpp reads attention.sliding_window_pattern:
    // an array of one bool per layer, or a period n (layer il has it when il % n < n - 1; 0: every layer;
    // the default 2 for gpt-oss, the even layers; 6 for gemma3, five layers in six)
    std::vector<bool> windowed(size_t(hp.n_layer), false);
    if (hp.n_swa > 0) {
        const std::string key = a + ".attention.sliding_window_pattern";
        const gguf_value* pat = f.find(key);
        if (pat && pat->type == GGUF_TYPE_ARRAY) {
            if (pat->arr_type != GGUF_TYPE_BOOL || pat->arr_n != uint64_t(hp.n_layer)) {
                throw model_error("model " + path + ": " + key + " must be " + std::to_string(hp.n_layer) +
                                  " bools (one per layer)");
            }
            for (int64_t il = 0; il < hp.n_layer; il++) windowed[size_t(il)] = pat->arr_data[il] != 0;
        } else {
            // get_int: a non-integer refused naming the key; any period works (past n_layer: every layer
            // windowed, as llama.cpp's)
            const int64_t n = pat ? f.get_int(key) : oss ? 2 : 6;
            if (n < 0) {
                throw model_error("model " + path + ": " + key + " " + std::to_string(n) + " is invalid");
            }
            for (int64_t il = 0; il < hp.n_layer; il++) windowed[size_t(il)] = n == 0 || il % n < n - 1;
        }
    }
    const int64_t E = hp.n_embd, Q = hp.q_dim(), KV = hp.kv_dim(), F = hp.n_ff;
    m->layers.resize(size_t(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; il++) {
        layer_weights& L = m->layers[size_t(il)];
        const std::string p = "blk." + std::to_string(il) + ".";
        L.attn_norm = ld.vec(p + "attn_norm.weight", E, true);
        L.ffn_norm = ld.vec(p + (oss || glm || seed ? "post_attention_norm.weight" : "ffn_norm.weight"), E, true);
        L.rope = !(smollm3 && (il + 1) % 4 == 0);   // SmolLM3's NoPE layers (llama.cpp's n_no_rope_layer_step 4)
        if (gemma) {
            L.attn_post_norm = ld.vec(p + "post_attention_norm.weight", E, true);
            L.ffn_post_norm = ld.vec(p + "post_ffw_norm.weight", E, true);
        }
        L.window = windowed[size_t(il)] ? hp.n_swa : 0;
        if (ds2) {
            read_mla_layer(ld, p, hp, L);
        } else {
            L.wq = ld.matrix(p + "attn_q.weight", E, Q);
            L.wk = ld.matrix(p + "attn_k.weight", E, KV);
            L.wv = ld.matrix(p + "attn_v.weight", E, KV);
            L.wo = ld.matrix(p + "attn_output.weight", Q, E);
        }
        if (hp.moe() && il >= hp.n_layer_dense_lead) {
            const int64_t NE = hp.n_expert, FE = hp.n_ff_exp;
            L.ffn_gate_inp = ld.matrix(p + "ffn_gate_inp.weight", E, NE);
            L.gate_exps = ld.experts(p + "ffn_gate_exps.weight", E, FE, NE);
            L.up_exps = ld.experts(p + "ffn_up_exps.weight", E, FE, NE);
            L.down_exps = ld.experts(p + "ffn_down_exps.weight", FE, E, NE);
            if (glm || ds2) {   // deepseek2's selection bias is optional (V3's, GLM-4.7-Flash's)
                L.exp_probs_b = ld.vec(p + "exp_probs_b.bias", NE, glm);
                if (hp.n_expert_shared > 0) {
                    const int64_t FS = FE * hp.n_expert_shared;
                    L.gate_shexp = ld.matrix(p + "ffn_gate_shexp.weight", E, FS);
                    L.up_shexp = ld.matrix(p + "ffn_up_shexp.weight", E, FS);
                    L.down_shexp = ld.matrix(p + "ffn_down_shexp.weight", FS, E);
                }
            }
        } else {
            L.w_gate = ld.matrix(p + "ffn_gate.weight", E, F);
            L.w_up = ld.matrix(p + "ffn_up.weight", E, F);
            L.w_down = ld.matrix(p + "ffn_down.weight", F, E);
        }
        L.bo = ld.vec(p + "attn_output.bias", E, oss);   // optional elsewhere, as llama.cpp's
        if (oss) {
            const int64_t NE = hp.n_expert, FE = hp.n_ff_exp;
            L.sinks = ld.vec(p + "attn_sinks.weight", hp.n_head, true);
            L.router_b = ld.vec(p + "ffn_gate_inp.bias", NE, true);
            L.gate_exps_b = ld.floats(p + "ffn_gate_exps.bias", {FE, NE}, true);
            L.up_exps_b = ld.floats(p + "ffn_up_exps.bias", {FE, NE}, true);
            L.down_exps_b = ld.floats(p + "ffn_down_exps.bias", {E, NE}, true);
        }
        bool biases = a == "qwen2" || oss;   // glm4moe's and seed_oss's are read where the file has them, as llama.cpp's
        L.bq = ld.vec(p + "attn_q.bias", Q, biases);
        L.bk = ld.vec(p + "attn_k.bias", KV, biases);
        L.bv = ld.vec(p + "attn_v.bias", KV, biases);
        bool qk_norm = a == "qwen3" || a == "qwen3moe" || gemma;
        L.q_norm = ld.vec(p + "attn_q_norm.weight", hp.head_dim, qk_norm);
        L.k_norm = ld.vec(p + "attn_k_norm.weight", hp.head_dim, qk_norm);
        // optional where the file has them, but the forward pass adds Q, K and V biases together and norms Q
        // and K together: a file with a part of a set (crafted or damaged) read a null vector, refused here
        require_together(path, p, {{"attn_q.bias", &L.bq}, {"attn_k.bias", &L.bk}, {"attn_v.bias", &L.bv}});
        require_together(path, p, {{"attn_q_norm.weight", &L.q_norm}, {"attn_k_norm.weight", &L.k_norm}});
    }
    return m;
}

}  // namespace strata
