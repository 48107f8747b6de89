// q8_0 KV attention (llama.cpp's blocks: 32 int8 and an fp16 scale): K in tiles scored with exact int32
// dots against the query quantized to q8_0 (vpdpbusd where the build has AVX-512 VNNI, vpmaddwd on
// AVX2, else a scalar integer loop: the same integers), V in rows widened once per position for all
// query heads; with
// a sliding window only the window's tiles and rows are read, sinks join each head's softmax.
//
// Not here: the layout's store / rows conversions (kv-layout.cpp), the entry points (attention.cpp,
// attention-grouped.cpp), threading.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention-internal.h"
#include "quants.h"
#include "vec16.h"

namespace strata::attn_detail {

namespace {

inline float half_bits_to_float(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
#if defined(__F16C__) || (defined(_MSC_VER) && defined(__AVX2__))   // MSVC /arch:AVX2 implies F16C
    return _cvtsh_ss(h);   // exact, as fp16_to_fp32
#else
    return fp16_to_fp32(h);
#endif
}

#if defined(STRATA_V16_AVX2)
// An empty asm that takes and returns a value: GCC must have it in a register there. Unrolled, GCC
// reassociates integer sums (all 8 x NQ x 4 products of a K block computed before any add, and spilled)
// and folds a loaded vector into each fma or vpmaddwd that reads it (a load for each query vector): after
// each step the chains, and loaded K or V, held so (the same integers and fmas, in the same order).
inline void keep_in_register(__m256i& x) {
#if defined(__GNUC__) || defined(__clang__)
    __asm__("" : "+x"(x));
#else
    (void)x;
#endif
}
inline void keep_in_register(v16& x) {
#if defined(__GNUC__) || defined(__clang__)
    __asm__("" : "+x"(x.lo), "+x"(x.hi));
#else
    (void)x;
#endif
}
#endif

// A block with a NaN or inf gets the scale NaN (its values 0), so the head's scores are NaN as f16 KV's are,
// where the float -> int cast of a NaN lane was undefined behaviour (and fmax dropped the NaN from amax)
void quantize_query(const float* x, int64_t hd, int8_t* qs, float* d, int32_t* bias) {
    for (int64_t b = 0; b < hd / k_qk; b++) {
        const float* xb = x + b * k_qk;
        uint32_t amax_bits = 0;   // max |x| as bits, ordered as the floats are: a NaN or inf above every finite
        for (int j = 0; j < k_qk; j++) {
            uint32_t u;
            std::memcpy(&u, xb + j, 4);
            amax_bits = std::max(amax_bits, u & 0x7fffffffu);
        }
        if (amax_bits >= 0x7f800000u) {
            std::fill(qs + b * k_qk, qs + (b + 1) * k_qk, int8_t(0));
            d[b] = std::numeric_limits<float>::quiet_NaN();
            bias[b] = 0;
            continue;
        }
        float amax;
        std::memcpy(&amax, &amax_bits, 4);
        const float db = amax / 127.0f;
        const float inv = 1.0f / db;
        const float id = std::isfinite(inv) ? inv : 0.0f;   // 0: db 0, or below 2^-128 (its inverse overflows)
        int32_t sum = 0;
        for (int j = 0; j < k_qk; j++) {
            const int32_t v = int32_t(std::nearbyint(xb[j] * id));   // |v| <= 127 (x * id <= amax * 127 / amax)
            qs[b * k_qk + j] = int8_t(v);
            sum += v;
        }
        d[b] = db;
        bias[b] = -128 * sum;
    }
}

// The 16 positions' exact int32 dots of one tile block with one query block: one GNU inline-asm
// instruction where the compiler takes it (MSVC has no x64 inline asm), else portable code.
#if defined(__AVX512VNNI__) && defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__))
#define STRATA_Q8_DPBUSD_ASM 1
inline __m512i dpbusd_bcast(__m512i acc, __m512i k, const int8_t* q4) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(k), "m"(*reinterpret_cast<const int32_t*>(q4)));
    return acc;
}
#elif defined(STRATA_V16_AVX2)
// AVX2 has no u8 x s8 product that keeps a pair's sum exact (vpmaddubsw saturates at 2 x 255 x 127), so
// the tile's bytes are widened to int16 once per block for every head, and vpmaddwd against the query's
// 4 int16 of the same dimensions gives each position 2 exact int32 partial sums: 32 vpmaddwd a block of
// 16 positions and a head, where the portable loop below left GCC 512 byte products to vectorize itself.
#define STRATA_Q8_DOTS_AVX2 1
constexpr int k_q8_words = k_q8_max_head_dim / 4;   // a head's query as 4-dimension int16 words

// q[4w .. 4w + 4) as 4 int16 in one int64 (broadcast to every 64-bit lane at use), w < hd / 4
inline void widen_query(const int8_t* q, int64_t hd, int64_t* words) {
    for (int64_t w = 0; w < hd / 4; w++) {
        uint64_t x = 0;
        for (int i = 0; i < 4; i++) x |= uint64_t(uint16_t(int16_t(q[4 * w + i]))) << (16 * i);
        words[w] = int64_t(x);
    }
}

