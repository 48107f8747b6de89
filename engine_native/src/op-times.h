// Wall time of the forward pass's ops and the thread pool's busy time, for profiling builds only
// (CMake option STRATA_OP_TIMES: benchmarks/decode_profile.py reads them through _engine.op_times()).
// Other builds compile every STRATA_OP_TIME to nothing and report no ops.
//
// An op's time is the caller's (thread 0's) wall time from the previous op's end to its own join, so it
// includes waiting for the slowest thread; OP_POOL_BUSY sums the time every thread spent inside chunks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace strata {

enum op_kind : int {
    OP_EMBED,          // embeddings and RoPE tables
    OP_ATTN_NORM,      // RMSNorm before attention
    OP_ACT_QUANT,      // activations quantized / prepared for the products
    OP_QKV,            // q, k, v products (quantization apart)
    OP_ROPE_KV,        // biases, RoPE, K/V into the cache
    OP_ATTENTION,      // scores, softmax, values
    OP_WO,             // attention output product
    OP_FFN_NORM,       // residual add and RMSNorm before the FFN
    OP_GATE_UP,        // gate and up products
    OP_ACTIVATION,     // SwiGLU
    OP_DOWN,           // down product
    OP_RESIDUAL,       // residual add after the FFN
    OP_OUTPUT_NORM,    // final RMSNorm of the rows that want logits
    OP_OUTPUT,         // output projection over the vocabulary
    OP_LOGITS_COPY,    // logits into the rows' buffers
    OP_FORWARD,        // the whole forward pass
    OP_POOL_BUSY,      // all threads' time inside chunks
    OP_COUNT
};

struct op_totals {
    std::atomic<int64_t> ns[OP_COUNT];
    std::atomic<int64_t> calls[OP_COUNT];
};

// The process's totals (zero until a profiling build runs a forward pass) and the ops' names.
op_totals& op_times();
const char* op_name(int kind);
void op_times_reset();
bool op_times_enabled();

#ifdef STRATA_OP_TIMES
struct op_timer {
    int kind;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    explicit op_timer(int k) : kind(k) {}
    ~op_timer() {
        const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        op_times().ns[kind].fetch_add(ns, std::memory_order_relaxed);
        op_times().calls[kind].fetch_add(1, std::memory_order_relaxed);
    }
};
#define STRATA_OP_CAT2(a, b) a##b
#define STRATA_OP_CAT(a, b) STRATA_OP_CAT2(a, b)
#define STRATA_OP_TIME(kind) ::strata::op_timer STRATA_OP_CAT(strata_op_timer_, __LINE__)(kind)
// Laps on the calling thread: each STRATA_OP_LAP(kind) adds the time since the previous lap (or the
// lap start) to kind, so the forward pass marks only where each op ends.
void op_lap_start();
void op_lap(int kind);
#define STRATA_OP_LAP_START() ::strata::op_lap_start()
#define STRATA_OP_LAP(kind) ::strata::op_lap(kind)
#else
#define STRATA_OP_TIME(kind) ((void)0)
#define STRATA_OP_LAP_START() ((void)0)
#define STRATA_OP_LAP(kind) ((void)0)
#endif

}  // namespace strata
