// cuda_backend (cuda-backend.h): VRAM for weights, KV and scratch; the layer loop of a forward pass
// on one stream, mirroring engine::forward (forward.cpp) stage by stage; KV copies to and from host
// memory in the CPU backend's layout.
//
// Not here: kernel arithmetic (cuda-kernels.cu, cuda-matmul.cu), context bookkeeping (engine.cpp).
// The RoPE cos/sin table is computed on the host with forward.cpp's exact formula (double precision,
// rounded to float) and uploaded with the rows, so positions rotate as on the CPU.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <unordered_map>

#include <cuda_runtime.h>

#include "cuda-backend.h"
#include "cuda-kernels.cuh"
#include "quants.h"

namespace strata {

namespace {

// Batches of at most this many rows (decode steps) replay a CUDA graph captured on first use, one per
// (rows, logit rows): the same kernels in one launch instead of ~13 per layer. STRATA_CUDA_GRAPHS=0 turns
// it off; a capture that fails turns it off for the engine's life (the direct launches run instead).
constexpr int64_t k_graph_max_rows = 16;

std::string mib(size_t n) { return std::to_string((n + (1u << 19)) >> 20) + " MiB"; }

struct dev_weight {
    int32_t type = 0;
    const uint8_t* data = nullptr;   // device (n_rows, row_bytes)
    size_t row_bytes = 0;
    int64_t n_rows = 0, n_cols = 0;
};

struct dev_layer {
    dev_weight wq, wk, wv, wo, w_gate, w_up, w_down;
    const float* attn_norm = nullptr;   // (n_embd,)
    const float* ffn_norm = nullptr;    // (n_embd,)
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr;   // qwen2 biases or null
    const float *q_norm = nullptr, *k_norm = nullptr;          // qwen3 (head_dim,) or null
};

}  // namespace

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();   // clear the sticky-free error so later calls start clean
        return 0;
    }
    return n;
}

cuda_device_info cuda_device_query(int device) {
    const int n = cuda_device_count();
    if (device < 0 || device >= n) {
        throw cuda_error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) +
                         " device(s) found)");
    }
    cudaDeviceProp prop{};
    cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    cuda_device_info d;
    d.index = device;
    d.name = prop.name;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.vram_total = prop.totalGlobalMem;
    int prev = 0;
    cuda_check(cudaGetDevice(&prev), "cudaGetDevice");
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    size_t free_b = 0, total_b = 0;
    cuda_check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    cuda_check(cudaSetDevice(prev), "cudaSetDevice");
    d.vram_free = free_b;
    d.vram_total = total_b;
    return d;
}

struct cuda_backend::impl {
    int device = 0;
    cudaStream_t stream = nullptr;
    model_hparams hp;
    std::vector<float> rope_freq_factors;   // (n_rot / 2,) or empty, host
    int32_t kv_type = 0;
    size_t kv_row_bytes = 0;
    int64_t max_rows = 0, max_logit_rows = 0;

    std::vector<void*> allocations;   // every cudaMalloc, freed in the destructor
    size_t weight_bytes = 0, kv_bytes = 0, scratch_bytes = 0;
    std::unordered_map<const uint8_t*, const uint8_t*> uploaded;   // host tensor -> device copy (tied embeddings)

    dev_weight token_embd, output;
    const float* output_norm = nullptr;
    std::vector<dev_layer> layers;
    std::vector<int64_t> capacities;   // per context
    std::vector<uint8_t*> kv;          // per context: (n_layer, 2, capacity, kv_row_bytes)

