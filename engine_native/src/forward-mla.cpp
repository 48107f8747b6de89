// deepseek2's multi-head latent attention around the attention kernels (model_hparams' MLA, called by
// forward.cpp): the rows' queries through the optional q LoRA and each head's attn_k_b into latent space,
// their latent KV row into the cache; after attention, each head's latent output through its attn_v_b.
#include <cstring>
#include <vector>

#include "attention.h"
#include "engine.h"
#include "forward-rows.h"
#include "quants.h"

namespace strata {

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
    // per row: the latent normed and the shared key part rotated, stored as the row's K (and its V where
    // the layout keeps one: q8_0); each head's query part rotated into q_ and its nope part set out per head
    // for attn_k_b
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

}  // namespace strata
