// The op totals of op-times.h and their names.
#include "op-times.h"

namespace strata {

op_totals& op_times() {
    static op_totals totals{};
    return totals;
}

const char* op_name(int kind) {
    static const char* const names[OP_COUNT] = {
        "embed", "attn_norm", "act_quant", "qkv", "rope_kv", "attention", "wo", "ffn_norm", "gate_up",
        "activation", "down", "residual", "output_norm", "output", "logits_copy", "forward", "pool_busy"};
    return kind >= 0 && kind < OP_COUNT ? names[kind] : "?";
}

void op_times_reset() {
    for (int k = 0; k < OP_COUNT; k++) {
        op_times().ns[k].store(0, std::memory_order_relaxed);
        op_times().calls[k].store(0, std::memory_order_relaxed);
    }
}

#ifdef STRATA_OP_TIMES
namespace {
thread_local std::chrono::steady_clock::time_point lap_last;
}

void op_lap_start() { lap_last = std::chrono::steady_clock::now(); }

void op_lap(int kind) {
    const auto now = std::chrono::steady_clock::now();
    op_times().ns[kind].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(now - lap_last).count(),
                                  std::memory_order_relaxed);
    op_times().calls[kind].fetch_add(1, std::memory_order_relaxed);
    lap_last = now;
}
#endif

bool op_times_enabled() {
#ifdef STRATA_OP_TIMES
    return true;
#else
    return false;
#endif
}

}  // namespace strata