    // device scratch, sized for max_rows rows
    float* x = nullptr;        // (max_rows, n_embd) residual stream
    float* xn = nullptr;       // (max_rows, max(n_embd, q_dim)) normed input / attention output
    float* q = nullptr;        // (max_rows, q_dim)
    float* k = nullptr;        // (max_rows, kv_dim)
    float* v = nullptr;        // (max_rows, kv_dim)
    float* gate = nullptr;     // (max_rows, n_ff)
    float* up = nullptr;       // (max_rows, n_ff)
    float* out = nullptr;      // (max_rows, n_embd)
    float* logits = nullptr;   // (max_logit_rows, n_vocab)
    float* rope = nullptr;     // (max_rows, n_rot) cos, sin pairs
    float* att = nullptr;      // attention partial sums (cuda_attention_scratch_floats)
    cuda_decode_scratch dec;   // the decode products' partial sums and tile counters
    cuda_dev_row* rows_d = nullptr;   // (max_rows,)
    int32_t* idx_d = nullptr;         // (max_logit_rows,) rows whose logits are wanted
    // pinned host staging of the same shapes
    bool graphs_enabled = true;
    std::unordered_map<int64_t, cudaGraphExec_t> graphs;   // key: n_rows * (max_logit_rows + 1) + n_out
    cuda_dev_row* rows_h = nullptr;
    float* rope_h = nullptr;
    int32_t* idx_h = nullptr;
    float* logits_h = nullptr;

    ~impl() {
        // errors are ignored here: a destructor must not throw, and the context may already be broken
        cudaSetDevice(device);
        for (auto& g : graphs) cudaGraphExecDestroy(g.second);
        if (stream) cudaStreamDestroy(stream);
        for (void* p : allocations) cudaFree(p);
        for (void* p : {static_cast<void*>(rows_h), static_cast<void*>(rope_h), static_cast<void*>(idx_h),
                        static_cast<void*>(logits_h)}) {
            if (p) cudaFreeHost(p);
        }
        cudaGetLastError();
    }

