// fp16 conversions for the attention check programs (the attention sources call strata's, which live in
// quants.cpp, not linked here): exact widening, and a narrowing that truncates (the stored K/V only
// has to be some f16); and the checksum the programs print of their outputs (FNV-1a over the floats'
// bits: the same on every build when the floats are). Include in one translation unit of a program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace strata {
float fp16_to_fp32(uint16_t h) {
    uint32_t s = uint32_t(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) { if (m == 0) u = s; else { e = 127 - 15 + 1; while (!(m & 0x400)) { m <<= 1; e--; } m &= 0x3ff; u = s | (e << 23) | (m << 13); } }
    else if (e == 31) u = s | 0x7f800000 | (m << 13);
    else u = s | ((e + 112) << 23) | (m << 13);
    float f; std::memcpy(&f, &u, 4); return f;
}
uint16_t fp32_to_fp16(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    uint32_t s = (u >> 16) & 0x8000; int32_t e = int32_t((u >> 23) & 0xff) - 127 + 15; uint32_t m = (u >> 13) & 0x3ff;
    if (e <= 0) return uint16_t(s); if (e >= 31) return uint16_t(s | 0x7c00); return uint16_t(s | (uint32_t(e) << 10) | m);
}
// the running checksum `sum` (start 2166136261) folded over n floats
uint32_t fold_checksum(uint32_t sum, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        std::memcpy(&u, &x[i], 4);
        sum = (sum ^ u) * 16777619u;
    }
    return sum;
}
}  // namespace strata
