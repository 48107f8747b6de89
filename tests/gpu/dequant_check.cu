// Host check of engine_native/cuda/cuda-dequant.cuh (built by test_cuda_compiles.py with nvcc, run on
// the CPU, no GPU needed): dq<TYPE>(row, k), the element decoder every CUDA product and embedding
// lookup uses, against the CPU's dequantize_row for every weight type, on rows of random blocks whose
// scale fields are finite halves; and dq8<TYPE> (runs of 8, what the product kernels use) against dq
// bit for bit. Prints "ok TYPE" per type; exits 1 at the first mismatch.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cuda-dequant.cuh"
#include "quants.h"

using namespace strata;

namespace {

std::mt19937 rng(1234);

float uniform(float lo, float hi) { return lo + (hi - lo) * float(rng() % 1000000) / 1e6f; }

void put_half(uint8_t* p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
}

// Random bytes, then every fp16 scale field (offsets within each block) made a finite half.
std::vector<uint8_t> random_row(int32_t type, int64_t n) {
    std::vector<uint8_t> row(type_row_bytes(type, n));
    for (auto& b : row) b = uint8_t(rng());
    const size_t bb = type_block_bytes(type);
    std::vector<size_t> halves;   // offsets of fp16 fields in a block
    switch (type) {
        case TYPE_F32:
            for (int64_t i = 0; i < n; i++) {
                const float v = uniform(-2, 2);
                std::memcpy(row.data() + 4 * i, &v, 4);
            }
            return row;
        case TYPE_F16:
            for (int64_t i = 0; i < n; i++) put_half(row.data() + 2 * i, uniform(-2, 2));
            return row;
        case TYPE_BF16:
            for (int64_t i = 0; i < n; i++) {
                const float v = uniform(-2, 2);
                uint32_t u;
                std::memcpy(&u, &v, 4);
                const uint16_t h = uint16_t(u >> 16);
                std::memcpy(row.data() + 2 * i, &h, 2);
            }
            return row;
        case TYPE_Q4_1: case TYPE_Q5_1: case TYPE_Q4_K: case TYPE_Q5_K: halves = {0, 2}; break;
        case TYPE_Q6_K: halves = {208}; break;
        default: halves = {0}; break;   // Q4_0, Q5_0, Q8_0
    }
    for (size_t b = 0; b < row.size() / bb; b++) {
        for (size_t off : halves) put_half(row.data() + b * bb + off, uniform(-0.1f, 0.1f));
    }
    return row;
}

template <int TYPE>
bool check(const char* name, int64_t n) {
    for (int trial = 0; trial < 8; trial++) {
        const std::vector<uint8_t> row = random_row(TYPE, n);
        std::vector<float> want(static_cast<size_t>(n), 0.0f);
        dequantize_row(TYPE, row.data(), want.data(), n);
        for (int64_t k = 0; k < n; k++) {
            const float got = cuda_dq::dq<TYPE>(row.data(), k);
            const float tol = 1e-6f * std::fabs(want[size_t(k)]) + 1e-30f;   // an FMA contraction at most
            if (!(std::fabs(got - want[size_t(k)]) <= tol)) {
                std::printf("MISMATCH %s element %lld: dq %.9g, dequantize_row %.9g\n", name, (long long)k,
                            double(got), double(want[size_t(k)]));
                return false;
            }
        }
    }
    // dq8: runs of 8 elements, bit for bit what dq gives one by one
    for (int trial = 0; trial < 8; trial++) {
        const std::vector<uint8_t> row = random_row(TYPE, n);
        for (int64_t k = 0; k < n; k += 8) {
            float run[8], one[8];
            cuda_dq::dq8<TYPE>(row.data(), k, run);
            for (int j = 0; j < 8; j++) one[j] = cuda_dq::dq<TYPE>(row.data(), k + j);
            if (std::memcmp(run, one, sizeof(run)) != 0) {
                std::printf("MISMATCH %s dq8 at element %lld\n", name, (long long)k);
                return false;
            }
        }
    }
    std::printf("ok %s\n", name);
    return true;
}

}  // namespace

int main() {
    const int64_t n = 512;   // two K-quant super-blocks, sixteen 32-blocks
    bool ok = check<TYPE_F32>("F32", n) && check<TYPE_F16>("F16", n) && check<TYPE_BF16>("BF16", n) &&
              check<TYPE_Q4_0>("Q4_0", n) && check<TYPE_Q4_1>("Q4_1", n) && check<TYPE_Q5_0>("Q5_0", n) &&
              check<TYPE_Q5_1>("Q5_1", n) && check<TYPE_Q8_0>("Q8_0", n) && check<TYPE_Q4_K>("Q4_K", n) &&
              check<TYPE_Q5_K>("Q5_K", n) && check<TYPE_Q6_K>("Q6_K", n);
    return ok ? 0 : 1;
}
