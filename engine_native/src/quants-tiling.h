// The register tile and the cache tiling shared by the SIMD kernel files (quants-avx512.cpp,
// quants-avx2.cpp): a tile computes nr weight rows x nt tokens, each (row, token) pair owning one
// vector accumulator that goes through exactly the same instructions whatever nr, nt, the row
// range or n_tok; that is what makes matmul equal matvec bit for bit (quants.h).
//
// A format F supplies: NR, NT (largest tile), W_STEP (weight bytes of a row per step), acc_t with zero() / reduce(), xs_t / ws_t (one step's
// activation / weight state), full_steps(n), has_tail(n), load_x<FULL>(row, s, xs, n),
// load_w<FULL>(row, s, ws, n) and madd(ws, xs, acc). Not here: any arithmetic of a format.
#pragma once

// x86 only: included by the SIMD kernel files.
#include <xmmintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace strata {
namespace tiling {

constexpr size_t PREFETCH_BYTES = 16384;  // measured on Q4_1 n=576 decode: 4 KiB ~21 GB/s, 16 KiB ~24 GB/s

// F::PREPARE if the format declares it, else false.
template <class F, class = void>
struct prepares : std::false_type {};
template <class F>
struct prepares<F, std::void_t<decltype(F::PREPARE)>> : std::bool_constant<F::PREPARE> {};

using tile_fn = void (*)(const uint8_t* w, size_t wrb, const uint8_t* x, size_t xrb, int64_t n, float* y, int64_t ys);

// y[t * ys + r] = dot(W[r], X[t]) for r < nr, t < nt (W rows wrb bytes apart, X rows xrb).
template <class F, int nr, int nt>
void tile(const uint8_t* w, size_t wrb, const uint8_t* x, size_t xrb, int64_t n, float* y, int64_t ys) {
    typename F::acc_t acc[nr][nt];
#pragma GCC unroll 8
    for (int r = 0; r < nr; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < nt; ++t) acc[r][t] = F::zero();
    }
    const int64_t n_full = F::full_steps(n);
    // Prefetch distance in rows: at least the next tile, and at least PREFETCH_BYTES ahead so that
    // short rows (576 elements of Q4_1 are 360 bytes) still cover the memory latency.
    const size_t rows_ahead = std::max<size_t>(size_t(nr), (PREFETCH_BYTES + wrb - 1) / wrb);
    for (int64_t s = 0; s < n_full; ++s) {
        typename F::xs_t xs[nt];
#pragma GCC unroll 8
        for (int t = 0; t < nt; ++t) {
            if (prepares<F>::value) {
                xs[t] = reinterpret_cast<const typename F::xs_t*>(x + size_t(t) * xrb)[s];
            } else {
                F::template load_x<true>(x + size_t(t) * xrb, s, xs[t], n);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < nr; ++r) {
            // Decode streams weights from memory in short rows that the hardware prefetcher keeps
            // restarting on: fetch the same step of the row rows_ahead below.
            const uint8_t* ahead = w + (size_t(r) + rows_ahead) * wrb + size_t(s) * F::W_STEP;
#pragma GCC unroll 4
            for (size_t b = 0; b < F::W_STEP; b += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T0);
            typename F::ws_t ws;
            F::template load_w<true>(w + size_t(r) * wrb, s, ws, n);
#pragma GCC unroll 8
            for (int t = 0; t < nt; ++t) F::madd(ws, xs[t], acc[r][t]);
        }
    }
    if (F::has_tail(n)) {   // the partial last step: the same instructions for every (row, token)
        typename F::xs_t xs[nt];
#pragma GCC unroll 8
        for (int t = 0; t < nt; ++t) {
            if (prepares<F>::value) {
                xs[t] = reinterpret_cast<const typename F::xs_t*>(x + size_t(t) * xrb)[n_full];
            } else {
                F::template load_x<false>(x + size_t(t) * xrb, n_full, xs[t], n);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < nr; ++r) {
            typename F::ws_t ws;
            F::template load_w<false>(w + size_t(r) * wrb, n_full, ws, n);
#pragma GCC unroll 8
            for (int t = 0; t < nt; ++t) F::madd(ws, xs[t], acc[r][t]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < nr; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < nt; ++t) y[t * ys + r] = F::reduce(acc[r][t]);
    }
}

template <class F, size_t... I>
constexpr std::array<tile_fn, sizeof...(I)> make_tiles(std::index_sequence<I...>) {
    return {{&tile<F, int(I / F::NT) + 1, int(I % F::NT) + 1>...}};
}

constexpr size_t WEIGHT_TILE_BYTES = 32 * 1024;    // rows of weights kept in L1 across a token tile
constexpr size_t ACT_TILE_BYTES = 256 * 1024;      // tokens of activations kept in L2 across all rows

// Y[t * ys + (r - r0)] for t < n_tok, r0 <= r < r1; y points at (t = 0, r = r0).
template <class F>
void matmul_tiled(const void* w, size_t wrb, const void* xq, size_t xrb, int64_t n_tok, float* y, int64_t ys, int64_t n,
                  int64_t r0, int64_t r1) {
    static constexpr auto tiles = make_tiles<F>(std::make_index_sequence<size_t(F::NR * F::NT)>());
    const uint8_t* W = static_cast<const uint8_t*>(w) + size_t(r0) * wrb;
    const uint8_t* X = static_cast<const uint8_t*>(xq);
    const int64_t n_rows = r1 - r0;
    const int64_t row_tile = std::max<int64_t>(F::NR, int64_t(WEIGHT_TILE_BYTES / wrb) / F::NR * F::NR);
    const int64_t tok_tile = std::max<int64_t>(F::NT, xrb ? int64_t(ACT_TILE_BYTES / xrb) / F::NT * F::NT : F::NT);
    // (tok_tile, n_steps) prepared step states, when the format prepares them
    thread_local std::vector<typename F::xs_t> prepared;
    const int64_t n_steps = F::full_steps(n) + (F::has_tail(n) ? 1 : 0);
    for (int64_t tb = 0; tb < n_tok; tb += tok_tile) {
        const int64_t te = std::min(n_tok, tb + tok_tile);
        const uint8_t* x_tiles = X;
        size_t x_stride = xrb;
        int64_t x_first = tb;   // token index that x_tiles' first row holds
        if (prepares<F>::value) {
            if (prepared.size() < size_t((te - tb) * n_steps)) prepared.resize(size_t((te - tb) * n_steps));
            for (int64_t t = tb; t < te; ++t) {
                typename F::xs_t* dst = prepared.data() + (t - tb) * n_steps;
                for (int64_t s = 0; s < F::full_steps(n); ++s) F::template load_x<true>(X + size_t(t) * xrb, s, dst[s], n);
                if (F::has_tail(n)) F::template load_x<false>(X + size_t(t) * xrb, F::full_steps(n), dst[F::full_steps(n)], n);
            }
            x_tiles = reinterpret_cast<const uint8_t*>(prepared.data());
            x_stride = size_t(n_steps) * sizeof(typename F::xs_t);
            x_first = tb;
        } else {
            x_first = 0;
        }
        for (int64_t rb = 0; rb < n_rows; rb += row_tile) {
            const int64_t re = std::min(n_rows, rb + row_tile);
            for (int64_t t = tb; t < te; t += F::NT) {
                const int64_t nt = std::min<int64_t>(F::NT, te - t);
                for (int64_t r = rb; r < re; r += F::NR) {
                    const int64_t nr = std::min<int64_t>(F::NR, re - r);
                    tiles[size_t((nr - 1) * F::NT + (nt - 1))](W + size_t(r) * wrb, wrb, x_tiles + size_t(t - x_first) * x_stride,
                                                               x_stride, n, y + t * ys + r, ys);
                }
            }
        }
    }
}

}  // namespace tiling
}  // namespace strata
