// Check program for tests/native/test_attention_values_in_keys_builds.py: a KV whose values are its keys
// (kv_layout::v_in_k, deepseek2's latent row) on each vec16 build (AVX-512, AVX2, scalar). Per case (KV
// type, head size, query heads, window, history): attention_group over the shared layout (V read from K's
// tiles, or its rows) against attention_group over a separate V buffer holding the same rows, bitwise; and
// for f16 heads of a multiple of 32, one row in parts (attention_scores_part / _softmax_part /
// _values_part, the engine's decode on several threads) against the same. Prints "checksum XXXXXXXX" of
// all outputs (the same floats on every build) and "N of M cases differ".
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "attention.h"
#include "harness_fp16.h"
#include "quants.h"
using namespace strata;

// k / 512 for |k| <= 1000: exact in fp16, the same stored KV on every build
static std::mt19937 rng(11);
static float draw() { return float(int(rng() % 2001u) - 1000) / 512.0f; }

int main() {
    struct shape { int type, hd; };
    const shape shapes[] = {{1, 64}, {1, 576}, {0, 64}, {0, 576}, {1, 40}, {0, 48}};
    int bad = 0, checks = 0;
    uint32_t sum = 2166136261u;
    for (const shape& s : shapes)
    for (int n_rep : {3, 20})
    for (int64_t window : {0, 7})
    for (int64_t n_pos : {1, 17, 40, 161}) {
        const kv_layout sep = kv_layout_make(s.type, 1, 1, s.hd), shared = kv_layout_make(s.type, 1, 1, s.hd, true);
        const int64_t cap = 161;
        std::vector<uint8_t> k(sep.k_bytes(cap)), v(sep.v_bytes(cap)), ks(shared.k_bytes(cap));
        std::vector<float> row(size_t(s.hd));
        for (int64_t t = 0; t < cap; t++) {
            for (auto& x : row) x = draw();
            kv_store(sep, k.data(), v.data(), t, row.data(), row.data());
            kv_store(shared, ks.data(), nullptr, t, row.data(), nullptr);
        }
        std::vector<float> q(size_t(n_rep * s.hd)), out1(q.size()), out2(q.size());
        for (auto& x : q) x = draw();
        std::vector<float> sc(size_t(attention_scratch_floats(n_rep, cap)));
        attention_group(sep, k.data(), v.data(), q.data(), 0, n_rep, n_pos, 0.0625f, out1.data(), sc.data(), window);
        attention_group(shared, ks.data(), ks.data(), q.data(), 0, n_rep, n_pos, 0.0625f, out2.data(), sc.data(), window);
        bool same = std::memcmp(out1.data(), out2.data(), out1.size() * 4) == 0;
        if (window == 0 && attention_split_ok(shared)) {   // one row in parts of 3 tile ranges, 32 dimensions
            const int64_t n_tiles = (n_pos + 15) / 16, n_pad = n_tiles * 16;
            std::vector<float> scores(static_cast<size_t>(n_rep * n_pad)), inv(static_cast<size_t>(n_rep)), out3(q.size());
            for (int p = 0; p < 3; p++)
                attention_scores_part(shared, ks.data(), q.data(), 0, n_rep, n_tiles * p / 3, n_tiles * (p + 1) / 3, n_pad,
                                      0.0625f, scores.data());
            for (int h = 0; h < n_rep; h++) inv[size_t(h)] = attention_softmax_part(scores.data() + h * n_pad, n_pos, n_pad);
            for (int64_t d0 = 0; d0 < s.hd; d0 += k_attention_split_dims)
                attention_values_part(shared, ks.data(), scores.data(), 0, n_rep, n_pos, n_pad, inv.data(), d0, out3.data());
            same = same && std::memcmp(out1.data(), out3.data(), out1.size() * 4) == 0;
        }
        for (float x : out1) same = same && std::isfinite(x);
        checks++;
        if (!same) {
            bad++;
            printf("DIFF type %d hd %d n_rep %d window %lld n_pos %lld\n", s.type, s.hd, n_rep, (long long)window,
                   (long long)n_pos);
        }
        sum = fold_checksum(sum, out2.data(), out2.size());
    }
    printf("checksum %08x\n", sum);
    printf("%d of %d cases differ\n", bad, checks);
    return bad != 0;
}
