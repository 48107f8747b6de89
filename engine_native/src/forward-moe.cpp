// The mixture-of-experts FFN of a batch of rows (engine::moe_ffn, called by forward.cpp): each row's
// experts and weights (Mixtral's softmax of the chosen, or glm4moe's / deepseek2's probabilities with a
// selection bias), the chosen experts' products run once per expert over its rows, gpt-oss's expert
// biases, the shared experts (glm4moe, deepseek2).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine.h"
#include "forward-rows.h"
#include "quants.h"

namespace strata {

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

}  // namespace strata
