// Check program for tests/native/test_attention_q8_builds.py: the q8_0 KV path (tiled K, row V) against a
// plain scalar rendering of its arithmetic, bitwise: kv_store of random K/V, kv_get_rows gives
// llama.cpp's q8_0 rows (checked against this file's own quantizer), kv_set_rows into a fresh buffer
// gives the same tiles back, attention_group equals the reference below and the attention in parts
// (attention_scores_part / _softmax_part / _values_part) equals attention_group, for head sizes 32/64/128/96,
// 1-2 kv heads, 1-8 query heads per kv head, histories 1-300 (64 and 65: AVX2's values span), and K
// rows of any bytes (quants -128 and 127 against queries at full scale: the widest exact dots). Prints
// "N of M cases differ" and a checksum of every output (the same on every build: the test compares
// them). Uses the engine's own fp16 conversions' stand-ins below (both paths read the same stored bytes).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "attention.h"
#include "harness_fp16.h"
#include "quants.h"
#include "vec16.h"
using namespace strata;

namespace {
constexpr int QK = 32;

void ref_quantize(const float* x, uint8_t* blk) {   // llama.cpp's quantize_row_q8_0 (fp16 d)
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = std::fmax(amax, std::fabs(x[j]));
    uint16_t dh = fp32_to_fp16(amax / 127.0f);
    float d = fp16_to_fp32(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
    std::memcpy(blk, &dh, 2);
    for (int j = 0; j < QK; j++) {
        float v = std::nearbyint(x[j] * id);
        blk[2 + j] = uint8_t(int8_t(std::fmax(-127.0f, std::fmin(127.0f, v))));
    }
}

float half_at(const uint8_t* p) { uint16_t h; std::memcpy(&h, p, 2); return fp16_to_fp32(h); }

// attention of one query head over rows (n_pos, row_bytes), kv head g: the documented arithmetic.
// Not vectorized: GCC 12 with -march=native (AVX-512 VNNI) turns the int8 x int8 dot below into wrong code.
__attribute__((optimize("no-tree-vectorize"))) void ref_attention(const std::vector<uint8_t>& krows, const std::vector<uint8_t>& vrows, size_t row_bytes,
                   int64_t g, int64_t hd, const float* q, int64_t n_pos, float scale, float* out) {
    const int64_t nb = hd / QK;
    std::vector<int8_t> qs(static_cast<size_t>(hd));
    std::vector<float> dq(static_cast<size_t>(nb));
    for (int64_t b = 0; b < nb; b++) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = std::fmax(amax, std::fabs(q[b * QK + j]));
        dq[b] = amax / 127.0f;
        const float id = dq[b] != 0.0f ? 1.0f / dq[b] : 0.0f;
        for (int j = 0; j < QK; j++) qs[b * QK + j] = int8_t(std::nearbyint(q[b * QK + j] * id));
    }
    const int64_t n_pad = (n_pos + 15) / 16 * 16;
    std::vector<float> p(static_cast<size_t>(n_pad), 0.0f);
    for (int64_t t = 0; t < n_pos; t++) {
        float s = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t* blk = krows.data() + size_t(t) * row_bytes + size_t(g * nb + b) * 34;
            int32_t dot = 0;
            for (int j = 0; j < QK; j++) dot += int32_t(int8_t(blk[2 + j])) * int32_t(qs[b * QK + j]);
            s = std::fma(float(dot), half_at(blk) * dq[b], s);
        }
        p[t] = s * scale;
    }
    float mx = p[0];
    for (int64_t t = 1; t < n_pos; t++) mx = std::fmax(mx, p[t]);
    float lanes[16] = {};
    for (int64_t t = 0; t < n_pad; t++) {
        float e = 0.0f;
        if (t < n_pos) {
            float f[16];
            v16_store(f, v16_exp(v16_set1(p[t] - mx)));   // lane-wise: any lane is the same
            e = f[0];
        }
        p[t] = e;
        lanes[t % 16] += e;
    }
    const float inv = 1.0f / v16_reduce_add(v16_load(lanes));
    for (int64_t d = 0; d < hd; d++) {
        const int64_t b = d / QK;
        float acc = 0.0f;
        for (int64_t t = 0; t < n_pos; t++) {
            const uint8_t* blk = vrows.data() + size_t(t) * row_bytes + size_t(g * nb + b) * 34;
            acc = std::fma(p[t] * half_at(blk), float(int8_t(blk[2 + d % QK])), acc);
        }
        out[d] = acc * inv;
    }
}
}  // namespace

