// cuda_selftest (cuda-backend.h): every CUDA kernel on small random inputs against a plain host
// computation, one verdict per kernel and case, so the first run on a GPU says which kernel is wrong
// when the end-to-end parity tests (tests/gpu/test_parity.py) fail.
//
// Not here: the engine (no model file is needed) or speed. Host references are double-precision
// loops over the same decoded values (cuda_dq::dq on the host, the CPU's exact decoder: see
// tests/gpu/dequant_check.cu). Limits are relative to the largest |reference| of each check.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "cuda-backend.h"
#include "cuda-dequant.cuh"
#include "cuda-kernels.cuh"
#include "quants.h"

namespace strata {
namespace {

// A device buffer freed on scope exit; up() / down() copy host vectors.
struct dev_buf {
    void* p = nullptr;
    explicit dev_buf(size_t n_bytes) { cuda_check(cudaMalloc(&p, std::max<size_t>(n_bytes, 16)), "selftest cudaMalloc"); }
    ~dev_buf() { cudaFree(p); }
    dev_buf(const dev_buf&) = delete;
    dev_buf& operator=(const dev_buf&) = delete;
    template <typename T> T* as() const { return static_cast<T*>(p); }
};

template <typename T>
void up(const dev_buf& d, const std::vector<T>& h) {
    cuda_check(cudaMemcpy(d.p, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice), "selftest upload");
}

template <typename T>
std::vector<T> down(const dev_buf& d, size_t n) {
    std::vector<T> h(n);
    cuda_check(cudaDeviceSynchronize(), "selftest kernels");
    cuda_check(cudaMemcpy(h.data(), d.p, sizeof(T) * n, cudaMemcpyDeviceToHost), "selftest download");
    return h;
}

// The decode kernel's scratch for every check (room for 4096 rows x 8192 columns), zeroed once.
const cuda_decode_scratch& decode_scratch() {
    static dev_buf partials(sizeof(float) * size_t(cuda_decode_partial_floats(8192, 4096)));
    static dev_buf counters(sizeof(unsigned) * size_t(cuda_decode_counters(4096)));
    static const cuda_decode_scratch s = [] {
        cuda_check(cudaMemset(counters.p, 0, sizeof(unsigned) * size_t(cuda_decode_counters(4096))), "selftest memset");
        cuda_decode_scratch d;
        d.partials = partials.as<float>();
        d.counters = counters.as<unsigned>();
        d.partial_floats = cuda_decode_partial_floats(8192, 4096);
        d.n_counters = cuda_decode_counters(4096);
        return d;
    }();
    return s;
}

std::mt19937 rng(20261129);
float uniform(float lo, float hi) { return lo + (hi - lo) * float(rng() % 1000000) / 1e6f; }

float host_dq(int32_t type, const uint8_t* row, int64_t k) {
    switch (type) {
        case TYPE_F32: return cuda_dq::dq<TYPE_F32>(row, k);
        case TYPE_F16: return cuda_dq::dq<TYPE_F16>(row, k);
        case TYPE_BF16: return cuda_dq::dq<TYPE_BF16>(row, k);
        case TYPE_Q4_0: return cuda_dq::dq<TYPE_Q4_0>(row, k);
        case TYPE_Q4_1: return cuda_dq::dq<TYPE_Q4_1>(row, k);
        case TYPE_Q5_0: return cuda_dq::dq<TYPE_Q5_0>(row, k);
        case TYPE_Q5_1: return cuda_dq::dq<TYPE_Q5_1>(row, k);
        case TYPE_Q8_0: return cuda_dq::dq<TYPE_Q8_0>(row, k);
        case TYPE_Q4_K: return cuda_dq::dq<TYPE_Q4_K>(row, k);
        case TYPE_Q5_K: return cuda_dq::dq<TYPE_Q5_K>(row, k);
        default: return cuda_dq::dq<TYPE_Q6_K>(row, k);
    }
}

void put_half(uint8_t* p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
}

// n_rows rows of random blocks of `type`, every fp16 scale (and every float element) finite and small.
std::vector<uint8_t> random_weights(int32_t type, int64_t n_rows, int64_t n_cols) {
    const size_t rb = type_row_bytes(type, n_cols), bb = type_block_bytes(type);
    std::vector<uint8_t> w(rb * size_t(n_rows));
    for (auto& b : w) b = uint8_t(rng());
    const size_t n_el = size_t(n_rows * n_cols);
    if (type == TYPE_F32) {
        for (size_t i = 0; i < n_el; i++) {
            const float v = uniform(-1, 1);
            std::memcpy(w.data() + 4 * i, &v, 4);
        }
    } else if (type == TYPE_F16) {
        for (size_t i = 0; i < n_el; i++) put_half(w.data() + 2 * i, uniform(-1, 1));
    } else if (type == TYPE_BF16) {
        for (size_t i = 0; i < n_el; i++) {
            const float v = uniform(-1, 1);
            uint32_t u;
            std::memcpy(&u, &v, 4);
            const uint16_t h = uint16_t(u >> 16);
            std::memcpy(w.data() + 2 * i, &h, 2);
        }
    } else {
        std::vector<size_t> halves = {0};
        if (type == TYPE_Q4_1 || type == TYPE_Q5_1 || type == TYPE_Q4_K || type == TYPE_Q5_K) halves = {0, 2};
        if (type == TYPE_Q6_K) halves = {208};
        for (size_t b = 0; b < w.size() / bb; b++) {
            for (size_t off : halves) put_half(w.data() + b * bb + off, uniform(-0.05f, 0.05f));
        }
    }
    return w;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
    double scale = 1e-30, err = 0.0;
    for (size_t i = 0; i < want.size(); i++) {
        scale = std::max(scale, std::fabs(want[i]));
        const double e = std::fabs(double(got[i]) - want[i]);
        err = std::isfinite(e) ? std::max(err, e) : INFINITY;
    }
    return err / scale;
}

// ---------------------------------------------------------------- cases

// Products of every type, the decode kernel (1 and 16 tokens) and the prefill kernel (20 tokens), and
// the bitwise rule between them; 40 weight rows (not a multiple of 16: a partial tile), 6 chunks of
// columns (the decode kernel's partials added across blocks; the last chunk short where the type
// allows: 1312 = 5 x 256 + 32).
void check_matmul(int32_t type, std::vector<cuda_selftest_result>& out) {
    const bool super_blocks = type == TYPE_Q4_K || type == TYPE_Q5_K || type == TYPE_Q6_K;
    const int64_t n_out = 40, n_cols = super_blocks ? 1536 : 1312, n_tok = 20;
    const size_t rb = type_row_bytes(type, n_cols);
    const std::vector<uint8_t> w = random_weights(type, n_out, n_cols);
    std::vector<float> x(static_cast<size_t>(n_tok * n_cols));
    for (auto& v : x) v = uniform(-2, 2);
    std::vector<double> want(static_cast<size_t>(n_tok * n_out));
    for (int64_t t = 0; t < n_tok; t++) {
        for (int64_t r = 0; r < n_out; r++) {
            double s = 0.0;
            for (int64_t k = 0; k < n_cols; k++) {
                s += double(host_dq(type, w.data() + size_t(r) * rb, k)) * double(x[size_t(t * n_cols + k)]);
            }
            want[size_t(t * n_out + r)] = s;
        }
    }
    dev_buf dw(w.size()), dx(sizeof(float) * x.size()), dy(sizeof(float) * want.size()), dy1(sizeof(float) * n_out);
    dev_buf dy16(sizeof(float) * size_t(16 * n_out));
    up(dw, w);
    up(dx, x);
    cuda_matmul(type, dw.as<uint8_t>(), rb, n_out, n_cols, dx.as<float>(), n_tok, dy.as<float>(), decode_scratch(), nullptr);
    cuda_matmul(type, dw.as<uint8_t>(), rb, n_out, n_cols, dx.as<float>(), 1, dy1.as<float>(), decode_scratch(), nullptr);
    cuda_matmul(type, dw.as<uint8_t>(), rb, n_out, n_cols, dx.as<float>(), 16, dy16.as<float>(), decode_scratch(), nullptr);
    // grouped as Q, K, V are: all 40 rows, then rows 8..31 of the same weights, in one decode launch
    dev_buf dga(sizeof(float) * size_t(n_out)), dgb(sizeof(float) * 24);
    const cuda_product group[2] = {{dw.as<uint8_t>(), n_out, dga.as<float>()},
                                   {dw.as<uint8_t>() + 8 * rb, 24, dgb.as<float>()}};
    cuda_matmul_many(type, rb, n_cols, dx.as<float>(), 1, group, 2, decode_scratch(), nullptr);
    const std::vector<float> ga = down<float>(dga, size_t(n_out)), gb = down<float>(dgb, 24);
    // 5 tokens (neither 1 nor 16) through three products of 8 rows each (partial tiles in a group):
    // rows 0-7, 16-23 and 32-39
    dev_buf d5(sizeof(float) * size_t(3 * 5 * 8));
    const cuda_product group8[3] = {{dw.as<uint8_t>(), 8, d5.as<float>()},
                                    {dw.as<uint8_t>() + 16 * rb, 8, d5.as<float>() + 5 * 8},
                                    {dw.as<uint8_t>() + 32 * rb, 8, d5.as<float>() + 2 * 5 * 8}};
    cuda_matmul_many(type, rb, n_cols, dx.as<float>(), 5, group8, 3, decode_scratch(), nullptr);
    const std::vector<float> g5 = down<float>(d5, size_t(3 * 5 * 8));
    const std::vector<float> y = down<float>(dy, want.size()), y1 = down<float>(dy1, size_t(n_out));
    const std::vector<float> y16 = down<float>(dy16, size_t(16 * n_out));
    const double limit = type == TYPE_BF16 ? 2e-2 : 5e-3;   // activations rounded to bf16 / f16
    const std::string name = std::string("matmul ") + type_name(type);
    out.push_back({name + " (20 tokens) vs host", rel_err(y, want), limit, rel_err(y, want) <= limit});
    const bool same = std::memcmp(y.data(), y1.data(), sizeof(float) * size_t(n_out)) == 0 &&
                      std::memcmp(y.data(), y16.data(), sizeof(float) * size_t(16 * n_out)) == 0 &&
                      std::memcmp(y.data(), ga.data(), sizeof(float) * size_t(n_out)) == 0 &&
                      std::memcmp(y.data() + 8, gb.data(), sizeof(float) * 24) == 0;
    bool same5 = true;   // product p, token t, row r of g5 is y's token t, row 16 p + r
    for (int p = 0; p < 3; p++) {
        for (int t = 0; t < 5; t++) {
            same5 = same5 && std::memcmp(y.data() + t * n_out + 16 * p, g5.data() + (p * 5 + t) * 8, sizeof(float) * 8) == 0;
        }
    }
    out.push_back({name + " decode (1, 5, 16 tokens, grouped) == prefill (bits)", same && same5 ? 0.0 : 1.0, 0.0,
                   same && same5});

    // the embedding lookup reads the same rows: exact
    std::vector<cuda_dev_row> rows(3);
    const int32_t tokens[3] = {0, 39, 17};
    for (int i = 0; i < 3; i++) rows[size_t(i)] = {nullptr, 0, 0, tokens[i], 0};
    dev_buf drows(sizeof(cuda_dev_row) * rows.size()), demb(sizeof(float) * size_t(3 * n_cols));
    up(drows, rows);
    cuda_embed(type, dw.as<uint8_t>(), rb, drows.as<cuda_dev_row>(), 3, n_cols, demb.as<float>(), nullptr);
    const std::vector<float> e = down<float>(demb, size_t(3 * n_cols));
    std::vector<double> e_want(e.size());
    for (int i = 0; i < 3; i++) {
        for (int64_t k = 0; k < n_cols; k++) {
            e_want[size_t(i * n_cols + k)] = host_dq(type, w.data() + size_t(tokens[i]) * rb, k);
        }
    }
    out.push_back({std::string("embed ") + type_name(type), rel_err(e, e_want), 1e-6, rel_err(e, e_want) <= 1e-6});
}

// The prefill kernel's tiles (cuda-matmul.cu): n_tok tokens x n_out weight rows, neither a multiple of any
// tile side, by 1312 columns (a short last chunk; 1536 for the K-quants), against the host; then the decode
// path (16 tokens, cuda_matmul) on the x rows of tokens [t0, t0 + 16) for each t0 of `firsts` must give
// the prefill's bits for those tokens. 200 rows use the narrow products' 32-token tiles, 1100 rows the
// 64-token tiles. wide_cols (0: the above): more than 8 chunks, so the decode kernel adds its partials
// in several batches of loads; a 1-token decode of each first token is compared too.
void check_prefill_tiles(int32_t type, int64_t n_out, int64_t n_tok, const std::vector<int64_t>& firsts,
                         std::vector<cuda_selftest_result>& out, int64_t wide_cols = 0) {
    const bool super_blocks = type == TYPE_Q4_K || type == TYPE_Q5_K || type == TYPE_Q6_K;
    const int64_t n_cols = wide_cols ? wide_cols : (super_blocks ? 1536 : 1312);
    const size_t rb = type_row_bytes(type, n_cols);
    const std::vector<uint8_t> w = random_weights(type, n_out, n_cols);
    std::vector<float> x(static_cast<size_t>(n_tok * n_cols));
    for (auto& v : x) v = uniform(-2, 2);
    std::vector<double> wd(static_cast<size_t>(n_out * n_cols));   // decoded once: the host loop is a plain product
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t k = 0; k < n_cols; k++) wd[size_t(r * n_cols + k)] = host_dq(type, w.data() + size_t(r) * rb, k);
    }
    std::vector<double> want(static_cast<size_t>(n_tok * n_out));
    for (int64_t t = 0; t < n_tok; t++) {
        for (int64_t r = 0; r < n_out; r++) {
            double s = 0.0;
            for (int64_t k = 0; k < n_cols; k++) s += wd[size_t(r * n_cols + k)] * double(x[size_t(t * n_cols + k)]);
            want[size_t(t * n_out + r)] = s;
        }
    }
    dev_buf dw(w.size()), dx(sizeof(float) * x.size()), dy(sizeof(float) * want.size());
    dev_buf dy16(sizeof(float) * size_t(16 * n_out));
    up(dw, w);
    up(dx, x);
    cuda_matmul(type, dw.as<uint8_t>(), rb, n_out, n_cols, dx.as<float>(), n_tok, dy.as<float>(), decode_scratch(), nullptr);
    const std::vector<float> y = down<float>(dy, want.size());
    const double limit = type == TYPE_BF16 ? 2e-2 : 5e-3;   // activations rounded to bf16 / f16
    const std::string name = std::string("prefill ") + type_name(type) + " (" + std::to_string(n_tok) + " tokens x " +
                             std::to_string(n_out) + " rows" +
                             (wide_cols ? " x " + std::to_string(n_cols) + " columns" : std::string()) + ")";
    out.push_back({name + " vs host", rel_err(y, want), limit, rel_err(y, want) <= limit});
    bool same = true;
    for (int64_t t0 : firsts) {
        cuda_matmul(type, dw.as<uint8_t>(), rb, n_out, n_cols, dx.as<float>() + t0 * n_cols, 16, dy16.as<float>(),
                    decode_scratch(), nullptr);
        const std::vector<float> y16 = down<float>(dy16, size_t(16 * n_out));
        same = same && std::memcmp(y16.data(), y.data() + t0 * n_out, sizeof(float) * size_t(16 * n_out)) == 0;
        if (wide_cols) {
            cuda_matmul(type, dw.as<uint8_t>(), rb, n_out, n_cols, dx.as<float>() + t0 * n_cols, 1, dy16.as<float>(),
                        decode_scratch(), nullptr);
            const std::vector<float> y1 = down<float>(dy16, size_t(n_out));
            same = same && std::memcmp(y1.data(), y.data() + t0 * n_out, sizeof(float) * size_t(n_out)) == 0;
        }
    }
    out.push_back({name + ": decode of 16 of its tokens == prefill (bits)", same ? 0.0 : 1.0, 0.0, same});
}