    void* dalloc(size_t n_bytes, const std::string& what, size_t* counter) {
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, std::max<size_t>(n_bytes, 256));
        if (e != cudaSuccess) {
            cudaGetLastError();
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            throw cuda_error("out of GPU memory allocating " + what + " (" + mib(n_bytes) + "; " + mib(free_b) +
                             " free of " + mib(total_b) + ", this engine holds " +
                             mib(weight_bytes + kv_bytes + scratch_bytes) + "): " + cudaGetErrorString(e));
        }
        allocations.push_back(p);
        *counter += n_bytes;
        return p;
    }

    float* fscratch(int64_t n, const char* what) {
        return static_cast<float*>(dalloc(sizeof(float) * size_t(std::max<int64_t>(n, 1)), what, &scratch_bytes));
    }

    const float* upload_floats(const std::vector<float>& v, const std::string& what) {
        if (v.empty()) return nullptr;
        void* p = dalloc(sizeof(float) * v.size(), what, &weight_bytes);
        cuda_check(cudaMemcpy(p, v.data(), sizeof(float) * v.size(), cudaMemcpyHostToDevice), "upload norm/bias");
        return static_cast<const float*>(p);
    }

    dev_weight upload(const weight& w, const std::string& what) {
        // MXFP4 (gpt-oss experts), Q2_K, Q3_K, IQ4_NL and IQ4_XS: CPU kernels only
        if (!type_supported(w.type) || w.type == TYPE_MXFP4 || w.type == TYPE_Q2_K || w.type == TYPE_Q3_K ||
            w.type == TYPE_IQ4_NL || w.type == TYPE_IQ4_XS) {
            const char* name = type_name(w.type);
            throw cuda_error(what + ": weight type " + (name ? std::string(name) : std::to_string(w.type)) + " has no CUDA kernel");
        }
        dev_weight d;
        d.type = w.type;
        d.row_bytes = w.row_bytes;
        d.n_rows = w.n_rows;
        d.n_cols = w.n_cols;
        auto it = uploaded.find(w.data);
        if (it != uploaded.end()) {
            d.data = it->second;
            return d;
        }
        const size_t n_bytes = size_t(w.n_rows) * w.row_bytes;
        void* p = dalloc(n_bytes, what, &weight_bytes);
        cuda_check(cudaMemcpy(p, w.data, n_bytes, cudaMemcpyHostToDevice), "upload weight");
        d.data = static_cast<const uint8_t*>(p);
        uploaded[w.data] = d.data;
        return d;
    }

    size_t kv_offset(int ctx, int64_t layer, int which, int64_t t) const {   // which: 0 = K, 1 = V
        return (size_t(2 * layer + which) * size_t(capacities[size_t(ctx)]) + size_t(t)) * kv_row_bytes;
    }

    void check_ctx(int ctx, const char* what) const {
        if (ctx < 0 || ctx >= int(kv.size())) {
            throw cuda_error(std::string(what) + ": context id " + std::to_string(ctx) + " out of range [0, " +
                             std::to_string(kv.size()) + ")");
        }
    }

    void mm(const dev_weight& w, const float* xin, int64_t n, float* y) {
        cuda_matmul(w.type, w.data, w.row_bytes, w.n_rows, w.n_cols, xin, n, y, dec, stream);
    }

    // Products of one input: runs of the same type and width go in one call (one launch at decode).
    void mm_many(std::initializer_list<std::pair<const dev_weight*, float*>> ws, const float* xin, int64_t n) {
        cuda_product ps[k_max_products];
        const dev_weight* first = nullptr;
        int np = 0;
        auto flush = [&]() {
            if (np) cuda_matmul_many(first->type, first->row_bytes, first->n_cols, xin, n, ps, np, dec, stream);
            np = 0;
        };
        for (const auto& [w, y] : ws) {
            if (np && (np == k_max_products || w->type != first->type || w->n_cols != first->n_cols)) flush();
            if (!np) first = w;
            ps[np++] = {w->data, w->n_rows, y};
        }
        flush();
    }

    // Every kernel of a forward pass over n rows already in rows_d / rope (n_out of them, listed in
    // idx_d, get logits in `logits`); mirrors engine::forward stage by stage. Kernels only, all on
    // `stream`, so the sequence can be captured into a graph.
    void launch_forward(int64_t n, int64_t n_out) {
        const model_hparams& h = hp;
        cudaStream_t st = stream;
        const int64_t E = h.n_embd;
        cuda_shape s;
        s.n_embd = E;
        s.n_head = h.n_head;
        s.n_head_kv = h.n_head_kv;
        s.head_dim = h.head_dim;
        s.n_rot = h.n_rot;
        s.n_ff = h.n_ff;
        s.rope_neox = h.rope == ROPE_NEOX ? 1 : 0;
        s.kv_type = kv_type;
        s.kv_row_bytes = kv_row_bytes;
        s.rms_eps = h.rms_eps;

        cuda_embed(token_embd.type, token_embd.data, token_embd.row_bytes, rows_d, n, E, x, st);
        for (int64_t il = 0; il < h.n_layer; il++) {
            const dev_layer& L = layers[size_t(il)];
            // x += the previous layer's FFN output (none before layer 0), then norm
            cuda_rms_norm(x, il ? out : nullptr, nullptr, L.attn_norm, xn, n, E, h.rms_eps, st);
            mm_many({{&L.wq, q}, {&L.wk, k}, {&L.wv, v}}, xn, n);
            cuda_qkv_post(q, k, v, L.bq, L.bk, L.bv, L.q_norm, L.k_norm, rope, rows_d, n, il, s, st);
            cuda_attention(q, xn, rows_d, n, il, s, att, st);
            mm(L.wo, xn, n, out);
            cuda_rms_norm(x, out, nullptr, L.ffn_norm, xn, n, E, h.rms_eps, st);   // x += out, then norm
            mm_many({{&L.w_gate, gate}, {&L.w_up, up}}, xn, n);
            cuda_swiglu(gate, up, n, h.n_ff, st);
            mm(L.w_down, gate, n, out);   // added to x by the next norm
        }
        if (n_out) {   // x += the last FFN output on the rows that want logits (no other row needs x now)
            cuda_rms_norm(x, h.n_layer ? out : nullptr, idx_d, output_norm, xn, n_out, E, h.rms_eps, st);
            mm(output, xn, n_out, logits);
        }
    }

    // The graph of launch_forward(n, n_out), captured on first use; nullptr (and graphs off) when the
    // capture fails. Buffers and shapes are fixed per key; what changes per call (rows, RoPE table,
    // logit rows) is read from device memory that forward() fills before the launch.
    cudaGraphExec_t graph_for(int64_t n, int64_t n_out) {
        const int64_t key = n * (max_logit_rows + 1) + n_out;
        const auto it = graphs.find(key);
        if (it != graphs.end()) return it->second;
        cudaGraph_t g = nullptr;
        cudaGraphExec_t exec = nullptr;
        if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
            bool launched = true;
            try {
                launch_forward(n, n_out);
            } catch (const cuda_error&) {
                launched = false;
            }
            const cudaError_t ended = cudaStreamEndCapture(stream, &g);
            if (launched && ended == cudaSuccess && g && cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
                exec = nullptr;
            }
            if (g) cudaGraphDestroy(g);
        }
        cudaGetLastError();   // a failed capture leaves its error behind; the direct launches need none
        if (!exec) {
            graphs_enabled = false;
            return nullptr;
        }
        graphs[key] = exec;
        return exec;
    }
};