// sf[h] = fma(dot, dk * dq[h], sf[h]), dot the 16 positions' exact int32 dots of one tile block with head h's
// block (its 8 words at qw[h] + word0, bias[h] added) as floats, the integers the scalar loop gives; each half's
// fmas as soon as its dots are summed (lane for lane the caller's v16 fma), so no half's sums wait in a register
template <int NH>
inline void tile_block_dots_avx2(const uint8_t* tb, const int64_t* const* qw, int64_t word0, const int32_t* bias,
                                 v16 dk, const float* dq, v16* sf) {
    STRATA_UNROLL
    for (int half = 0; half < 2; half++) {   // positions 8 half .. 8 half + 8
        __m256i a0[NH], a1[NH];              // positions 4 at a time: (position, dimension pair) lanes
        STRATA_UNROLL
        for (int h = 0; h < NH; h++) a0[h] = a1[h] = _mm256_setzero_si256();
        STRATA_UNROLL
        for (int j = 0; j < k_qk / 4; j++) {
            const uint8_t* p = tb + j * 64 + half * 32;
            const __m256i k0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
            const __m256i k1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
            STRATA_UNROLL
            for (int h = 0; h < NH; h++) {
                const __m256i qv = _mm256_set1_epi64x(qw[h][word0 + j]);
                a0[h] = _mm256_add_epi32(a0[h], _mm256_madd_epi16(k0, qv));
                a1[h] = _mm256_add_epi32(a1[h], _mm256_madd_epi16(k1, qv));
            }
            STRATA_UNROLL   // chains 8 steps long in registers, not all products first and spilled
            for (int h = 0; h < NH; h++) {
                keep_in_register(a0[h]);
                keep_in_register(a1[h]);
            }
        }
        STRATA_UNROLL
        for (int h = 0; h < NH; h++) {   // pairs summed: p0 p1 p4 p5 | p2 p3 p6 p7, then in order
            const __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(a0[h], a1[h]), 0xD8);
            // exact as floats: a dot is sum k q over 32 dimensions, |.| <= 32 x 128 x 127 < 2^24
            const __m256 dot = _mm256_cvtepi32_ps(_mm256_add_epi32(s, _mm256_set1_epi32(bias[h])));
            const __m256 w = _mm256_mul_ps(half == 0 ? dk.lo : dk.hi, _mm256_set1_ps(dq[h]));
            __m256& acc = half == 0 ? sf[h].lo : sf[h].hi;
            acc = _mm256_fmadd_ps(dot, w, acc);
        }
    }
}
#else
inline v16 tile_block_dots(const uint8_t* tb, const int8_t* q, int32_t bias) {
    int32_t acc[k_tile];
    for (int r = 0; r < k_tile; r++) {
        int32_t s = bias;
        for (int j = 0; j < k_qk / 4; j++)
            for (int i = 0; i < 4; i++) s += int32_t(tb[j * 64 + r * 4 + i]) * int32_t(q[4 * j + i]);
        acc[r] = s;
    }
    float f[k_tile];
    for (int r = 0; r < k_tile; r++) f[r] = float(acc[r]);   // exact: |dot| <= 32 * 127 * 127 < 2^24
    return v16_load(f);
}
#endif

// scores[h][t] for NH heads over whole tiles [tile0, tile1) of kv head g (nb blocks per head)
template <int NH>
void scores_q8_tiled(const uint8_t* k, size_t tile_bytes, int64_t g, int64_t nb, const q8_query& qq, int64_t h0,
                     int64_t tile0, int64_t tile1, float scale, float* scores, int64_t n_pad) {
    const v16 vs = v16_set1(scale);
    const size_t head_bytes = size_t(nb) * k_q8_tile_block;
#if defined(STRATA_Q8_DOTS_AVX2)
    int64_t words[NH][k_q8_words];
    const int64_t* qw[NH];
    for (int h = 0; h < NH; h++) {
        widen_query(qq.qs[h0 + h], nb * k_qk, words[h]);
        qw[h] = words[h];
    }
#endif
    for (int64_t tile = tile0; tile < tile1; tile++) {
        const uint8_t* base = k + size_t(tile) * tile_bytes + size_t(g) * head_bytes;
        if (tile + k_prefetch_tiles < tile1) prefetch_bytes(base + k_prefetch_tiles * tile_bytes, head_bytes);
        v16 sf[NH];
        for (int h = 0; h < NH; h++) sf[h] = v16_zero();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t* tb = base + b * k_q8_tile_block;
            const v16 dk = v16_load(reinterpret_cast<const uint16_t*>(tb + k_q8_scales));
#if defined(STRATA_Q8_DPBUSD_ASM)
            __m512i kv[8];
            for (int j = 0; j < 8; j++) kv[j] = _mm512_loadu_si512(tb + 64 * j);
            for (int h = 0; h < NH; h++) {
                const int8_t* q = qq.qs[h0 + h] + b * k_qk;
                __m512i acc = _mm512_set1_epi32(qq.bias[h0 + h][b]);
                for (int j = 0; j < 8; j++) acc = dpbusd_bcast(acc, kv[j], q + 4 * j);
                const v16 dot{_mm512_cvtepi32_ps(acc)};
                sf[h] = v16_fma(dot, v16_mul(dk, v16_set1(qq.d[h0 + h][b])), sf[h]);
            }
#elif defined(STRATA_Q8_DOTS_AVX2)
            int32_t bias[NH];
            float dq[NH];
            for (int h = 0; h < NH; h++) {
                bias[h] = qq.bias[h0 + h][b];
                dq[h] = qq.d[h0 + h][b];
            }
            tile_block_dots_avx2<NH>(tb, qw, b * (k_qk / 4), bias, dk, dq, sf);
#else
            for (int h = 0; h < NH; h++) {
                const v16 dot = tile_block_dots(tb, qq.qs[h0 + h] + b * k_qk, qq.bias[h0 + h][b]);
                sf[h] = v16_fma(dot, v16_mul(dk, v16_set1(qq.d[h0 + h][b])), sf[h]);
            }
#endif
        }
        for (int h = 0; h < NH; h++) v16_store(scores + (h0 + h) * n_pad + tile * k_tile, v16_mul(sf[h], vs));
    }
}

// 16 int8 as floats
inline v16 v16_load_s8(const uint8_t* p) {
#if defined(STRATA_V16_AVX512)
    return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
#elif defined(STRATA_V16_AVX2)
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(x, 8)))};
#else
    v16 r;
    for (int i = 0; i < 16; i++) r.f[i] = float(int8_t(p[i]));
    return r;
#endif
}

// out[h][b0 * 32 ..] of NH heads over NB blocks from b0 of the kv head's V rows (first = the kv head's
// byte offset in a row): acc = fma(p[h][t] * d_v, v_q, acc) in position order, then times inv_sum.
#if defined(STRATA_V16_AVX2)
// AVX2: a v16 is two of the 16 ymm, so NH heads x 2 NB chains of 16 dimensions (3 x 4 on the default
// model) would spill to the stack at every position; instead each block's chains run alone over a span
// of positions (its rows then in L1 for the next block's pass), kept in memory between passes: each
// lane's chain the same fmas in the same position order.
constexpr int64_t k_values_span = 64;   // positions a span (64 rows x NB blocks of 34 bytes)
constexpr int k_values_ymm = 12;        // chains (ymm) held over a pass: + 4 for a block's values
#endif

