// engine::splice: moving a context's cells to new positions (llama.cpp's --cache-reuse: seq_rm, then
// seq_add's K shift) and reading new tokens into the gaps between them.
//
// RoPE rotates each dimension pair by an angle linear in the position (linear and YaRN scaling, rope_freqs
// factors included), so a key stored at position p, rotated by the angles of (q - p) without the cos / sin
// scale (attn_factor, YaRN's mscale: applied once already), is the key at q up to rounding of the stored type.
// V holds no position. Not here: which cells to reuse (server/cache_reuse.py), the forward (forward.cpp).
#include <algorithm>
#include <cstring>

#include "attention.h"
#include "engine.h"
#include "forward-rows.h"

namespace strata {

std::string engine::shift_refusal() const {
    const model_hparams& h = hp();
    if (h.mla()) {
        return "the KV of " + h.arch + " (multi-head latent attention) cannot be moved: its latent is not rotated "
               "as a key is";
    }
    for (const layer_weights& L : mdl().layers) {
        if (L.window > 0) {
            return "the KV of " + h.arch + " (layers with a sliding window) cannot be moved: a moved history's "
                   "window would hold other tokens than a fresh read's";
        }
    }
#ifdef STRATA_WITH_CUDA
    if (gpu_) return "the KV on the GPU (backend cuda) cannot be moved";
#endif
    return "";
}

void engine::splice(int ctx_id, int64_t keep, const splice_piece* pieces, int64_t n_pieces) {
    std::lock_guard<std::mutex> lock(mutex_);
    context& c = ctx_mut(ctx_id);
    const std::string refusal = shift_refusal();
    if (!refusal.empty()) throw engine_error("splice: " + refusal);
    const int64_t n0 = int64_t(c.tokens.size());
    if (keep < 0 || keep > n0) {
        throw engine_error("splice: keep " + std::to_string(keep) + " outside context " + std::to_string(ctx_id) +
                           "'s " + std::to_string(n0) + " tokens");
    }
    // where each piece goes, and the history it leaves
    std::vector<int64_t> dst(size_t(std::max<int64_t>(n_pieces, 0)));
    std::vector<int32_t> tokens(c.tokens.begin(), c.tokens.begin() + keep);
    int64_t at = keep, moved_end = keep;
    for (int64_t i = 0; i < n_pieces; i++) {
        const splice_piece& p = pieces[i];
        const std::string which = "splice: piece " + std::to_string(i) + " ";
        if (p.n < 1) throw engine_error(which + "is empty");
        // every bound compared without adding the piece's length to a position: a huge length wrapped around,
        // passed, and the splice then dropped the history past `keep` without a word
        if (p.src >= 0) {
            if (p.src < moved_end || p.src > n0 || p.n > n0 - p.src) {
                throw engine_error(which + "moves cells [" + std::to_string(p.src) + ", " +
                                   std::to_string(uint64_t(p.src) + uint64_t(p.n)) + "): they must lie in [" +
                                   std::to_string(moved_end) + ", " + std::to_string(n0) +
                                   ") (after the kept ones and the pieces moved before it, in the history)");
            }
        } else if (p.src != -1 || p.tokens == nullptr) {
            throw engine_error(which + "has source " + std::to_string(p.src) + ": a position, or -1 with tokens");
        }
        if (p.n > c.capacity - at) {
            throw engine_error("splice: " + std::to_string(uint64_t(at) + uint64_t(p.n)) + " tokens exceed context " +
                               std::to_string(ctx_id) + "'s capacity " + std::to_string(c.capacity));
        }
        if (p.src >= 0) {
            moved_end = p.src + p.n;
            tokens.insert(tokens.end(), c.tokens.begin() + p.src, c.tokens.begin() + p.src + p.n);
        } else {
            check_tokens(p.tokens, p.n);
            tokens.insert(tokens.end(), p.tokens, p.tokens + p.n);
        }
        dst[size_t(i)] = at;
        at += p.n;
    }
    // each moved piece's rotation, (n_rot / 2) (cos, sin) pairs of the angles of its delta, unscaled
    model_hparams unscaled = hp();
    unscaled.rope_attn_factor = 1.0f;
    unscaled.yarn_mscale = unscaled.yarn_log_mul;   // YaRN's mscale ratio 1
    const int64_t n_rot = hp().n_rot, HD = kvh_.head_dim;
    std::vector<float> rot(size_t(std::max<int64_t>(n_pieces, 0) * n_rot));
    int64_t n_moved = 0;
    for (int64_t i = 0; i < n_pieces; i++) {
        if (pieces[i].src < 0) continue;
        n_moved += pieces[i].n;
        rope_table(unscaled, mdl().rope_freq_factors, dst[size_t(i)] - pieces[i].src, rot.data() + i * n_rot);
    }
    c.has_logits = false;
    // from here the cells past `keep` are rewritten: a failure anywhere (a scratch buffer of the move refused by
    // the allocator, the forward) leaves the history at `keep`, whose cells no piece writes. Before, a failed
    // move left the old history in `tokens` over cells some heads had already overwritten.
    try {
        if (n_moved > 0) {
            // per (layer, kv head): every moved piece's rows out first (pieces may move right, onto later sources)
            pool_->parallel_range(kv_.n_layer * kv_.n_head_kv, 1, 1, [&](int64_t b, int64_t e, int) {
                std::vector<uint8_t> ks(size_t(n_moved) * kvh_.row_bytes), vs(ks.size());
                std::vector<float> f(static_cast<size_t>(HD));
                for (int64_t u = b; u < e; u++) {
                    const int64_t il = u / kv_.n_head_kv, g = u % kv_.n_head_kv;
                    const bool rotate = mdl().layers[size_t(il)].rope;
                    size_t off = 0;
                    for (int64_t i = 0; i < n_pieces; i++) {
                        const splice_piece& p = pieces[i];
                        if (p.src < 0) continue;
                        uint8_t* kr = ks.data() + off;
                        kv_get_rows(kvh_, c.k_head(il, g), true, p.src, p.src + p.n, kr);
                        kv_get_rows(kvh_, c.v_head(il, g), false, p.src, p.src + p.n, vs.data() + off);
                        for (int64_t t = 0; rotate && t < p.n; t++) {
                            uint8_t* row = kr + size_t(t) * kvh_.row_bytes;
                            kv_row_to_float(kvh_, row, f.data());
                            rope_head(f.data(), rot.data() + i * n_rot, n_rot, hp().rope);
                            kv_row_from_float(kvh_, f.data(), row);
                        }
                        off += size_t(p.n) * kvh_.row_bytes;
                    }
                    off = 0;
                    for (int64_t i = 0; i < n_pieces; i++) {
                        const splice_piece& p = pieces[i];
                        if (p.src < 0) continue;
                        const int64_t d = dst[size_t(i)];
                        kv_set_rows(kvh_, c.k_head(il, g), true, d, d + p.n, ks.data() + off);
                        kv_set_rows(kvh_, c.v_head(il, g), false, d, d + p.n, vs.data() + off);
                        off += size_t(p.n) * kvh_.row_bytes;
                    }
                }
            });
        }
        // the new pieces, in order: each row attends to the cells before it, all in place by now
        std::vector<batch_row> rows;
        for (int64_t i = 0; i < n_pieces; i++) {
            const splice_piece& p = pieces[i];
            if (p.src >= 0) continue;
            const bool last = i == n_pieces - 1;
            for (int64_t s = 0; s < p.n; s += max_rows_) {
                rows.clear();
                for (int64_t t = s; t < std::min(p.n, s + max_rows_); t++)
                    rows.push_back({&c, p.tokens[t], dst[size_t(i)] + t, last && t == p.n - 1 ? c.logits : nullptr});
                forward(rows.data(), int64_t(rows.size()));
            }
            c.has_logits = last;
        }
    } catch (...) {
        c.tokens.resize(size_t(keep));   // the cells past it are neither the old history nor the new
        c.has_logits = false;
        throw;
    }
    c.tokens = std::move(tokens);
}

}  // namespace strata
