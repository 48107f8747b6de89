// Check program for tests/native/test_attention_q8_rows_edges.py: attention_row_group over q8_0 KV (the
// grouped q8_0 prompt kernels where the head size takes them, else the per-row fallback) against
// attention_group row by row, bitwise, at the shapes the other checks leave out: head sizes 32 / 64 /
// 96 / 128 / 256, 1 / 2 / 5 / 8 query heads per kv head, groups of 1 / 2 / 17 / 33 rows, histories
// ending before, on and after the K spans' and V spans' edges (16 KiB / 32 KiB of widened tiles / rows),
// windows and sinks, and extreme integers: K quants of -128 / 127 (raw bytes, -128 never comes from
// kv_store) against full-scale queries (|q| = 127 in every lane, the int32 dots' largest magnitudes).
// K and V buffers hold exactly the rows the calls read (k_bytes / v_bytes of the last position, no
// slack), so an AddressSanitizer build sees any read past the end. The cases run once, then each again
// in one of 3 threads, from the end down (each thread's thread_local scratch grown by other shapes
// first): the same floats. Prints "checksum XXXXXXXX" and "N of M cases differ".
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>
#include "attention.h"
#include "harness_fp16.h"
#include "quants.h"
using namespace strata;

struct edge_case { int hd, n_rep, n_rows, mode; int64_t base, window; bool sinks; };

static std::vector<edge_case> all_cases() {
    std::vector<edge_case> cs;
    for (int hd : {32, 64, 96, 128, 256})
    for (int n_rep : {1, 2, 5, 8})
    for (int n_rows : {1, 2, 17, 33})
    for (int64_t base : {0, 15, 64, 255, 1000})
    for (int mode : {0, 1, 2}) {   // draws, extremes of random signs, extremes of one sign (largest dots)
        if (n_rows == 33 && base == 1000) continue;   // the row-by-row side's cost (the scalar build's run)
        // windows and sinks on a share of the cases (test_attention_window_builds covers them more widely)
        const int64_t window = (base + n_rows) % 3 == 0 ? 37 : 0;
        cs.push_back({hd, n_rep, n_rows, mode, base, window, window != 0 && mode == 0});
    }
    return cs;
}