template <int NH, int NB>
void values_q8(const uint8_t* v, size_t row_bytes, size_t first, int64_t b0, const float* p, int64_t n_pad,
               int64_t n_pos, const float* inv_sum, int64_t hd, float* out) {
#if defined(STRATA_V16_AVX2)
    if constexpr (NB > 1 && 4 * NH * NB > k_values_ymm && 4 * NH <= k_values_ymm) {   // up to 3 heads
        alignas(32) float chains[NH][NB][k_qk] = {};
        const size_t off = first + size_t(b0) * k_q8_block;
        for (int64_t s = 0; s < n_pos; s += k_values_span) {
            const int64_t e = std::min(n_pos, s + k_values_span);
            STRATA_UNROLL
            for (int b = 0; b < NB; b++) {
                v16 acc[NH][2];
                STRATA_UNROLL
                for (int h = 0; h < NH; h++) {
                    acc[h][0] = v16_load(chains[h][b]);
                    acc[h][1] = v16_load(chains[h][b] + 16);
                }
                for (int64_t t = s; t < e; t++) {
                    const uint8_t* row = v + size_t(t) * row_bytes + off;
                    if (b == 0 && t + k_prefetch_rows < n_pos) {
                        prefetch_bytes(row + k_prefetch_rows * row_bytes, NB * k_q8_block);
                    }
                    const uint8_t* blk = row + b * k_q8_block;
                    const float d = half_bits_to_float(blk);
                    const v16 x0 = v16_load_s8(blk + 2), x1 = v16_load_s8(blk + 18);
                    STRATA_UNROLL
                    for (int h = 0; h < NH; h++) {
                        const v16 w = v16_set1(p[h * n_pad + t] * d);
                        acc[h][0] = v16_fma(w, x0, acc[h][0]);
                        acc[h][1] = v16_fma(w, x1, acc[h][1]);
                    }
                }
                STRATA_UNROLL
                for (int h = 0; h < NH; h++) {
                    v16_store(chains[h][b], acc[h][0]);
                    v16_store(chains[h][b] + 16, acc[h][1]);
                }
            }
        }
        for (int h = 0; h < NH; h++) {
            const v16 inv = v16_set1(inv_sum[h]);
            for (int b = 0; b < NB; b++)
                for (int c = 0; c < 2; c++) {
                    v16_store(out + h * hd + (b0 + b) * k_qk + c * 16, v16_mul(v16_load(chains[h][b] + c * 16), inv));
                }
        }
        return;
    }
#endif
    v16 acc[NH][2 * NB];
    for (int h = 0; h < NH; h++)
        for (int c = 0; c < 2 * NB; c++) acc[h][c] = v16_zero();
    const size_t off = first + size_t(b0) * k_q8_block;
    for (int64_t t = 0; t < n_pos; t++) {
        const uint8_t* row = v + size_t(t) * row_bytes + off;
        if (t + k_prefetch_rows < n_pos) prefetch_bytes(row + k_prefetch_rows * row_bytes, NB * k_q8_block);
        for (int b = 0; b < NB; b++) {
            const uint8_t* blk = row + b * k_q8_block;
            const float d = half_bits_to_float(blk);
            const v16 x0 = v16_load_s8(blk + 2), x1 = v16_load_s8(blk + 18);
            for (int h = 0; h < NH; h++) {
                const v16 w = v16_set1(p[h * n_pad + t] * d);
                acc[h][2 * b] = v16_fma(w, x0, acc[h][2 * b]);
                acc[h][2 * b + 1] = v16_fma(w, x1, acc[h][2 * b + 1]);
            }
        }
    }
    for (int h = 0; h < NH; h++) {
        const v16 inv = v16_set1(inv_sum[h]);
        for (int c = 0; c < 2 * NB; c++) v16_store(out + h * hd + b0 * k_qk + c * 16, v16_mul(acc[h][c], inv));
    }
}

template <int NB>
void values_q8_heads(const uint8_t* v, size_t row_bytes, size_t first, int64_t b0, const float* p, int64_t n_pad,
                     int64_t n_pos, const float* inv_sum, int64_t n_heads, int64_t hd, float* out) {
#if defined(STRATA_V16_AVX2)
    // AVX2: of 2+ blocks, heads in groups of 3 (values_q8's spans, their chains in 12 ymm): 4 heads' chains
    // spilled at every position and 2 a pass read V once more for every 2 heads (4-8 a kv head: Llama 3 8B's 4,
    // Qwen 2.5 7B's 7); each head's lanes the same fmas in any grouping
    constexpr int G = NB > 1 ? k_values_ymm / 4 : 4;
#else
    constexpr int G = NB >= 4 ? 2 : 4;   // accumulators G * 2 * NB <= 16 vectors
#endif
    int64_t h = 0;
    for (; h + G <= n_heads; h += G)
        values_q8<G, NB>(v, row_bytes, first, b0, p + h * n_pad, n_pad, n_pos, inv_sum + h, hd, out + h * hd);
    // the last heads in one pass over V too (3 query heads per kv head: one pass, not three)
    const float* ph = p + h * n_pad;
    switch (n_heads - h) {
        case 1: values_q8<1, NB>(v, row_bytes, first, b0, ph, n_pad, n_pos, inv_sum + h, hd, out + h * hd); break;
        case 2: values_q8<2, NB>(v, row_bytes, first, b0, ph, n_pad, n_pos, inv_sum + h, hd, out + h * hd); break;
        case 3: values_q8<3, NB>(v, row_bytes, first, b0, ph, n_pad, n_pos, inv_sum + h, hd, out + h * hd); break;
        default: break;   // 0 (G - 1 <= 3 left)
    }
}

// ---- groups of rows of one context (prefill chunks, q8_0): the query vectors of all the rows' heads
// share each K tile block's loads and each V row's widening. Every chain is the per-row path's (the
// score lane = position, fma over blocks from 0 with the same int32 dot and the same d_k * d_q, then
// one multiply by scale; the value lane = dimension, fma over positions from 0 with p * d_v, then one
// multiply by 1 / sum), and each row's causal tail runs for that row alone, so each query vector gets
// the floats attention_q8_tiled gives its row alone.

// n_q quantized query vectors: qs (n_q, hd) int8, d and bias (n_q, nb)
struct q8_queries {
    const int8_t* qs;
    const float* d;
    const int32_t* bias;
    int64_t hd, nb;
};