void check_norm_and_swiglu(std::vector<cuda_selftest_result>& out) {
    const int64_t n_rows = 3, n = 576;
    std::vector<float> x(static_cast<size_t>(n_rows * n)), add(x.size()), w(static_cast<size_t>(n)), gate(x.size()), upv(x.size());
    for (auto* v : {&x, &add, &gate, &upv}) for (auto& e : *v) e = uniform(-3, 3);
    for (auto& e : w) e = uniform(0.5f, 1.5f);
    const std::vector<int32_t> idx = {2, 0};
    dev_buf dx(4 * x.size()), dadd(4 * x.size()), dw(4 * w.size()), dy(4 * x.size()), didx(4 * idx.size());
    dev_buf dg(4 * x.size()), du(4 * x.size());
    up(dx, x); up(dadd, add); up(dw, w); up(didx, idx); up(dg, gate); up(du, upv);
    // (1) x += add, y = norm(x) * w for every row; (2) y = norm(x)[idx] * w
    cuda_rms_norm(dx.as<float>(), dadd.as<float>(), nullptr, dw.as<float>(), dy.as<float>(), n_rows, n, 1e-5f, nullptr);
    const std::vector<float> y = down<float>(dy, x.size()), x_after = down<float>(dx, x.size());
    std::vector<double> want(x.size()), x_want(x.size());
    for (int64_t r = 0; r < n_rows; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const double v = double(x[size_t(r * n + i)]) + double(add[size_t(r * n + i)]);
            x_want[size_t(r * n + i)] = v;
            ss += v * v;
        }
        const double scale = 1.0 / std::sqrt(ss / double(n) + 1e-5);
        for (int64_t i = 0; i < n; i++) want[size_t(r * n + i)] = x_want[size_t(r * n + i)] * scale * w[size_t(i)];
    }
    out.push_back({"rms_norm + residual add", rel_err(y, want), 1e-5, rel_err(y, want) <= 1e-5});
    out.push_back({"residual add written back", rel_err(x_after, x_want), 1e-6, rel_err(x_after, x_want) <= 1e-6});
    cuda_rms_norm(dx.as<float>(), nullptr, didx.as<int32_t>(), dw.as<float>(), dy.as<float>(), 2, n, 1e-5f, nullptr);
    const std::vector<float> yg = down<float>(dy, size_t(2 * n));
    std::vector<double> g_want(static_cast<size_t>(2 * n));
    for (int j = 0; j < 2; j++) {
        for (int64_t i = 0; i < n; i++) g_want[size_t(j * n + i)] = want[size_t(idx[size_t(j)] * n + i)];
    }
    out.push_back({"rms_norm of gathered rows", rel_err(yg, g_want), 1e-5, rel_err(yg, g_want) <= 1e-5});
    cuda_swiglu(dg.as<float>(), du.as<float>(), n_rows, n, nullptr);
    const std::vector<float> s = down<float>(dg, x.size());
    std::vector<double> s_want(x.size());
    for (size_t i = 0; i < x.size(); i++) s_want[i] = double(gate[i]) / (1.0 + std::exp(-double(gate[i]))) * upv[i];
    out.push_back({"swiglu", rel_err(s, s_want), 1e-5, rel_err(s, s_want) <= 1e-5});
}

