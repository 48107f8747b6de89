// The CUDA backend's seam with the engine: plain C++ (no CUDA types), so engine.cpp includes it
// only in a build with STRATA_WITH_CUDA and the CPU-only build never sees CUDA.
//
// What it is: weights (uploaded once), every context's KV cache and the forward scratch in VRAM;
// the forward pass of a batch of rows on the GPU; KV copy / read / write between contexts and host
// memory in the CPU backend's layout (per layer: K rows then V rows, kv_row_bytes each), so a
// snapshot taken on one backend restores on the other when the KV type matches.
// What it is not: context bookkeeping (token histories, capacities, logits flags stay in engine.cpp),
// the snapshot image format (snapshot.py), sampling (the logits are copied back to the host).
//
// Bitwise rule on the GPU: every per-row stage has a fixed order that depends only on that row, and
// every product (decode and prefill alike) goes through one tensor-core kernel whose k-order is fixed
// by the row length, so a row's logits never depend on the batch or the prefill chunking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model.h"

namespace strata {

class cuda_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct cuda_device_info {
    int index = -1;
    std::string name;
    int cc_major = 0, cc_minor = 0;   // compute capability
    size_t vram_total = 0;            // bytes
    size_t vram_free = 0;             // bytes, when queried
};

// Usable CUDA devices: 0 when there is no driver, no device, or the runtime refuses; never throws.
int cuda_device_count();
// Name, compute capability and VRAM of a device; throws cuda_error for a bad index.
cuda_device_info cuda_device_query(int device);

// Every kernel on small random inputs against plain host loops (cuda-selftest.cu): one verdict per
// kernel and case (error relative to the reference's scale, the limit, ok). Throws cuda_error without
// a device. For diagnosis on a first GPU run; the parity tests are the contract.
struct cuda_selftest_result {
    std::string name;
    double error;
    double limit;
    bool ok;
};
std::vector<cuda_selftest_result> cuda_selftest(int device = 0);

// One row of a forward batch, as the backend sees it: a token of context `ctx` at position `pos`.
struct cuda_row {
    int ctx;
    int32_t token;
    int64_t pos;
    float* logits_out;   // host (n_vocab,) destination, or nullptr when this row's logits are not needed
};

class cuda_backend {
  public:
    // kv_type / kv_row_bytes as the engine's kv_layout; capacities: one per context id (tokens);
    // max_rows: the most rows one forward() gets; max_logit_rows: the most of them that want logits.
    // Throws cuda_error naming the problem (no device, compute capability below 8.0, out of VRAM).
    cuda_backend(const model& m, int32_t kv_type, size_t kv_row_bytes, const std::vector<int64_t>& capacities,
                 int64_t max_rows, int64_t max_logit_rows, int device = 0);
    ~cuda_backend();
    cuda_backend(const cuda_backend&) = delete;
    cuda_backend& operator=(const cuda_backend&) = delete;

    // Runs the model over rows (their K/V are written at each row's position first); blocks until
    // the logits of the rows that want them are in host memory.
    void forward(const cuda_row* rows, int64_t n_rows);
    // dst := src's first n_tokens KV rows in every layer.
    void kv_copy(int src_ctx, int dst_ctx, int64_t n_tokens);
    // Host <-> VRAM, tokens [t0, t1) / [t0, t0 + n): per layer K rows then V rows (engine::kv_read's layout).
    void kv_read(int ctx, int64_t t0, int64_t t1, uint8_t* dst) const;
    void kv_write(int ctx, int64_t t0, int64_t n_tokens, const uint8_t* src);

    // The device with its free VRAM as of now.
    cuda_device_info device() const;
    // Bytes this backend allocated: weights, KV, scratch.
    size_t vram_used() const;
    size_t weight_bytes() const;
    size_t kv_bytes() const;

    struct impl;

  private:
    std::unique_ptr<impl> p_;
};

}  // namespace strata