cuda_backend::cuda_backend(const model& m, int32_t kv_type, size_t kv_row_bytes, const std::vector<int64_t>& capacities,
                           int64_t max_rows, int64_t max_logit_rows, int device)
    : p_(std::make_unique<impl>()) {
    impl& b = *p_;
    const cuda_device_info info = cuda_device_query(device);   // throws when there is no such device
    if (info.cc_major < 8) {
        throw cuda_error("CUDA device " + std::to_string(device) + " (" + info.name + ") has compute capability " +
                         std::to_string(info.cc_major) + "." + std::to_string(info.cc_minor) +
                         "; the CUDA backend needs 8.0 or newer (bf16 tensor cores)");
    }
    if (max_rows < 1 || max_logit_rows < 1) throw cuda_error("cuda_backend: max_rows and max_logit_rows must be >= 1");
    b.device = device;
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    b.hp = m.hp;
    b.rope_freq_factors = m.rope_freq_factors;
    b.kv_type = kv_type;
    b.kv_row_bytes = kv_row_bytes;
    b.max_rows = max_rows;
    b.max_logit_rows = max_logit_rows;
    if (const char* env = std::getenv("STRATA_CUDA_GRAPHS")) b.graphs_enabled = std::string(env) != "0";
    const model_hparams& h = m.hp;
    if (h.head_dim > 256) {
        throw cuda_error("the CUDA backend's attention handles head sizes up to 256, this model has " +
                         std::to_string(h.head_dim));
    }

    // ---- weights, uploaded once
    b.token_embd = b.upload(m.token_embd, "token_embd");
    b.output = b.upload(m.output, "output");
    b.output_norm = b.upload_floats(m.output_norm, "output_norm");
    for (size_t il = 0; il < m.layers.size(); il++) {
        const layer_weights& L = m.layers[il];
        const std::string p = "blk." + std::to_string(il) + ".";
        dev_layer d;
        d.wq = b.upload(L.wq, p + "attn_q");
        d.wk = b.upload(L.wk, p + "attn_k");
        d.wv = b.upload(L.wv, p + "attn_v");
        d.wo = b.upload(L.wo, p + "attn_output");
        d.w_gate = b.upload(L.w_gate, p + "ffn_gate");
        d.w_up = b.upload(L.w_up, p + "ffn_up");
        d.w_down = b.upload(L.w_down, p + "ffn_down");
        d.attn_norm = b.upload_floats(L.attn_norm, p + "attn_norm");
        d.ffn_norm = b.upload_floats(L.ffn_norm, p + "ffn_norm");
        d.bq = b.upload_floats(L.bq, p + "attn_q.bias");
        d.bk = b.upload_floats(L.bk, p + "attn_k.bias");
        d.bv = b.upload_floats(L.bv, p + "attn_v.bias");
        d.q_norm = b.upload_floats(L.q_norm, p + "attn_q_norm");
        d.k_norm = b.upload_floats(L.k_norm, p + "attn_k_norm");
        b.layers.push_back(d);
    }

    // ---- KV: one zero-filled allocation per context
    b.capacities = capacities;
    for (size_t c = 0; c < capacities.size(); c++) {
        const size_t n_bytes = size_t(2 * h.n_layer) * size_t(capacities[c]) * kv_row_bytes;
        void* p = b.dalloc(n_bytes, "the KV cache of context " + std::to_string(c), &b.kv_bytes);
        cuda_check(cudaMemset(p, 0, n_bytes), "cudaMemset KV");
        b.kv.push_back(static_cast<uint8_t*>(p));
    }

    // ---- scratch
    const int64_t R = max_rows;
    b.x = b.fscratch(R * h.n_embd, "scratch x");
    b.xn = b.fscratch(R * std::max(h.n_embd, h.q_dim()), "scratch xn");
    b.q = b.fscratch(R * h.q_dim(), "scratch q");
    b.k = b.fscratch(R * h.kv_dim(), "scratch k");
    b.v = b.fscratch(R * h.kv_dim(), "scratch v");
    b.gate = b.fscratch(R * h.n_ff, "scratch gate");
    b.up = b.fscratch(R * h.n_ff, "scratch up");
    b.out = b.fscratch(R * h.n_embd, "scratch out");
    b.logits = b.fscratch(max_logit_rows * h.n_vocab, "scratch logits");
    b.rope = b.fscratch(R * std::max<int64_t>(h.n_rot, 2), "scratch rope");
    b.att = b.fscratch(cuda_attention_scratch_floats(R, h.n_head, h.n_head_kv, h.head_dim), "scratch attention");
    // decode products: the widest call is Q+K+V, gate+up, down or the output, whichever needs most
    int64_t dec_floats = cuda_decode_partial_floats(h.n_embd, b.output.n_rows);
    int64_t dec_tiles = cuda_decode_counters(b.output.n_rows);
    for (const dev_layer& L : b.layers) {
        const int64_t qkv = L.wq.n_rows + L.wk.n_rows + L.wv.n_rows, gate_up = L.w_gate.n_rows + L.w_up.n_rows;
        dec_floats = std::max({dec_floats, cuda_decode_partial_floats(L.wq.n_cols, qkv),
                               cuda_decode_partial_floats(L.wo.n_cols, L.wo.n_rows),
                               cuda_decode_partial_floats(L.w_gate.n_cols, gate_up),
                               cuda_decode_partial_floats(L.w_down.n_cols, L.w_down.n_rows)});
        dec_tiles = std::max({dec_tiles, cuda_decode_counters(qkv), cuda_decode_counters(gate_up),
                              cuda_decode_counters(L.wo.n_rows), cuda_decode_counters(L.w_down.n_rows)});
    }
    b.dec.partials = b.fscratch(dec_floats, "scratch decode partials");
    b.dec.partial_floats = dec_floats;
    b.dec.counters = static_cast<unsigned*>(b.dalloc(sizeof(unsigned) * size_t(dec_tiles), "decode tile counters",
                                                     &b.scratch_bytes));
    b.dec.n_counters = dec_tiles;
    // decode products start while the kernel before them runs (programmatic dependent launch: compute
    // capability 9.0 and newer); STRATA_CUDA_PDL=0 turns it off
    const char* pdl_env = std::getenv("STRATA_CUDA_PDL");
    b.dec.pdl = info.cc_major >= 9 && !(pdl_env && std::string(pdl_env) == "0");
    cuda_check(cudaMemset(b.dec.counters, 0, sizeof(unsigned) * size_t(dec_tiles)), "cudaMemset decode counters");
    b.rows_d = static_cast<cuda_dev_row*>(b.dalloc(sizeof(cuda_dev_row) * size_t(R), "row table", &b.scratch_bytes));
    b.idx_d = static_cast<int32_t*>(b.dalloc(sizeof(int32_t) * size_t(max_logit_rows), "logit rows", &b.scratch_bytes));
    cuda_check(cudaMallocHost(&b.rows_h, sizeof(cuda_dev_row) * size_t(R)), "cudaMallocHost rows");
    cuda_check(cudaMallocHost(&b.rope_h, sizeof(float) * size_t(R * std::max<int64_t>(h.n_rot, 2))),
               "cudaMallocHost rope");
    cuda_check(cudaMallocHost(&b.idx_h, sizeof(int32_t) * size_t(max_logit_rows)), "cudaMallocHost idx");
    cuda_check(cudaMallocHost(&b.logits_h, sizeof(float) * size_t(max_logit_rows * h.n_vocab)),
               "cudaMallocHost logits");
    // the uploads (pageable cudaMemcpy may return before its DMA ends) and the KV memsets ran on the
    // legacy stream, which does not order against the non-blocking compute stream: finish them here
    cuda_check(cudaDeviceSynchronize(), "uploading the model");
}