// Q/K/V post-processing (RoPE both styles, KV store) and attention over 200 positions of one context
// (two 128-position tiles), every row of the batch at its own position; f32 and f16 KV.
void check_attention(int32_t kv_type, bool neox, std::vector<cuda_selftest_result>& out) {
    cuda_shape s{};
    s.n_head = 4; s.n_head_kv = 2; s.head_dim = 64; s.n_rot = 64; s.n_embd = 256; s.n_ff = 0;
    s.rope_neox = neox ? 1 : 0;
    s.kv_type = kv_type;
    s.kv_row_bytes = size_t(s.n_head_kv * s.head_dim) * (kv_type == TYPE_F32 ? 4 : 2);
    s.rms_eps = 1e-5f;
    const int64_t n = 200, cap = 256, HD = s.head_dim, Qd = s.n_head * HD, KVd = s.n_head_kv * HD, half = HD / 2;
    std::vector<float> q(static_cast<size_t>(n * Qd)), k(static_cast<size_t>(n * KVd)), v(static_cast<size_t>(n * KVd)), cs(static_cast<size_t>(n * s.n_rot));
    for (auto* a : {&q, &k, &v}) for (auto& e : *a) e = uniform(-1, 1);
    for (int64_t r = 0; r < n; r++) {
        for (int64_t i = 0; i < half; i++) {
            const double theta = double(r) * std::pow(10000.0, -2.0 * double(i) / double(s.n_rot));
            cs[size_t(r * s.n_rot + 2 * i)] = float(std::cos(theta));
            cs[size_t(r * s.n_rot + 2 * i + 1)] = float(std::sin(theta));
        }
    }
    dev_buf dq_(4 * q.size()), dk(4 * k.size()), dv(4 * v.size()), dcs(4 * cs.size()), dout(4 * q.size());
    dev_buf dkv(size_t(2) * size_t(cap) * s.kv_row_bytes);   // one layer: K then V
    cuda_check(cudaMemset(dkv.p, 0, size_t(2) * size_t(cap) * s.kv_row_bytes), "selftest memset");
    up(dq_, q); up(dk, k); up(dv, v); up(dcs, cs);
    std::vector<cuda_dev_row> rows(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; r++) rows[size_t(r)] = {dkv.as<uint8_t>(), cap, r, 0, 0};
    dev_buf drows(sizeof(cuda_dev_row) * rows.size());
    up(drows, rows);
    cuda_qkv_post(dq_.as<float>(), dk.as<float>(), dv.as<float>(), nullptr, nullptr, nullptr, nullptr, nullptr,
                  dcs.as<float>(), drows.as<cuda_dev_row>(), n, 0, s, nullptr);
    dev_buf dscratch(sizeof(float) * size_t(cuda_attention_scratch_floats(n, s.n_head, s.n_head_kv, s.head_dim)));
    cuda_attention(dq_.as<float>(), dout.as<float>(), drows.as<cuda_dev_row>(), n, 0, s, dscratch.as<float>(), nullptr);
    const std::vector<float> got = down<float>(dout, q.size());

    // host: RoPE (forward.cpp rope_head), K/V rounded as the cache stores them, softmax attention
    auto rope = [&](float* x, int64_t r) {
        for (int64_t i = 0; i < half; i++) {
            const float c = cs[size_t(r * s.n_rot + 2 * i)], sn = cs[size_t(r * s.n_rot + 2 * i + 1)];
            const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            const float x0 = x[i0], x1 = x[i1];
            x[i0] = x0 * c - x1 * sn;
            x[i1] = x0 * sn + x1 * c;
        }
    };
    auto stored = [&](float f) { return kv_type == TYPE_F32 ? f : fp16_to_fp32(fp32_to_fp16(f)); };
    for (int64_t r = 0; r < n; r++) {
        for (int64_t h = 0; h < s.n_head; h++) rope(&q[size_t(r * Qd + h * HD)], r);
        for (int64_t h = 0; h < s.n_head_kv; h++) rope(&k[size_t(r * KVd + h * HD)], r);
    }
    for (auto& e : k) e = stored(e);
    for (auto& e : v) e = stored(e);
    std::vector<double> want(q.size());
    std::vector<double> sc(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; r++) {
        for (int64_t h = 0; h < s.n_head; h++) {
            const int64_t g = h / (s.n_head / s.n_head_kv);
            double mx = -INFINITY;
            for (int64_t t = 0; t <= r; t++) {
                double d = 0.0;
                for (int64_t i = 0; i < HD; i++) d += double(q[size_t(r * Qd + h * HD + i)]) * k[size_t(t * KVd + g * HD + i)];
                sc[size_t(t)] = d / std::sqrt(double(HD));
                mx = std::max(mx, sc[size_t(t)]);
            }
            double sum = 0.0;
            for (int64_t t = 0; t <= r; t++) sum += (sc[size_t(t)] = std::exp(sc[size_t(t)] - mx));
            for (int64_t i = 0; i < HD; i++) {
                double o = 0.0;
                for (int64_t t = 0; t <= r; t++) o += sc[size_t(t)] * v[size_t(t * KVd + g * HD + i)];
                want[size_t(r * Qd + h * HD + i)] = o / sum;
            }
        }
    }
    const double limit = kv_type == TYPE_F32 ? 1e-4 : 2e-3;
    const std::string name = std::string("qkv_post + attention, KV ") + (kv_type == TYPE_F32 ? "f32" : "f16") +
                             (neox ? ", RoPE NEOX" : ", RoPE NORM") + ", 200 positions";
    out.push_back({name, rel_err(got, want), limit, rel_err(got, want) <= limit});
}