int main() {
    std::mt19937 rng(3);   // not std::normal_distribution: its floats depend on fma contraction
    auto nd = [&rng]() { return float(int32_t(rng() % 4001) - 2000) / 1024.0f; };   // exact on every build
    int bad = 0, checks = 0;
    uint32_t sum = 2166136261u;
    // histories: 1, a tile, a tile and a part, AVX2's values span of 64 exactly and one past it, several spans;
    // query heads a kv head: 1-8 (AVX2's values in registers for up to 3 a pass: 4-8 take several passes)
    for (int hd : {32, 64, 96, 128}) for (int n_kv : {1, 2}) for (int n_rep : {1, 2, 3, 4, 5, 6, 7, 8})
    for (int n_pos : {1, 16, 37, 64, 65, 300}) {
        kv_layout L = kv_layout_make(8 /*q8_0*/, 1, n_kv, hd);
        const int64_t cap = n_pos + 20;
        std::vector<uint8_t> k(L.k_bytes(cap), 0xA5), v(L.v_bytes(cap), 0x5A), rows_k(L.row_bytes * size_t(n_pos));
        std::vector<uint8_t> rows_v(rows_k.size()), want(L.row_bytes);
        std::vector<float> kr(size_t(L.kv_dim)), vr(kr.size());
        bool rows_ok = true;
        for (int64_t t = 0; t < n_pos; t++) {
            for (auto& x : kr) x = nd() * (t % 7 == 3 ? 0.0f : 1.0f + float(t % 5));   // all-zero blocks too
            for (auto& x : vr) x = nd();
            kv_store(L, k.data(), v.data(), t, kr.data(), vr.data());
            kv_get_rows(L, k.data(), true, t, t + 1, rows_k.data() + size_t(t) * L.row_bytes);
            for (int64_t b = 0; b < L.kv_dim / QK; b++) ref_quantize(kr.data() + b * QK, want.data() + b * 34);
            rows_ok &= std::memcmp(want.data(), rows_k.data() + size_t(t) * L.row_bytes, L.row_bytes) == 0;
        }
        kv_get_rows(L, v.data(), false, 0, n_pos, rows_v.data());
        std::vector<uint8_t> k2(k.size(), 0), again(rows_k.size());
        kv_set_rows(L, k2.data(), true, 0, n_pos, rows_k.data());
        kv_get_rows(L, k2.data(), true, 0, n_pos, again.data());
        rows_ok &= again == rows_k && std::memcmp(k.data(), k2.data(), kv_prefix_bytes(L, true, n_pos) -
                                                  (n_pos % 16 ? L.row_bytes * 16 : 0)) == 0;
        const int64_t Q = n_rep * hd;
        std::vector<float> q(static_cast<size_t>(Q)), out(q.size()), ref(q.size());
        std::vector<float> sc(size_t(attention_scratch_floats(n_rep, cap)));
        for (int64_t g = 0; g < n_kv; g++) {
            for (auto& x : q) x = nd() * 3.0f;
            if (g == 1) std::fill(q.begin(), q.begin() + QK, 0.0f);   // an all-zero query block
            attention_group(L, k.data(), v.data(), q.data(), g, n_rep, n_pos, 0.125f, out.data(), sc.data());
            for (int64_t h = 0; h < n_rep; h++)
                ref_attention(rows_k, rows_v, L.row_bytes, g, hd, q.data() + h * hd, n_pos, 0.125f, ref.data() + h * hd);
            // the same attention in parts (attention_split_ok): scores by ranges of 5 tiles, softmax, values by block
            const int64_t n_pad = (n_pos + 15) / 16 * 16;
            std::vector<float> part_sc(size_t(n_rep * n_pad)), part_out(q.size()), inv(static_cast<size_t>(n_rep));
            for (int64_t t0 = 0; t0 < n_pad / 16; t0 += 5)
                attention_scores_part(L, k.data(), q.data(), g, n_rep, t0, std::min(n_pad / 16, t0 + 5), n_pad, 0.125f,
                                      part_sc.data());
            for (int64_t h = 0; h < n_rep; h++) inv[h] = attention_softmax_part(part_sc.data() + h * n_pad, n_pos, n_pad);
            for (int64_t d0 = 0; d0 < hd; d0 += k_attention_split_dims)
                attention_values_part(L, v.data(), part_sc.data(), g, n_rep, n_pos, n_pad, inv.data(), d0, part_out.data());
            const bool parts_ok = attention_split_ok(L) && part_out == out;
            checks++;
            if (!rows_ok || !parts_ok || std::memcmp(out.data(), ref.data(), out.size() * 4) != 0) {
                bad++;
                printf("DIFF hd %d kv %d rep %d n_pos %d g %d rows %d parts %d (%g vs %g)\n", hd, n_kv, n_rep, n_pos,
                       int(g), int(rows_ok), int(parts_ok), out[0], ref[0]);
            }
            sum = fold_checksum(sum, out.data(), out.size());
        }
    }
    // K rows of any bytes (kv_set_rows: snapshots, cache files), not only kv_store's |k| <= 127: quants of
    // -128 and 127 at full query magnitude (the widest int32 dots: an int16 product pair must not saturate)
    for (int hd : {64, 128}) for (int n_rep : {3, 4}) {
        const int64_t n_pos = 37, cap = n_pos + 20;
        kv_layout L = kv_layout_make(8 /*q8_0*/, 1, 1, hd);
        std::vector<uint8_t> k(L.k_bytes(cap), 0), v(L.v_bytes(cap), 0), dummy(L.k_bytes(cap), 0);
        std::vector<uint8_t> rows_k(L.row_bytes * size_t(n_pos)), rows_v(rows_k.size());
        std::vector<float> kr(size_t(L.kv_dim), 0.0f), vr(kr.size());
        for (int64_t t = 0; t < n_pos; t++) {
            for (auto& x : vr) x = nd();
            kv_store(L, dummy.data(), v.data(), t, kr.data(), vr.data());
            uint8_t* row = rows_k.data() + size_t(t) * L.row_bytes;
            for (int64_t b = 0; b < L.kv_dim / QK; b++) {
                const uint16_t d = 0x2000;   // 2^-7
                std::memcpy(row + b * 34, &d, 2);
                for (int j = 0; j < QK; j++) {
                    const int m = int(t % 3);
                    row[b * 34 + 2 + j] = m == 0 ? 0x80 : m == 1 ? 0x7F : uint8_t(rng());
                }
            }
        }
        kv_set_rows(L, k.data(), true, 0, n_pos, rows_k.data());
        kv_get_rows(L, v.data(), false, 0, n_pos, rows_v.data());
        std::vector<float> q(size_t(n_rep * hd)), out(q.size()), ref(q.size());
        std::vector<float> sc(size_t(attention_scratch_floats(n_rep, cap)));
        for (int64_t h = 0; h < n_rep; h++)   // head 0: every quant 127; head 1: -127; the rest random
            for (int64_t d = 0; d < hd; d++) q[size_t(h * hd + d)] = h == 0 ? 0.5f : h == 1 ? -0.5f : nd() * 3.0f;
        attention_group(L, k.data(), v.data(), q.data(), 0, n_rep, n_pos, 0.125f, out.data(), sc.data());
        for (int64_t h = 0; h < n_rep; h++)
            ref_attention(rows_k, rows_v, L.row_bytes, 0, hd, q.data() + h * hd, n_pos, 0.125f, ref.data() + h * hd);
        checks++;
        if (std::memcmp(out.data(), ref.data(), out.size() * 4) != 0) {
            bad++;
            printf("DIFF extreme K bytes hd %d rep %d (%g vs %g)\n", hd, n_rep, out[0], ref[0]);
        }
        sum = fold_checksum(sum, out.data(), out.size());
    }
    printf("checksum %08x\n%d of %d cases differ\n", sum, bad, checks);
    return bad != 0;
}