cuda_backend::~cuda_backend() = default;

void cuda_backend::forward(const cuda_row* rows, int64_t n) {
    impl& b = *p_;
    const model_hparams& h = b.hp;
    if (n <= 0) return;
    if (n > b.max_rows) {
        throw cuda_error("forward: " + std::to_string(n) + " rows exceed the " + std::to_string(b.max_rows) +
                         " the scratch is sized for");
    }
    cuda_check(cudaSetDevice(b.device), "cudaSetDevice");
    // rows, their RoPE tables (model.h's rope_table, as the CPU's), and the rows that want logits
    int64_t n_out = 0;
    for (int64_t r = 0; r < n; r++) {
        const cuda_row& row = rows[r];
        b.check_ctx(row.ctx, "forward");
        if (row.pos < 0 || row.pos >= b.capacities[size_t(row.ctx)]) {
            throw cuda_error("forward: position " + std::to_string(row.pos) + " outside context " +
                             std::to_string(row.ctx) + "'s capacity " + std::to_string(b.capacities[size_t(row.ctx)]));
        }
        b.rows_h[r] = {b.kv[size_t(row.ctx)], b.capacities[size_t(row.ctx)], row.pos, row.token, 0};
        rope_table(h, b.rope_freq_factors, row.pos, b.rope_h + r * h.n_rot);
        if (row.logits_out) {
            if (n_out == b.max_logit_rows) {
                throw cuda_error("forward: more than " + std::to_string(b.max_logit_rows) + " rows want logits");
            }
            b.idx_h[n_out++] = int32_t(r);
        }
    }
    cudaStream_t st = b.stream;
    cuda_check(cudaMemcpyAsync(b.rows_d, b.rows_h, sizeof(cuda_dev_row) * size_t(n), cudaMemcpyHostToDevice, st),
               "upload rows");
    cuda_check(cudaMemcpyAsync(b.rope, b.rope_h, sizeof(float) * size_t(n * h.n_rot), cudaMemcpyHostToDevice, st),
               "upload rope");
    if (n_out) {
        cuda_check(cudaMemcpyAsync(b.idx_d, b.idx_h, sizeof(int32_t) * size_t(n_out), cudaMemcpyHostToDevice, st),
                   "upload logit rows");
    }

    if (b.graphs_enabled && n <= k_graph_max_rows) {
        // a decode-sized batch: replay its captured graph (the same kernels, one launch)
        if (cudaGraphExec_t exec = b.graph_for(n, n_out)) {
            cuda_check(cudaGraphLaunch(exec, st), "cudaGraphLaunch");
        } else {
            b.launch_forward(n, n_out);
        }
    } else {
        b.launch_forward(n, n_out);
    }
    if (n_out) {
        cuda_check(cudaMemcpyAsync(b.logits_h, b.logits, sizeof(float) * size_t(n_out * h.n_vocab),
                                   cudaMemcpyDeviceToHost, st),
                   "download logits");
    }
    cuda_check(cudaStreamSynchronize(st), "forward pass");
    for (int64_t j = 0; j < n_out; j++) {
        std::memcpy(rows[b.idx_h[j]].logits_out, b.logits_h + j * h.n_vocab, sizeof(float) * size_t(h.n_vocab));
    }
}