const char* kv_name(int32_t kv_type) { return kv_type == TYPE_F32 ? "f32" : kv_type == TYPE_F16 ? "f16" : "q8_0"; }

// Attention alone over a batch of rows of three contexts of different lengths (1 to 3000 positions:
// one part up to all of them, part and tile ends inside and on the row's end), KV written straight into
// layer 1 of each context's cache; 10 query heads over 2 KV heads (query groups of 4 and 1), head size
// 80 (96 for q8_0, whose blocks need 32 | head size): chunks of 64 with a short last one. Against the host
// loop over the decoded cache values; then every row launched alone must give the batch's bits.
void check_attention_batch(int32_t kv_type, std::vector<cuda_selftest_result>& out) {
    cuda_shape s{};
    s.n_head = 10; s.n_head_kv = 2; s.head_dim = kv_type == TYPE_Q8_0 ? 96 : 80; s.n_rot = 0; s.n_embd = 0; s.n_ff = 0;
    s.kv_type = kv_type;
    const int64_t HD = s.head_dim, Qd = s.n_head * HD, KVd = s.n_head_kv * HD, n_layer = 2, layer = 1;
    s.kv_row_bytes = size_t(type_row_bytes(kv_type, KVd));
    s.rms_eps = 1e-5f;
    const size_t rb = s.kv_row_bytes;
    const std::vector<int64_t> caps = {3008, 300, 70};
    std::vector<std::vector<uint8_t>> kv(caps.size());
    std::vector<std::unique_ptr<dev_buf>> dkv;
    for (size_t c = 0; c < caps.size(); c++) {
        std::vector<uint8_t>& h = kv[c];
        h.resize(size_t(2 * n_layer * caps[c]) * rb);
        const size_t n_rows_total = size_t(2 * n_layer * caps[c]);
        for (size_t t = 0; t < n_rows_total; t++) {
            uint8_t* row = h.data() + t * rb;
            if (kv_type == TYPE_F32) {
                for (int64_t e = 0; e < KVd; e++) {
                    const float v = uniform(-1, 1);
                    std::memcpy(row + 4 * e, &v, 4);
                }
            } else if (kv_type == TYPE_F16) {
                for (int64_t e = 0; e < KVd; e++) put_half(row + 2 * e, uniform(-1, 1));
            } else {
                for (int64_t b = 0; b < KVd / 32; b++) {
                    put_half(row + 34 * b, uniform(0.004f, 0.008f));
                    for (int j = 0; j < 32; j++) row[34 * b + 2 + j] = uint8_t(int8_t(int(rng() % 255) - 127));
                }
            }
        }
        dkv.push_back(std::make_unique<dev_buf>(h.size()));
        up(*dkv.back(), h);
    }
    struct case_row { int ctx; int64_t pos; };
    const std::vector<case_row> cases = {{0, 2999}, {1, 0}, {2, 63}, {1, 200}, {0, 64}, {2, 69}, {0, 1023}};
    const int64_t n = int64_t(cases.size());
    std::vector<cuda_dev_row> rows(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; r++) {
        const case_row& c = cases[size_t(r)];
        rows[size_t(r)] = {dkv[size_t(c.ctx)]->as<uint8_t>(), caps[size_t(c.ctx)], c.pos, 0, 0};
    }
    std::vector<float> q(static_cast<size_t>(n * Qd));
    for (auto& e : q) e = uniform(-3, 3);
    dev_buf dq_(4 * q.size()), dout(4 * q.size()), drows(sizeof(cuda_dev_row) * rows.size());
    dev_buf dscratch(sizeof(float) * size_t(cuda_attention_scratch_floats(n, s.n_head, s.n_head_kv, HD)));
    up(dq_, q);
    up(drows, rows);
    cuda_attention(dq_.as<float>(), dout.as<float>(), drows.as<cuda_dev_row>(), n, layer, s, dscratch.as<float>(), nullptr);
    const std::vector<float> got = down<float>(dout, q.size());

    auto host_kv = [&](int ctx, int which, int64_t t, int64_t e) {
        const uint8_t* row = kv[size_t(ctx)].data() + (size_t(2 * layer + which) * size_t(caps[size_t(ctx)]) + size_t(t)) * rb;
        return double(host_dq(kv_type, row, e));
    };
    std::vector<double> want(q.size());
    for (int64_t r = 0; r < n; r++) {
        const case_row& c = cases[size_t(r)];
        const int64_t n_pos = c.pos + 1;
        std::vector<double> sc(static_cast<size_t>(n_pos));
        for (int64_t h = 0; h < s.n_head; h++) {
            const int64_t g = h / (s.n_head / s.n_head_kv);
            double mx = -INFINITY;
            for (int64_t t = 0; t < n_pos; t++) {
                double d = 0.0;
                for (int64_t i = 0; i < HD; i++) d += double(q[size_t(r * Qd + h * HD + i)]) * host_kv(c.ctx, 0, t, g * HD + i);
                sc[size_t(t)] = d / std::sqrt(double(HD));
                mx = std::max(mx, sc[size_t(t)]);
            }
            double sum = 0.0;
            for (int64_t t = 0; t < n_pos; t++) sum += (sc[size_t(t)] = std::exp(sc[size_t(t)] - mx));
            for (int64_t i = 0; i < HD; i++) {
                double o = 0.0;
                for (int64_t t = 0; t < n_pos; t++) o += sc[size_t(t)] * host_kv(c.ctx, 1, t, g * HD + i);
                want[size_t(r * Qd + h * HD + i)] = o / sum;
            }
        }
    }
    const double limit = kv_type == TYPE_F32 ? 1e-4 : 2e-3;
    const std::string name = std::string("attention, KV ") + kv_name(kv_type) + ", 7 rows of 3 contexts, 1 to 3000 positions";
    out.push_back({name + " vs host", rel_err(got, want), limit, rel_err(got, want) <= limit});

    // the bitwise rule: each row launched alone (its q and row-table entry at the start of the buffers)
    bool same = true;
    for (int64_t r = 0; r < n; r++) {
        dev_buf dq1(4 * size_t(Qd)), dout1(4 * size_t(Qd)), drow1(sizeof(cuda_dev_row));
        cuda_check(cudaMemcpy(dq1.p, q.data() + r * Qd, 4 * size_t(Qd), cudaMemcpyHostToDevice), "selftest upload");
        cuda_check(cudaMemcpy(drow1.p, &rows[size_t(r)], sizeof(cuda_dev_row), cudaMemcpyHostToDevice), "selftest upload");
        cuda_attention(dq1.as<float>(), dout1.as<float>(), drow1.as<cuda_dev_row>(), 1, layer, s, dscratch.as<float>(), nullptr);
        const std::vector<float> alone = down<float>(dout1, size_t(Qd));
        same = same && std::memcmp(alone.data(), got.data() + r * Qd, 4 * size_t(Qd)) == 0;
    }
    out.push_back({std::string("attention, KV ") + kv_name(kv_type) + ": each row alone == in the batch (bits)",
                   same ? 0.0 : 1.0, 0.0, same});
}

}  // namespace