#if !defined(STRATA_Q8_DOTS_AVX2)   // AVX2: group_scores_q8_avx2 below
// One block of NQ query vectors (from i0) over whole tiles [0, n_tiles) of kv head g's K:
// query i's scores at scores + i * n_pad, as scores_q8_tiled computes them for its row alone.
template <int NQ>
void group_scores_q8_block(const uint8_t* k, size_t tile_bytes, int64_t g, const q8_queries& qv, int64_t i0,
                           int64_t n_tiles, float scale, float* scores, int64_t n_pad) {
    const v16 vs = v16_set1(scale);
    const int64_t nb = qv.nb;
    const size_t head_bytes = size_t(nb) * k_q8_tile_block;
    for (int64_t tile = 0; tile < n_tiles; tile++) {
        const uint8_t* base = k + size_t(tile) * tile_bytes + size_t(g) * head_bytes;
        if (tile + k_prefetch_tiles < n_tiles) prefetch_bytes(base + k_prefetch_tiles * tile_bytes, head_bytes);
        v16 sf[NQ];
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++) sf[i] = v16_zero();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t* tb = base + b * k_q8_tile_block;
            const v16 dk = v16_load(reinterpret_cast<const uint16_t*>(tb + k_q8_scales));
#if defined(STRATA_Q8_DPBUSD_ASM)
            __m512i kv[8];
            for (int j = 0; j < 8; j++) kv[j] = _mm512_loadu_si512(tb + 64 * j);
            STRATA_UNROLL
            for (int i = 0; i < NQ; i++) {
                const int64_t qi = i0 + i;
                const int8_t* q = qv.qs + qi * qv.hd + b * k_qk;
                __m512i acc = _mm512_set1_epi32(qv.bias[qi * nb + b]);
                for (int j = 0; j < 8; j++) acc = dpbusd_bcast(acc, kv[j], q + 4 * j);
                const v16 dot{_mm512_cvtepi32_ps(acc)};
                sf[i] = v16_fma(dot, v16_mul(dk, v16_set1(qv.d[qi * nb + b])), sf[i]);
            }
#else
            for (int i = 0; i < NQ; i++) {
                const int64_t qi = i0 + i;
                const v16 dot = tile_block_dots(tb, qv.qs + qi * qv.hd + b * k_qk, qv.bias[qi * nb + b]);
                sf[i] = v16_fma(dot, v16_mul(dk, v16_set1(qv.d[qi * nb + b])), sf[i]);
            }
#endif
        }
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++) v16_store(scores + i * n_pad + tile * k_tile, v16_mul(sf[i], vs));
    }
}

#endif

#if defined(STRATA_Q8_DOTS_AVX2)
// AVX2, a group's scores: a span of K tiles widened to int16 once for all the group's query vectors, then
// 2 of them at a time over the span, a block of 16 positions in 4 int32 chains each (8 ymm of chains, 4 of
// K loaded once for both, 1 query word). The portable block kernel's AVX2 form (4 heads, the tile
// widened again for every 4) spilled its chains to the stack inside each block. The same
// int32 dots, floats and order as tile_block_dots_avx2, so the same scores.
constexpr int64_t k_scores_span_bytes = 16 * 1024;   // one span's K tiles of one kv head, widened (L1)

// K tiles [tile0, tile1) of kv head g (nb blocks) as int16: wide (n_tiles, nb, 512), each block's 512
// quants in their tile order (tb[j * 64 + r * 4 + i] -> wide[j * 64 + r * 4 + i])
inline void widen_k_tiles(const uint8_t* k, size_t tile_bytes, int64_t g, int64_t nb, int64_t tile0, int64_t tile1,
                          int64_t n_tiles, int16_t* wide) {
    const size_t head_bytes = size_t(nb) * k_q8_tile_block;
    for (int64_t tile = tile0; tile < tile1; tile++) {
        const uint8_t* base = k + size_t(tile) * tile_bytes + size_t(g) * head_bytes;
        if (tile + k_prefetch_tiles < n_tiles) prefetch_bytes(base + k_prefetch_tiles * tile_bytes, head_bytes);
        int16_t* w = wide + (tile - tile0) * nb * k_q8_scales;
        for (int64_t b = 0; b < nb; b++)
            for (int64_t c = 0; c < int64_t(k_q8_scales); c += 16) {
                const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + b * k_q8_tile_block + c));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + b * k_q8_scales + c), _mm256_cvtepu8_epi16(x));
            }
    }
}

// NQ query vectors (words: their int16 words, rows k_q8_words apart) over the span's tiles [tile0, tile1),
// block by block: a tile's score chains wait in the scores rows between blocks (stored and reloaded
// exactly), so the dot loop holds only its 8 chains, 4 ymm of K (read once for both queries) and a word
template <int NQ>
void group_scores_q8_wide(const uint8_t* k, size_t tile_bytes, int64_t g, const int16_t* wide, const q8_queries& qv,
                          const int64_t* words, int64_t i0, int64_t tile0, int64_t tile1, float scale, float* scores,
                          int64_t n_pad) {
    const v16 vs = v16_set1(scale);
    const int64_t nb = qv.nb;
    const size_t head_bytes = size_t(nb) * k_q8_tile_block;
    for (int64_t b = 0; b < nb; b++) {
        float dq[NQ];
        __m256i bias[NQ];   // in each position's first lane: the pair sums below add it once
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++) {
            dq[i] = qv.d[(i0 + i) * nb + b];
            const int32_t bi = qv.bias[(i0 + i) * nb + b];
            bias[i] = _mm256_setr_epi32(bi, 0, bi, 0, bi, 0, bi, 0);
        }
        for (int64_t tile = tile0; tile < tile1; tile++) {
            const int16_t* wb = wide + ((tile - tile0) * nb + b) * int64_t(k_q8_scales);
            __m256i acc[NQ][4];   // positions 4m .. 4m + 4: (position, dimension pair) lanes
            STRATA_UNROLL
            for (int i = 0; i < NQ; i++)
                STRATA_UNROLL
                for (int m = 0; m < 4; m++) acc[i][m] = bias[i];
            STRATA_UNROLL
            for (int j = 0; j < k_qk / 4; j++) {
                __m256i kj[4];
                STRATA_UNROLL
                for (int m = 0; m < 4; m++) {
                    kj[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + j * 64 + m * 16));
                    keep_in_register(kj[m]);   // one load for both queries, not a memory operand each
                }
                STRATA_UNROLL
                for (int i = 0; i < NQ; i++) {
                    const __m256i qw = _mm256_set1_epi64x(words[i * k_q8_words + b * (k_qk / 4) + j]);
                    STRATA_UNROLL
                    for (int m = 0; m < 4; m++) acc[i][m] = _mm256_add_epi32(acc[i][m], _mm256_madd_epi16(kj[m], qw));
                }
                STRATA_UNROLL
                for (int i = 0; i < NQ; i++)
                    STRATA_UNROLL
                    for (int m = 0; m < 4; m++) keep_in_register(acc[i][m]);
            }
            const v16 dk = v16_load(reinterpret_cast<const uint16_t*>(k + size_t(tile) * tile_bytes + size_t(g) * head_bytes +
                                                                      b * k_q8_tile_block + k_q8_scales));
            STRATA_UNROLL
            for (int i = 0; i < NQ; i++) {   // pairs summed as tile_block_dots_avx2 sums them, bias included
                const __m256i s0 = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[i][0], acc[i][1]), 0xD8);
                const __m256i s1 = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[i][2], acc[i][3]), 0xD8);
                const v16 dot{_mm256_cvtepi32_ps(s0), _mm256_cvtepi32_ps(s1)};
                float* sc = scores + i * n_pad + tile * k_tile;
                const v16 sf = v16_fma(dot, v16_mul(dk, v16_set1(dq[i])), b == 0 ? v16_zero() : v16_load(sc));
                v16_store(sc, b + 1 == nb ? v16_mul(sf, vs) : sf);
            }
        }
    }
}