void cuda_backend::kv_copy(int src, int dst, int64_t n_tokens) {
    impl& b = *p_;
    b.check_ctx(src, "kv_copy");
    b.check_ctx(dst, "kv_copy");
    if (n_tokens < 0 || n_tokens > b.capacities[size_t(src)] || n_tokens > b.capacities[size_t(dst)]) {
        throw cuda_error("kv_copy: " + std::to_string(n_tokens) + " tokens do not fit both contexts");
    }
    if (n_tokens == 0) return;
    cuda_check(cudaSetDevice(b.device), "cudaSetDevice");
    const size_t nb = size_t(n_tokens) * b.kv_row_bytes;
    for (int64_t il = 0; il < b.hp.n_layer; il++) {
        for (int which = 0; which < 2; which++) {
            cuda_check(cudaMemcpyAsync(b.kv[size_t(dst)] + b.kv_offset(dst, il, which, 0),
                                       b.kv[size_t(src)] + b.kv_offset(src, il, which, 0), nb,
                                       cudaMemcpyDeviceToDevice, b.stream),
                       "kv_copy");
        }
    }
    cuda_check(cudaStreamSynchronize(b.stream), "kv_copy");
}

void cuda_backend::kv_read(int ctx, int64_t t0, int64_t t1, uint8_t* dst) const {
    const impl& b = *p_;
    b.check_ctx(ctx, "kv_read");
    if (t0 < 0 || t1 < t0 || t1 > b.capacities[size_t(ctx)]) throw cuda_error("kv_read: bad token range");
    if (t1 == t0) return;
    cuda_check(cudaSetDevice(b.device), "cudaSetDevice");
    const size_t nb = size_t(t1 - t0) * b.kv_row_bytes;
    for (int64_t il = 0; il < b.hp.n_layer; il++) {
        for (int which = 0; which < 2; which++) {
            cuda_check(cudaMemcpyAsync(dst, b.kv[size_t(ctx)] + b.kv_offset(ctx, il, which, t0), nb,
                                       cudaMemcpyDeviceToHost, b.stream),
                       "kv_read");
            dst += nb;
        }
    }
    cuda_check(cudaStreamSynchronize(b.stream), "kv_read");
}