std::vector<cuda_selftest_result> cuda_selftest(int device) {
    cuda_device_query(device);   // throws when there is no such device
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    std::vector<cuda_selftest_result> out;
    for (int32_t type : {TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q4_0, TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1, TYPE_Q8_0,
                         TYPE_Q4_K, TYPE_Q5_K, TYPE_Q6_K}) {
        check_matmul(type, out);
    }
    for (int32_t type : {TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_Q4_0, TYPE_Q4_1, TYPE_Q5_0, TYPE_Q5_1, TYPE_Q8_0,
                         TYPE_Q4_K, TYPE_Q5_K, TYPE_Q6_K}) {
        check_prefill_tiles(type, 200, 200, {0, 100}, out);   // 32-token tiles
        check_prefill_tiles(type, 1100, 50, {0, 34}, out);    // 64-token tiles
    }
    // 17 and 18 chunks (the decode kernel's partials summed in batches); row sizes 2 mod 4 (Q8_0 at 4384
    // columns, Q6_K at 4352: half-word staging) and 0 mod 4 (Q4_1, Q6_K at 4608: word staging)
    check_prefill_tiles(TYPE_Q8_0, 40, 20, {0, 4}, out, 4384);
    check_prefill_tiles(TYPE_Q4_1, 40, 20, {0, 4}, out, 4384);
    check_prefill_tiles(TYPE_Q4_K, 40, 20, {0, 4}, out, 4352);
    check_prefill_tiles(TYPE_Q6_K, 40, 20, {0, 4}, out, 4352);
    check_prefill_tiles(TYPE_Q6_K, 40, 20, {0, 4}, out, 4608);
    check_prefill_tiles(TYPE_F16, 40, 20, {0, 4}, out, 4384);
    check_norm_and_swiglu(out);
    check_attention(TYPE_F32, false, out);
    check_attention(TYPE_F16, false, out);
    check_attention(TYPE_F32, true, out);
    for (int32_t kv_type : {TYPE_F16, TYPE_F32, TYPE_Q8_0}) check_attention_batch(kv_type, out);
    return out;
}

}  // namespace strata