// All n_q query vectors' scores over tiles [0, n_tiles), span by span
inline void group_scores_q8_avx2(const uint8_t* k, size_t tile_bytes, int64_t g, const q8_queries& qv, int64_t n_q,
                                 int64_t n_tiles, float scale, float* scores, int64_t n_pad) {
    const int64_t nb = qv.nb, span = std::max<int64_t>(1, k_scores_span_bytes / (nb * int64_t(k_q8_scales) * 2));
    thread_local std::vector<int64_t> words;   // (n_q, k_q8_words)
    thread_local std::vector<int16_t> wide;    // (span, nb, 512)
    if (int64_t(words.size()) < n_q * k_q8_words) words.resize(size_t(n_q * k_q8_words));
    if (int64_t(wide.size()) < span * nb * int64_t(k_q8_scales)) wide.resize(size_t(span * nb * k_q8_scales));
    for (int64_t i = 0; i < n_q; i++) widen_query(qv.qs + i * qv.hd, qv.hd, words.data() + i * k_q8_words);
    for (int64_t t0 = 0; t0 < n_tiles; t0 += span) {
        const int64_t t1 = std::min(n_tiles, t0 + span);
        widen_k_tiles(k, tile_bytes, g, nb, t0, t1, n_tiles, wide.data());
        int64_t i = 0;
        for (; i + 2 <= n_q; i += 2) {
            group_scores_q8_wide<2>(k, tile_bytes, g, wide.data(), qv, words.data() + i * k_q8_words, i, t0, t1, scale,
                                    scores + i * n_pad, n_pad);
        }
        if (i < n_q) {
            group_scores_q8_wide<1>(k, tile_bytes, g, wide.data(), qv, words.data() + i * k_q8_words, i, t0, t1, scale,
                                    scores + i * n_pad, n_pad);
        }
    }
}
#else
// Blocks of NQ query vectors, then the rest by halves.
template <int NQ>
void group_scores_q8(const uint8_t* k, size_t tile_bytes, int64_t g, const q8_queries& qv, int64_t i0, int64_t n_q,
                     int64_t n_tiles, float scale, float* scores, int64_t n_pad) {
    int64_t i = 0;
    for (; i + NQ <= n_q; i += NQ)
        group_scores_q8_block<NQ>(k, tile_bytes, g, qv, i0 + i, n_tiles, scale, scores + i * n_pad, n_pad);
    if constexpr (NQ > 1) {
        if (i < n_q) {
            group_scores_q8<NQ / 2>(k, tile_bytes, g, qv, i0 + i, n_q - i, n_tiles, scale, scores + i * n_pad, n_pad);
        }
    }
}
#endif

// The value chains of NQ queries over NB blocks, (NQ, 2 * NB) vectors of 16, to and from acc_mem
// (NQ, NB * 32) floats: a span's chains continue exactly where the last one stored them.
template <int NQ, int NB>
inline void load_chains(const float* acc_mem, v16 (&acc)[NQ][2 * NB]) {
    STRATA_UNROLL
    for (int i = 0; i < NQ; i++)
        STRATA_UNROLL
        for (int c = 0; c < 2 * NB; c++) acc[i][c] = v16_load(acc_mem + (i * 2 * NB + c) * 16);
}

template <int NQ, int NB>
inline void store_chains(const v16 (&acc)[NQ][2 * NB], float* acc_mem) {
    STRATA_UNROLL
    for (int i = 0; i < NQ; i++)
        STRATA_UNROLL
        for (int c = 0; c < 2 * NB; c++) v16_store(acc_mem + (i * 2 * NB + c) * 16, acc[i][c]);
}

// The values' chains of NQ query vectors (p: their weights, rows n_pad apart) over NB blocks of V rows
// [t0, t1) (first: the kv head's byte offset in a row), continued from acc_mem (NQ, NB * 32) and stored
// back exactly, rows prefetched up to pf_end (each query's causal tail, NQ = 1).
template <int NQ, int NB>
void group_values_q8_block(const uint8_t* v, size_t row_bytes, size_t first, const float* p, int64_t n_pad,
                           int64_t t0, int64_t t1, int64_t pf_end, float* acc_mem) {
    v16 acc[NQ][2 * NB];
    load_chains<NQ, NB>(acc_mem, acc);
    for (int64_t t = t0; t < t1; t++) {
        const uint8_t* row = v + size_t(t) * row_bytes + first;
        if (t + k_prefetch_rows < pf_end) prefetch_bytes(row + k_prefetch_rows * row_bytes, NB * k_q8_block);
        STRATA_UNROLL
        for (int b = 0; b < NB; b++) {
            const uint8_t* blk = row + b * k_q8_block;
            const float d = half_bits_to_float(blk);
            const v16 x0 = v16_load_s8(blk + 2), x1 = v16_load_s8(blk + 18);
            STRATA_UNROLL
            for (int i = 0; i < NQ; i++) {
                const v16 w = v16_set1(p[i * n_pad + t] * d);
                acc[i][2 * b] = v16_fma(w, x0, acc[i][2 * b]);
                acc[i][2 * b + 1] = v16_fma(w, x1, acc[i][2 * b + 1]);
            }
        }
    }
    store_chains<NQ, NB>(acc, acc_mem);
}

