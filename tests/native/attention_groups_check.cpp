// Check program for tests/native/test_attention_builds.py: attention_row_group (a group of rows of one
// context) against attention_group row by row, bitwise, on random f16 and q8_0 KV, for head sizes 32/64/128,
// 1-2 kv heads, 1/3/4 query heads per kv head and histories 0-300; prints "N of M cases differ".
// Built with each vec16 variant's flags (AVX-512, AVX2, scalar). Not the engine's fp16 conversions
// (own truncating ones below: both paths read the same stored K/V, which is all the check needs).
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "attention.h"
#include "harness_fp16.h"
#include "quants.h"
using namespace strata;
int main() {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 1.f);
    int bad = 0, checks = 0;
    for (int type : {1 /*f16*/, 8 /*q8_0*/})
    for (int hd : {32, 64, 128}) for (int n_kv : {1, 2}) for (int n_rep : {1, 3, 4}) for (int base : {0, 5, 37, 300}) {
        kv_layout L = kv_layout_make(type, 1, n_kv, hd);
        const int64_t n_rows = std::max<int64_t>(2, attention_group_rows(n_rep)) + (base % 3), cap = base + n_rows + 32;
        std::vector<uint8_t> k(L.k_bytes(cap)), v(L.v_bytes(cap));
        std::vector<float> kr(L.kv_dim), vr(L.kv_dim);
        for (int64_t t = 0; t < base + n_rows; t++) {
            for (auto& x : kr) x = nd(rng);
            for (auto& x : vr) x = nd(rng);
            kv_store(L, k.data(), v.data(), t, kr.data(), vr.data());
        }
        const int64_t Q = n_kv * n_rep * hd;
        std::vector<float> q(size_t(n_rows * Q)), out1(q.size()), out2(q.size());
        for (auto& x : q) x = nd(rng);
        std::vector<int64_t> n_pos(static_cast<size_t>(n_rows), 0);
        for (int64_t i = 0; i < n_rows; i++) n_pos[i] = base + 1 + i;
        std::vector<float> sc(size_t(attention_scratch_floats(n_rep, cap)));
        std::vector<float> scratch(size_t(attention_rows_scratch_floats(n_rep, n_rows, base + n_rows)));
        for (int64_t g = 0; g < n_kv; g++) {
            for (int64_t i = 0; i < n_rows; i++)
                attention_group(L, k.data(), v.data(), q.data() + i * Q + g * n_rep * hd, g, n_rep, n_pos[i], 0.125f,
                                out1.data() + i * Q + g * n_rep * hd, sc.data());
            attention_row_group(L, k.data(), v.data(), q.data() + g * n_rep * hd, Q, g, n_rep, n_rows, n_pos.data(), 0.125f,
                                out2.data() + g * n_rep * hd, Q, scratch.data());
        }
        checks++;
        if (std::memcmp(out1.data(), out2.data(), out1.size() * 4) != 0) { bad++; printf("DIFF type %d hd %d kv %d rep %d base %d\n", type, hd, n_kv, n_rep, base); }
    }
    printf("%d of %d cases differ\n", bad, checks);
    return bad != 0;
}