// One case's outputs of attention_row_group (out2) and attention_group row by row (out1).
static bool run_case(const edge_case& c, uint32_t* sum) {
    std::mt19937 rng(uint32_t(c.hd * 131 + c.n_rep * 17 + c.n_rows * 7 + c.base * 3 + c.mode));
    auto draw = [&] { return float(int(rng() % 2001u) - 1000) / 512.0f; };   // exact in fp16
    const int n_kv = 2;
    kv_layout L = kv_layout_make(8, 1, n_kv, c.hd);
    const int64_t n_last = c.base + c.n_rows;   // every call reads positions [0, n_last) only
    std::vector<uint8_t> k(L.k_bytes(n_last)), v(L.v_bytes(n_last));
    std::vector<float> kr(size_t(L.kv_dim)), vr(size_t(L.kv_dim));
    for (int64_t t = 0; t < n_last; t++) {
        for (auto& x : kr) x = c.mode == 0 ? draw() : 2.0f;
        for (auto& x : vr) x = draw();
        kv_store(L, k.data(), v.data(), t, kr.data(), vr.data());
    }
    if (c.mode != 0) {   // K quants set raw: -128 / 127 (random signs) or all -128
        std::vector<uint8_t> rows(size_t(n_last) * L.row_bytes);
        kv_get_rows(L, k.data(), true, 0, n_last, rows.data());
        for (int64_t t = 0; t < n_last; t++)
            for (size_t b = 0; b < L.row_bytes; b += 34)
                for (int j = 0; j < 32; j++)
                    rows[size_t(t) * L.row_bytes + b + 2 + j] = c.mode == 2 || (rng() & 1) ? 0x80 : 0x7f;
        kv_set_rows(L, k.data(), true, 0, n_last, rows.data());
    }
    const int64_t Q = n_kv * c.n_rep * c.hd;
    std::vector<float> q(size_t(c.n_rows * Q)), out1(q.size()), out2(q.size());
    for (auto& x : q) x = c.mode == 0 ? draw() : c.mode == 2 ? 1.0f : ((rng() & 1) ? 1.0f : -1.0f);
    std::vector<float> sinks(size_t(n_kv * c.n_rep));
    for (auto& x : sinks) x = draw();
    std::vector<int64_t> n_pos(size_t(c.n_rows));
    for (int64_t i = 0; i < c.n_rows; i++) n_pos[size_t(i)] = c.base + 1 + i;
    std::vector<float> sc(size_t(attention_scratch_floats(c.n_rep, n_last)));
    std::vector<float> scratch(size_t(attention_rows_scratch_floats(c.n_rep, c.n_rows, n_last)));
    const float scale = 1.0f / 64.0f;
    for (int64_t g = 0; g < n_kv; g++) {
        const float* sk = c.sinks ? sinks.data() + g * c.n_rep : nullptr;
        for (int64_t i = 0; i < c.n_rows; i++)
            attention_group(L, k.data(), v.data(), q.data() + i * Q + g * c.n_rep * c.hd, g, c.n_rep, n_pos[size_t(i)],
                            scale, out1.data() + i * Q + g * c.n_rep * c.hd, sc.data(), c.window, sk);
        attention_row_group(L, k.data(), v.data(), q.data() + g * c.n_rep * c.hd, Q, g, c.n_rep, c.n_rows,
                            n_pos.data(), scale, out2.data() + g * c.n_rep * c.hd, Q, scratch.data(), c.window, sk);
    }
    bool same = std::memcmp(out1.data(), out2.data(), out1.size() * 4) == 0;
    for (float x : out2) same = same && std::isfinite(x);
    *sum = fold_checksum(*sum, out2.data(), out2.size());
    return same;
}

// Cases `from`, `from + step`, ... (step < 0: from the end down): each case's checksum into sums[i]
static void run_some(const std::vector<edge_case>& cs, int64_t from, int64_t step, uint32_t* sums, int* bad,
                     bool print) {
    for (int64_t i = from; i >= 0 && i < int64_t(cs.size()); i += step) {
        const edge_case& c = cs[size_t(i)];
        sums[i] = 2166136261u;
        if (!run_case(c, &sums[i])) {
            (*bad)++;
            if (print)
                printf("DIFF hd %d rep %d rows %d base %lld mode %d window %lld sinks %d\n", c.hd, c.n_rep, c.n_rows,
                       (long long)c.base, c.mode, (long long)c.window, int(c.sinks));
        }
    }
}

int main() {
    const std::vector<edge_case> cs = all_cases();
    const int64_t n = int64_t(cs.size());
    int bad = 0;
    std::vector<uint32_t> sums(cs.size()), again(cs.size());
    run_some(cs, 0, 1, sums.data(), &bad, true);
    // every case again in one of 3 threads, from the end down (each thread's scratch grown by other shapes first)
    int tbad[3] = {0, 0, 0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 3; t++) ts.emplace_back([&, t] { run_some(cs, n - 1 - t, -3, again.data(), &tbad[t], false); });
    for (auto& t : ts) t.join();
    for (int64_t i = 0; i < n; i++)
        if (again[size_t(i)] != sums[size_t(i)]) {
            printf("THREADS: case %lld differs from its first run\n", (long long)i);
            bad++;
        }
    bad += tbad[0] + tbad[1] + tbad[2];
    uint32_t sum = 2166136261u;
    for (uint32_t s : sums) sum = (sum ^ s) * 16777619u;
    printf("checksum %08x\n", sum);
    printf("%d of %zu cases differ\n", bad, cs.size());
    return bad != 0;
}