// w (NQ, NB, n_t): the weights p * d_v of the NQ queries for each block of a span of V rows (ds (NB, n_t) the
// blocks' scales), the per-row path's products (one float multiply each).
template <int NQ, int NB>
void value_weights(const float* ds, int64_t n_t, const float* p, int64_t n_pad, float* w) {
    for (int i = 0; i < NQ; i++)
        for (int b = 0; b < NB; b++) {
            float* wb = w + (i * NB + b) * n_t;
            const float* pi = p + i * n_pad;
            const float* db = ds + b * n_t;
            for (int64_t t = 0; t < n_t; t++) wb[t] = pi[t] * db[t];
        }
}

// The same chains over a span of V rows widened once for the whole group: xs (n_t, NB * 32) the quants
// as floats, ds (NB, n_t) the blocks' scales; the weights p * d_v of the NQ queries are the per-row
// path's products (one float multiply each), computed 16 at a time into w (NQ, NB, n_t) first.
template <int NQ, int NB>
void group_values_q8_wide(const float* xs, const float* ds, int64_t n_t, const float* p, int64_t n_pad, float* w,
                          float* acc_mem) {
    value_weights<NQ, NB>(ds, n_t, p, n_pad, w);
    v16 acc[NQ][2 * NB];
    load_chains<NQ, NB>(acc_mem, acc);
    for (int64_t t = 0; t < n_t; t++) {
        const float* row = xs + t * NB * k_qk;
        STRATA_UNROLL
        for (int b = 0; b < NB; b++) {
            const v16 x0 = v16_load(row + b * k_qk), x1 = v16_load(row + b * k_qk + 16);
            STRATA_UNROLL
            for (int i = 0; i < NQ; i++) {
                const v16 wv = v16_set1(w[(i * NB + b) * n_t + t]);
                acc[i][2 * b] = v16_fma(wv, x0, acc[i][2 * b]);
                acc[i][2 * b + 1] = v16_fma(wv, x1, acc[i][2 * b + 1]);
            }
        }
    }
    store_chains<NQ, NB>(acc, acc_mem);
}

#if defined(STRATA_V16_AVX2)
// AVX2: NQ queries' chains of all NB blocks at once spill (head size 128: 16 ymm of chains for 1 query),
// so here the chains of one block of 32 dimensions for 2 queries a pass (8 ymm), the block's 4 ymm of xs
// loaded once for both; each lane's chain the same fmas in the same position order, block by block.
template <int NQ, int NB>
void group_values_q8_wide_blocks(const float* xs, const float* ds, int64_t n_t, const float* p, int64_t n_pad,
                                 float* w, float* acc_mem) {
    value_weights<NQ, NB>(ds, n_t, p, n_pad, w);
    STRATA_UNROLL
    for (int b = 0; b < NB; b++) {
        v16 acc[NQ][2];
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++) {
            acc[i][0] = v16_load(acc_mem + i * NB * k_qk + b * k_qk);
            acc[i][1] = v16_load(acc_mem + i * NB * k_qk + b * k_qk + 16);
        }
        for (int64_t t = 0; t < n_t; t++) {
            const float* x = xs + t * NB * k_qk + b * k_qk;
            v16 x0 = v16_load(x), x1 = v16_load(x + 16);
            keep_in_register(x0);   // 4 loads a position for both queries, not 8 folded into the fmas
            keep_in_register(x1);
            STRATA_UNROLL
            for (int i = 0; i < NQ; i++) {
                const v16 wv = v16_set1(w[(i * NB + b) * n_t + t]);
                acc[i][0] = v16_fma(wv, x0, acc[i][0]);
                acc[i][1] = v16_fma(wv, x1, acc[i][1]);
            }
        }
        STRATA_UNROLL
        for (int i = 0; i < NQ; i++) {
            v16_store(acc_mem + i * NB * k_qk + b * k_qk, acc[i][0]);
            v16_store(acc_mem + i * NB * k_qk + b * k_qk + 16, acc[i][1]);
        }
    }
}

template <int NB, int NQ>
void group_values_q8_wide_avx2(const float* xs, const float* ds, int64_t n_t, const float* p, int64_t n_pad,
                               int64_t n_q, float* w, float* acc_mem) {
    static_assert(NQ == 2, "pairs, then a last one alone");
    int64_t i = 0;
    for (; i + NQ <= n_q; i += NQ)
        group_values_q8_wide_blocks<NQ, NB>(xs, ds, n_t, p + i * n_pad, n_pad, w, acc_mem + i * NB * k_qk);
    if (i < n_q) group_values_q8_wide_blocks<1, NB>(xs, ds, n_t, p + i * n_pad, n_pad, w, acc_mem + i * NB * k_qk);
}
#endif

template <int NQ, int NB>
void group_values_q8_wide_all(const float* xs, const float* ds, int64_t n_t, const float* p, int64_t n_pad,
                              int64_t n_q, float* w, float* acc_mem) {
    int64_t i = 0;
    for (; i + NQ <= n_q; i += NQ)
        group_values_q8_wide<NQ, NB>(xs, ds, n_t, p + i * n_pad, n_pad, w, acc_mem + i * NB * k_qk);
    if constexpr (NQ > 1) {
        if (i < n_q) {
            group_values_q8_wide_all<NQ / 2, NB>(xs, ds, n_t, p + i * n_pad, n_pad, n_q - i, w,
                                                 acc_mem + i * NB * k_qk);
        }
    }
}