void cuda_backend::kv_write(int ctx, int64_t t0, int64_t n_tokens, const uint8_t* src) {
    impl& b = *p_;
    b.check_ctx(ctx, "kv_write");
    if (t0 < 0 || n_tokens < 0 || t0 + n_tokens > b.capacities[size_t(ctx)]) throw cuda_error("kv_write: bad token range");
    if (n_tokens == 0) return;
    cuda_check(cudaSetDevice(b.device), "cudaSetDevice");
    const size_t nb = size_t(n_tokens) * b.kv_row_bytes;
    for (int64_t il = 0; il < b.hp.n_layer; il++) {
        for (int which = 0; which < 2; which++) {
            cuda_check(cudaMemcpyAsync(b.kv[size_t(ctx)] + b.kv_offset(ctx, il, which, t0), src, nb,
                                       cudaMemcpyHostToDevice, b.stream),
                       "kv_write");
            src += nb;
        }
    }
    cuda_check(cudaStreamSynchronize(b.stream), "kv_write");
}

cuda_device_info cuda_backend::device() const { return cuda_device_query(p_->device); }
size_t cuda_backend::vram_used() const { return p_->weight_bytes + p_->kv_bytes + p_->scratch_bytes; }
size_t cuda_backend::weight_bytes() const { return p_->weight_bytes; }
size_t cuda_backend::kv_bytes() const { return p_->kv_bytes; }

}  // namespace strata
