// Check program for tests/native/test_attention_window_builds.py: sliding windows and attention sinks
// on each vec16 build (AVX-512, AVX2, scalar). Per case (KV type, head size, window, sinks, history):
//   1. attention_row_group (a group of rows) against attention_group row by row, bitwise;
//   2. the same rows over a KV whose positions before every row's window hold NaN (K and V; q8_0: the
//      blocks' fp16 scales), bitwise equal to the finite KV's: the kernels never let those positions
//      into a result (for whole tiles before the window: they are not read at all, or NaN would show);
// then prints "checksum XXXXXXXX" of all outputs (the same floats on every build) and "N of M cases
// differ". Not a numeric reference (test_attention_window.py checks the values against NumPy).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "attention.h"
#include "harness_fp16.h"
#include "quants.h"
using namespace strata;

// Positions [0, n) of one K or V buffer overwritten with NaN in their stored form.
static void poison(const kv_layout& L, uint8_t* buf, bool is_k, int64_t n) {
    if (n <= 0) return;
    std::vector<uint8_t> rows(size_t(n) * L.row_bytes);
    kv_get_rows(L, buf, is_k, 0, n, rows.data());
    const uint16_t nan16 = 0x7e00;
    const uint32_t nan32 = 0x7fc00000u;
    for (int64_t t = 0; t < n; t++) {
        uint8_t* r = rows.data() + size_t(t) * L.row_bytes;
        if (L.type == 0) {
            for (size_t b = 0; b < L.row_bytes; b += 4) std::memcpy(r + b, &nan32, 4);
        } else if (L.type == 1) {
            for (size_t b = 0; b < L.row_bytes; b += 2) std::memcpy(r + b, &nan16, 2);
        } else {
            for (size_t b = 0; b < L.row_bytes; b += 34) std::memcpy(r + b, &nan16, 2);
        }
    }
    kv_set_rows(L, buf, is_k, 0, n, rows.data());
}

// Inputs from integers (k / 512, |k| <= 1000: exact in fp16, so every build stores the same K/V; no
// libm call that -mfma could contract differently)
static std::mt19937 rng(7);
static float draw() { return float(int(rng() % 2001u) - 1000) / 512.0f; }

int main() {
    struct shape { int type, hd; };
    const shape shapes[] = {{1, 32}, {1, 64}, {1, 128}, {1, 48}, {0, 64}, {0, 80}, {8, 32}, {8, 64}, {8, 128}, {8, 96}};
    int bad = 0, checks = 0;
    uint32_t sum = 2166136261u;
    for (const shape& s : shapes)
    for (int64_t window : {0, 1, 7, 16, 33, 128})
    for (int sink_kind : {0, 1, 2})   // none, around the scores, dominating
    for (int64_t base : {0, 5, 40, 300}) {
        const int n_kv = 2, n_rep = s.hd == 128 ? 4 : 3;
        kv_layout L = kv_layout_make(s.type, 1, n_kv, s.hd);
        const int64_t n_rows = attention_group_rows(n_rep) + 1, cap = base + n_rows + 32;
        std::vector<uint8_t> k(L.k_bytes(cap)), v(L.v_bytes(cap));
        std::vector<float> kr(size_t(L.kv_dim)), vr(size_t(L.kv_dim));
        for (int64_t t = 0; t < base + n_rows; t++) {
            for (auto& x : kr) x = draw();
            for (auto& x : vr) x = draw();
            kv_store(L, k.data(), v.data(), t, kr.data(), vr.data());
        }
        const int64_t Q = n_kv * n_rep * s.hd;
        std::vector<float> q(size_t(n_rows * Q)), out1(q.size()), out2(q.size()), out3(q.size());
        for (auto& x : q) x = draw();
        std::vector<float> sinks(size_t(n_kv * n_rep));
        for (auto& x : sinks) x = sink_kind == 2 ? 6.0f + draw() : draw();
        const float* sk = sink_kind == 0 ? nullptr : sinks.data();
        std::vector<int64_t> n_pos(static_cast<size_t>(n_rows), 0);
        for (int64_t i = 0; i < n_rows; i++) n_pos[size_t(i)] = base + 1 + i;
        std::vector<float> sc(size_t(attention_scratch_floats(n_rep, cap)));
        std::vector<float> scratch(size_t(attention_rows_scratch_floats(n_rep, n_rows, base + n_rows)));
        auto run_rows = [&](const std::vector<uint8_t>& kk, const std::vector<uint8_t>& vv, std::vector<float>& out) {
            for (int64_t g = 0; g < n_kv; g++)
                attention_row_group(L, kk.data(), vv.data(), q.data() + g * n_rep * s.hd, Q, g, n_rep, n_rows,
                                    n_pos.data(), 0.125f, out.data() + g * n_rep * s.hd, Q, scratch.data(), window,
                                    sk ? sk + g * n_rep : nullptr);
        };
        for (int64_t g = 0; g < n_kv; g++)
            for (int64_t i = 0; i < n_rows; i++)
                attention_group(L, k.data(), v.data(), q.data() + i * Q + g * n_rep * s.hd, g, n_rep, n_pos[size_t(i)],
                                0.125f, out1.data() + i * Q + g * n_rep * s.hd, sc.data(), window,
                                sk ? sk + g * n_rep : nullptr);
        run_rows(k, v, out2);
        // NaN before the earliest row's window (every row's window starts at or after it)
        const int64_t w_first = attention_window_start(n_pos[0], window);
        std::vector<uint8_t> kn = k, vn = v;
        poison(L, kn.data(), true, w_first);
        poison(L, vn.data(), false, w_first);
        run_rows(kn, vn, out3);
        checks++;
        bool same = std::memcmp(out1.data(), out2.data(), out1.size() * 4) == 0 &&
                    std::memcmp(out1.data(), out3.data(), out1.size() * 4) == 0;
        for (float x : out1) same = same && std::isfinite(x);
        if (!same) {
            bad++;
            printf("DIFF type %d hd %d window %lld sinks %d base %lld\n", s.type, s.hd, (long long)window, sink_kind,
                   (long long)base);
        }
        sum = fold_checksum(sum, out1.data(), out1.size());
    }
    printf("checksum %08x\n", sum);
    printf("%d of %d cases differ\n", bad, checks);
    return bad != 0;
}