// V rows [t0, t1) of the kv head (first: its byte offset in a row) as floats: xs (n_t, NB * 32), ds (NB, n_t)
template <int NB>
void widen_v_rows(const uint8_t* v, size_t row_bytes, size_t first, int64_t t0, int64_t t1, float* xs, float* ds) {
    const int64_t n_t = t1 - t0;
    for (int64_t t = t0; t < t1; t++) {
        const uint8_t* row = v + size_t(t) * row_bytes + first;
        if (t + k_prefetch_rows < t1) prefetch_bytes(row + k_prefetch_rows * row_bytes, NB * k_q8_block);
        float* xr = xs + (t - t0) * NB * k_qk;
        for (int b = 0; b < NB; b++) {
            const uint8_t* blk = row + b * k_q8_block;
            ds[b * n_t + (t - t0)] = half_bits_to_float(blk);
            v16_store(xr + b * k_qk, v16_load_s8(blk + 2));
            v16_store(xr + b * k_qk + 16, v16_load_s8(blk + 18));
        }
    }
}

#if defined(STRATA_V16_AVX512)
constexpr int k_group_q8_scores = 16;   // score accumulators per block (32 zmm: 8 hold the K tile block)
constexpr int k_group_q8_values = 24;   // value accumulators per block
#else
// [[maybe_unused]]: AVX2 builds score with group_scores_q8_avx2 and weigh values two queries a pass, so
// neither is read there (clang's -Wunused-const-variable, an error in scripts/check-windows-build)
[[maybe_unused]] constexpr int k_group_q8_scores = 4;
[[maybe_unused]] constexpr int k_group_q8_values = 6;
#endif
constexpr int64_t k_group_q8_span_bytes = 32 * 1024;   // one span's V rows of one kv head, widened (L1)

// Positions relative to base, the first position of the earliest window's first tile (0 without a
// window), as in attention-grouped.cpp's attention_rows_tiled_f16: K and V read from there on, each query's
// softmax on its own row's tiles, each value chain from its own window's first position.
template <int NB>
void group_attention_q8(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t q_stride,
                        int64_t g, int64_t n_rep, int64_t n_rows, const int64_t* n_pos_rows, float scale, float* out,
                        int64_t out_stride, float* scratch, int64_t window, const float* sinks) {
    constexpr int HD = NB * k_qk;
    const int64_t n_q = n_rows * n_rep;
    int64_t max_pos = 0, base = n_pos_rows[0], lo = 0, hi = n_pos_rows[0];   // lo, hi absolute for now
    for (int64_t i = 0; i < n_rows; i++) {
        const tile_window w = tile_window_of(n_pos_rows[i], window);
        max_pos = std::max(max_pos, n_pos_rows[i]);
        base = std::min(base, w.base);
        lo = std::max(lo, w.w0);
        hi = std::min(hi, n_pos_rows[i]);
    }
    lo -= base;
    hi -= base;
    if (lo >= hi) lo = hi = 0;   // no span every query sees: each query's chain alone below
    const int64_t n_tiles = (max_pos - base + k_tile - 1) / k_tile, n_pad = n_tiles * k_tile;
    const uint8_t* kw = k + size_t(base) * L.row_bytes;   // tile base / 16 (a tile holds 16 rows' bytes)
    const uint8_t* vw = v + size_t(base) * L.row_bytes;
    thread_local std::vector<int8_t> qs;
    thread_local std::vector<float> qd;
    thread_local std::vector<int32_t> qbias;
    thread_local std::vector<float> inv;
    if (int64_t(qs.size()) < n_q * HD) qs.resize(size_t(n_q * HD));
    if (int64_t(qd.size()) < n_q * NB) qd.resize(size_t(n_q * NB));
    if (int64_t(qbias.size()) < n_q * NB) qbias.resize(size_t(n_q * NB));
    if (int64_t(inv.size()) < n_q) inv.resize(size_t(n_q));
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t h = 0; h < n_rep; h++) {
            const int64_t j = i * n_rep + h;
            quantize_query(q + i * q_stride + h * HD, HD, qs.data() + j * HD, qd.data() + j * NB,
                           qbias.data() + j * NB);
        }
    const q8_queries qv{qs.data(), qd.data(), qbias.data(), HD, NB};
    float* scores = scratch;            // (n_q, n_pad)
    float* acc = scores + n_q * n_pad;  // (n_q, HD)
#if defined(STRATA_Q8_DOTS_AVX2)
    group_scores_q8_avx2(kw, size_t(k_tile) * L.row_bytes, g, qv, n_q, n_tiles, scale, scores, n_pad);
#else
    group_scores_q8<k_group_q8_scores>(kw, size_t(k_tile) * L.row_bytes, g, qv, 0, n_q, n_tiles, scale, scores, n_pad);
#endif
    for (int64_t j = 0; j < n_q; j++) {
        const int64_t pos = n_pos_rows[j / n_rep] - base, w0 = attention_window_start(pos + base, window) - base;
        const int64_t first = w0 / k_tile * k_tile, pad_j = (pos - first + k_tile - 1) / k_tile * k_tile;
        inv[size_t(j)] = softmax_tiled(scores + j * n_pad + first, pos - first, pad_j, w0 - first,
                                       sinks ? sinks[j % n_rep] : -INFINITY);
    }
#if defined(STRATA_V16_AVX2)
    constexpr int NQV = 2;   // group_values_q8_wide_avx2's queries a pass
#else
    constexpr int NQV = k_group_q8_values / (2 * NB) > 0 ? k_group_q8_values / (2 * NB) : 1;
