// One decode row's attention over one kv head (SmolLM2-135M's shape: 3 query heads, 64 dimensions, f16 KV)
// with the attention sources alone, one thread, CPU time: attention_group and its three parts (scores,
// softmax, values: attention_in_parts' kernels) with the KV in cache, and attention_group over 96 MiB of kv
// heads' buffers head after head (the KV streamed from memory, as a decode step reads it). Best of 7 passes.
// For comparing kernel variants side by side (build each tree's sources, run them alternated); the
// per-call Python figures with the engine's own builds are attention_stream.py's. Not a test.
//
//   g++ -O3 -march=native -fno-math-errno -std=c++17 -Iengine_native/src -Itests/native
//       benchmarks/attention_parts.cpp engine_native/src/{attention,attention-q8,attention-grouped,kv-layout}.cpp
//       -o /tmp/attention_parts && /tmp/attention_parts 300          (one command line)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "attention.h"
#include "harness_fp16.h"   // the fp16 conversions (quants.cpp's, not linked here)

using namespace strata;

static double cpu_now() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

int main(int argc, char** argv) {
    const int64_t n_pos = argc > 1 ? atoll(argv[1]) : 300;
    if (n_pos < 1) {
        fprintf(stderr, "positions must be at least 1, not %s\n", argv[1]);
        return 2;
    }
    const int64_t hd = 64, n_rep = 3, iters = std::max<int64_t>(10, 600000 / n_pos);
    const kv_layout L = kv_layout_make(1, 1, 1, hd);   // f16, one kv head a buffer (the engine's head-major layout)
    const size_t per = L.k_bytes(n_pos) + L.v_bytes(n_pos);
    const size_t n_heads = (size_t(96) << 20) / per + 1;
    std::vector<uint8_t> buf(per * n_heads);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    std::vector<float> kr(static_cast<size_t>(hd)), vr(static_cast<size_t>(hd));
    for (size_t g = 0; g < n_heads; g++) {
        uint8_t* k = buf.data() + per * g;
        for (int64_t t = 0; t < n_pos; t++) {
            for (float& x : kr) x = nd(rng);
            for (float& x : vr) x = nd(rng);
            kv_store(L, k, k + L.k_bytes(n_pos), t, kr.data(), vr.data());
        }
    }
    const uint8_t* k0 = buf.data();
    const uint8_t* v0 = k0 + L.k_bytes(n_pos);
    const int64_t n_pad = (n_pos + k_kv_tile - 1) / k_kv_tile * k_kv_tile, n_tiles = n_pad / k_kv_tile;
    std::vector<float> q(static_cast<size_t>(n_rep * hd)), out(q.size()), sc(size_t(attention_scratch_floats(n_rep, n_pos)));
    for (float& x : q) x = nd(rng) * 0.3f;
    float inv[n_rep];
    double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
    for (int pass = 0; pass < 7; pass++) {
        double t0 = cpu_now();
        for (int64_t i = 0; i < iters; i++) attention_group(L, k0, v0, q.data(), 0, n_rep, n_pos, 0.125f, out.data(), sc.data());
        double t1 = cpu_now();
        for (int64_t i = 0; i < iters; i++)
            attention_scores_part(L, k0, q.data(), 0, n_rep, 0, n_tiles, n_pad, 0.125f, sc.data());
        double t2 = cpu_now();
        const std::vector<float> scores = sc;
        for (int64_t i = 0; i < iters; i++) {   // each from the scores again (the softmax works in place)
            std::memcpy(sc.data(), scores.data(), size_t(n_rep * n_pad) * 4);
            for (int64_t h = 0; h < n_rep; h++) inv[h] = attention_softmax_part(sc.data() + h * n_pad, n_pos, n_pad);
        }
        double t3 = cpu_now();
        for (int64_t i = 0; i < iters; i++)
            for (int64_t d = 0; d < hd; d += k_attention_split_dims)
                attention_values_part(L, v0, sc.data(), 0, n_rep, n_pos, n_pad, inv, d, out.data());
        double t4 = cpu_now();
        for (size_t g = 0; g < n_heads; g++) {
            const uint8_t* k = buf.data() + per * g;
            attention_group(L, k, k + L.k_bytes(n_pos), q.data(), 0, n_rep, n_pos, 0.125f, out.data(), sc.data());
        }
        double t5 = cpu_now();
        const double t[5] = {(t1 - t0) / double(iters), (t2 - t1) / double(iters), (t3 - t2) / double(iters),
                             (t4 - t3) / double(iters), (t5 - t4) / double(n_heads)};
        for (int j = 0; j < 5; j++) best[j] = std::min(best[j], t[j] * 1e6);
    }
    const double mac = double(n_pos * hd * n_rep);
    printf("positions %lld, us a call (GMAC/s): cached attention_group %.2f (%.1f), scores %.2f (%.1f), softmax x %lld "
           "(+ copy) %.2f, values %.2f (%.1f); streamed attention_group %.2f (%.1f GB/s)\n",
           (long long)n_pos, best[0], 2 * mac / best[0] / 1e3, best[1], mac / best[1] / 1e3, (long long)n_rep, best[2],
           best[3], mac / best[3] / 1e3, best[4], double(per) / best[4] / 1e3);
    return 0;
}