#endif
    const size_t first = size_t(g * NB) * k_q8_block;
    constexpr int64_t span = k_group_q8_span_bytes / int64_t(HD * sizeof(float));   // rows of widened V
    thread_local std::vector<float> wide;   // xs (span, HD), ds (NB, span), w (NQV, NB, span)
    const size_t wide_floats = size_t(span * HD + NB * span + NQV * NB * span);
    if (wide.size() < wide_floats) wide.resize(wide_floats);
    float* xs = wide.data();
    float* ds = xs + span * HD;
    float* w = ds + NB * span;
    std::fill(acc, acc + n_q * HD, 0.0f);
    // each windowed query's head [w0, lo) alone, then the spans every query sees, widened once
    for (int64_t j = 0; j < n_q && lo < hi; j++) {
        const int64_t w0 = attention_window_start(n_pos_rows[j / n_rep], window) - base;
        if (w0 < lo) {
            group_values_q8_block<1, NB>(vw, L.row_bytes, first, scores + j * n_pad, n_pad, w0, lo, 0, acc + j * HD);
        }
    }
    for (int64_t t0 = lo; t0 < hi; t0 += span) {
        const int64_t t1 = std::min(hi, t0 + span);
        widen_v_rows<NB>(vw, L.row_bytes, first, t0, t1, xs, ds);
#if defined(STRATA_V16_AVX2)
        group_values_q8_wide_avx2<NB, NQV>(xs, ds, t1 - t0, scores + t0, n_pad, n_q, w, acc);
#else
        group_values_q8_wide_all<NQV, NB>(xs, ds, t1 - t0, scores + t0, n_pad, n_q, w, acc);
#endif
    }
    // each query vector's own tail [hi, n_pos) (no common span: [w0, n_pos)) alone, then out = acc * inv
    for (int64_t j = 0; j < n_q; j++) {
        const int64_t i = j / n_rep, h = j % n_rep;
        const int64_t t0 = lo < hi ? hi : attention_window_start(n_pos_rows[i], window) - base;
        group_values_q8_block<1, NB>(vw, L.row_bytes, first, scores + j * n_pad, n_pad, t0, n_pos_rows[i] - base, 0,
                                     acc + j * HD);
        const v16 vi = v16_set1(inv[size_t(j)]);
        float* o = out + i * out_stride + h * HD;
        for (int c = 0; c < 2 * NB; c++) v16_store(o + c * 16, v16_mul(v16_load(acc + j * HD + c * 16), vi));
    }
}

}  // namespace

bool attention_q8_grouped(const kv_layout& L) {
    return L.type == TYPE_Q8_0 && L.k_tiled && (L.head_dim == 32 || L.head_dim == 64 || L.head_dim == 128);
}

void attention_rows_q8_tiled(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t q_stride,
                             int64_t g, int64_t n_rep, int64_t n_rows, const int64_t* n_pos, float scale, float* out,
                             int64_t out_stride, float* scratch, int64_t window, const float* sinks) {
    auto run = [&](auto nb) {
        group_attention_q8<decltype(nb)::value>(L, k, v, q, q_stride, g, n_rep, n_rows, n_pos, scale, out, out_stride,
                                                scratch, window, sinks);
    };
    switch (L.head_dim) {
        case 32: run(std::integral_constant<int, 1>()); break;
        case 64: run(std::integral_constant<int, 2>()); break;
        default: run(std::integral_constant<int, 4>()); break;
    }
}

const q8_query& quantize_queries(const float* q, int64_t n_rep, int64_t hd) {
    thread_local q8_query qq;   // 17 KiB
    for (int64_t h = 0; h < n_rep; h++) quantize_query(q + h * hd, hd, qq.qs[h], qq.d[h], qq.bias[h]);
    return qq;
}

void scores_q8_heads(const kv_layout& L, const uint8_t* k, const q8_query& qq, int64_t g, int64_t n_rep,
                     int64_t tile0, int64_t tile1, int64_t n_pad, float scale, float* scores) {
    const int64_t nb = L.head_dim / k_qk;
    const size_t tile_bytes = size_t(k_tile) * L.row_bytes;
    for (int64_t h0 = 0; h0 < n_rep; h0 += 4) {
        switch (std::min<int64_t>(4, n_rep - h0)) {
            case 1: scores_q8_tiled<1>(k, tile_bytes, g, nb, qq, h0, tile0, tile1, scale, scores, n_pad); break;
            case 2: scores_q8_tiled<2>(k, tile_bytes, g, nb, qq, h0, tile0, tile1, scale, scores, n_pad); break;
            case 3: scores_q8_tiled<3>(k, tile_bytes, g, nb, qq, h0, tile0, tile1, scale, scores, n_pad); break;
            default: scores_q8_tiled<4>(k, tile_bytes, g, nb, qq, h0, tile0, tile1, scale, scores, n_pad); break;
        }
    }
}

void values_q8_all(const kv_layout& L, const uint8_t* v, int64_t g, int64_t n_rep, const float* p, int64_t n_pad,
                   int64_t n_pos, const float* inv_sum, float* out) {
    const int64_t hd = L.head_dim, nb = hd / k_qk;
    const size_t first = size_t(g * nb) * k_q8_block;
    switch (nb) {
        case 1: values_q8_heads<1>(v, L.row_bytes, first, 0, p, n_pad, n_pos, inv_sum, n_rep, hd, out); break;
        case 2: values_q8_heads<2>(v, L.row_bytes, first, 0, p, n_pad, n_pos, inv_sum, n_rep, hd, out); break;
        case 4: values_q8_heads<4>(v, L.row_bytes, first, 0, p, n_pad, n_pos, inv_sum, n_rep, hd, out); break;
        default:   // each block's lanes alone: the same chains as above
            for (int64_t b = 0; b < nb; b++)
                values_q8_heads<1>(v, L.row_bytes, first, b, p, n_pad, n_pos, inv_sum, n_rep, hd, out);
    }
}

void attention_q8_tiled(const kv_layout& L, const uint8_t* k, const uint8_t* v, const float* q, int64_t g,
                        int64_t n_rep, int64_t n_pos, float scale, float* out, float* scores, int64_t window,
                        const float* sinks) {
    // the window's tiles of K and rows of V only; scores (n_rep, n_pad) from its first tile
    const tile_window w = tile_window_of(n_pos, window);
    const int64_t n_loc = n_pos - w.base, n_tiles = (n_loc + k_tile - 1) / k_tile, n_pad = n_tiles * k_tile;
    scores_q8_heads(L, k + size_t(w.base) * L.row_bytes, quantize_queries(q, n_rep, L.head_dim), g, n_rep, 0, n_tiles,
                    n_pad, scale, scores);
    float inv_sum[k_max_rep];   // n_rep <= k_max_rep (checked by kv_layout_make's caller)
    for (int64_t h = 0; h < n_rep; h++)
        inv_sum[h] = softmax_tiled(scores + h * n_pad, n_loc, n_pad, w.w0 - w.base, sinks ? sinks[h] : -INFINITY);
    values_q8_all(L, v + size_t(w.w0) * L.row_bytes, g, n_rep, scores + (w.w0 - w.base), n_pad, n_pos - w.w0,
                  inv_sum, out);
}

}  // namespace strata::attn_detail
