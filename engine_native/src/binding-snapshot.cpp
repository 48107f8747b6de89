// Snapshot fast path: CRC32 (zlib's polynomial, bit for bit zlib.crc32) and the restorer's
// "check and write chunk" call, both without the GIL: strata._engine.crc32, crc32_impl, crc32_with
// (one named implementation, for parity tests) and Engine.kv_write_checked.
//
// CRC32 paths, fastest available chosen once at load (cpuid under MSVC): "vpclmul" (AVX-512
// VPCLMULQDQ, 4 x 512-bit folding), "pclmul" (SSE PCLMULQDQ, 4 x 128-bit folding), "table" (portable
// slice-by-8). The folds reduce to 16 bytes, finished by the table (no Barrett step). Not here: the
// image format (engine_native/engine/snapshot.py) or the KV copy itself (engine::kv_write).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine.h"
#include "mapped-read-guard.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define STRATA_CRC_X86 1
#define STRATA_CRC_TARGET(features) __attribute__((target(features)))
#include <immintrin.h>
#elif defined(_MSC_VER) && defined(_M_X64)
// MSVC compiles every intrinsic whatever /arch says (no target attribute); cpuid picks the path
#define STRATA_CRC_X86 1
#define STRATA_CRC_TARGET(features)
#include <immintrin.h>
#include <intrin.h>
#endif

namespace py = pybind11;

namespace strata {

namespace {

// ---- portable: slice-by-8 over the reflected polynomial 0xEDB88320

struct crc_tables {
    uint32_t t[8][256];
    crc_tables() {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
            t[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; i++) {
            for (int s = 1; s < 8; s++) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
        }
    }
};

const crc_tables& tables() {
    static const crc_tables tab;
    return tab;
}

// state: the running register (already inverted, zlib's ~crc)
uint32_t crc_table_update(uint32_t state, const uint8_t* p, size_t n) {
    const crc_tables& T = tables();
    while (n && (reinterpret_cast<uintptr_t>(p) & 7)) {
        state = (state >> 8) ^ T.t[0][(state ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= state;   // little-endian hosts (x86, arm64)
        state = T.t[7][lo & 0xFF] ^ T.t[6][(lo >> 8) & 0xFF] ^ T.t[5][(lo >> 16) & 0xFF] ^ T.t[4][lo >> 24] ^
                T.t[3][hi & 0xFF] ^ T.t[2][(hi >> 8) & 0xFF] ^ T.t[1][(hi >> 16) & 0xFF] ^ T.t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) state = (state >> 8) ^ T.t[0][(state ^ *p++) & 0xFF];
    return state;
}

#ifdef STRATA_CRC_X86
// Folding constants for a distance of D bits (reflected domain): low qword x k(D + 32), high qword
// x k(D - 32), k(n) = reflect32(x^n mod P) << 1.
constexpr uint64_t K544 = 0x154442bd4, K480 = 0x1c6e41596;      // D = 512
constexpr uint64_t K160 = 0x1751997d0, K96 = 0xccaa009e;        // D = 128

constexpr uint64_t xpow_mod_reflected(unsigned n) {
    uint64_t r = 1;
    for (unsigned i = 0; i < n; i++) {
        r <<= 1;
        if (r >> 32) r ^= 0x104C11DB7ull;
    }
    uint64_t out = 0;
    for (int b = 0; b < 32; b++) out |= ((r >> b) & 1u) << (31 - b);
    return out << 1;
}
static_assert(xpow_mod_reflected(544) == K544 && xpow_mod_reflected(480) == K480, "fold constants");
static_assert(xpow_mod_reflected(160) == K160 && xpow_mod_reflected(96) == K96, "fold constants");

STRATA_CRC_TARGET("pclmul,sse4.1") inline __m128i fold128(__m128i x, __m128i k) {
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

// The 16 bytes of acc as the message's last 16 bytes: the register after them, from state 0.
STRATA_CRC_TARGET("pclmul,sse4.1") uint32_t finish_fold(__m128i acc) {
    alignas(16) uint8_t b[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(b), acc);
    return crc_table_update(0, b, 16);
}

inline __m128i load128(const uint8_t* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); }

// n >= 64; consumes a multiple of 16 bytes, returns the register; *used = bytes consumed
STRATA_CRC_TARGET("pclmul,sse4.1") uint32_t crc_pclmul_blocks(uint32_t state, const uint8_t* p, size_t n,
                                                                    size_t* used) {
    const __m128i k512 = _mm_set_epi64x(int64_t(K480), int64_t(K544));
    const __m128i k128 = _mm_set_epi64x(int64_t(K96), int64_t(K160));
    __m128i x0 = _mm_xor_si128(load128(p), _mm_cvtsi32_si128(int(state)));
    __m128i x1 = load128(p + 16), x2 = load128(p + 32), x3 = load128(p + 48);
    size_t i = 64;
    for (; i + 64 <= n; i += 64) {
        x0 = _mm_xor_si128(fold128(x0, k512), load128(p + i));
        x1 = _mm_xor_si128(fold128(x1, k512), load128(p + i + 16));
        x2 = _mm_xor_si128(fold128(x2, k512), load128(p + i + 32));
        x3 = _mm_xor_si128(fold128(x3, k512), load128(p + i + 48));
    }
    __m128i acc = _mm_xor_si128(fold128(x0, k128), x1);
    acc = _mm_xor_si128(fold128(acc, k128), x2);
    acc = _mm_xor_si128(fold128(acc, k128), x3);
    for (; i + 16 <= n; i += 16) acc = _mm_xor_si128(fold128(acc, k128), load128(p + i));
    *used = i;
    return finish_fold(acc);
}

STRATA_CRC_TARGET("avx512f,avx512bw,vpclmulqdq,pclmul,sse4.1") inline __m512i load512(const uint8_t* q) {
    return _mm512_loadu_si512(q);
}

STRATA_CRC_TARGET("avx512f,avx512bw,vpclmulqdq,pclmul,sse4.1") inline __m512i fold512(__m512i x, __m512i k) {
    return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11));
}

// n >= 256; 4 x 64-byte accumulators (D = 2048), then one (D = 512), then 16-byte lanes (D = 128)
STRATA_CRC_TARGET("avx512f,avx512bw,vpclmulqdq,pclmul,sse4.1") uint32_t crc_vpclmul_blocks(
    uint32_t state, const uint8_t* p, size_t n, size_t* used) {
    constexpr uint64_t K2080 = xpow_mod_reflected(2080), K2016 = xpow_mod_reflected(2016);
    constexpr uint64_t K416 = xpow_mod_reflected(416), K352 = xpow_mod_reflected(352);
    constexpr uint64_t K288 = xpow_mod_reflected(288), K224 = xpow_mod_reflected(224);
    const __m512i k2048 = _mm512_set_epi64(int64_t(K2016), int64_t(K2080), int64_t(K2016), int64_t(K2080),
                                           int64_t(K2016), int64_t(K2080), int64_t(K2016), int64_t(K2080));
    const __m512i k512 = _mm512_set_epi64(int64_t(K480), int64_t(K544), int64_t(K480), int64_t(K544),
                                          int64_t(K480), int64_t(K544), int64_t(K480), int64_t(K544));
    const __m512i first = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, int(state));
    __m512i x0 = _mm512_xor_si512(load512(p), first);
    __m512i x1 = load512(p + 64), x2 = load512(p + 128), x3 = load512(p + 192);
    size_t i = 256;
    for (; i + 256 <= n; i += 256) {
        x0 = _mm512_xor_si512(fold512(x0, k2048), load512(p + i));
        x1 = _mm512_xor_si512(fold512(x1, k2048), load512(p + i + 64));
        x2 = _mm512_xor_si512(fold512(x2, k2048), load512(p + i + 128));
        x3 = _mm512_xor_si512(fold512(x3, k2048), load512(p + i + 192));
    }
    __m512i acc = _mm512_xor_si512(fold512(x0, k512), x1);
    acc = _mm512_xor_si512(fold512(acc, k512), x2);
    acc = _mm512_xor_si512(fold512(acc, k512), x3);
    for (; i + 64 <= n; i += 64) acc = _mm512_xor_si512(fold512(acc, k512), load512(p + i));
    // four 16-byte lanes, oldest first: fold lane j by (3 - j) * 128 bits onto the last
    alignas(64) uint8_t lanes[64];
    _mm512_store_si512(lanes, acc);
    const __m128i l0 = load128(lanes), l1 = load128(lanes + 16), l2 = load128(lanes + 32), l3 = load128(lanes + 48);
    __m128i r = _mm_xor_si128(fold128(l0, _mm_set_epi64x(int64_t(K352), int64_t(K416))),
                              fold128(l1, _mm_set_epi64x(int64_t(K224), int64_t(K288))));
    r = _mm_xor_si128(r, _mm_xor_si128(fold128(l2, _mm_set_epi64x(int64_t(K96), int64_t(K160))), l3));
    const __m128i k128 = _mm_set_epi64x(int64_t(K96), int64_t(K160));
    for (; i + 16 <= n; i += 16) {
        r = _mm_xor_si128(fold128(r, k128), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
    }
    *used = i;
    return finish_fold(r);
}
#endif

enum class crc_impl { table, pclmul, vpclmul };

uint32_t crc32_with(crc_impl impl, uint32_t crc, const uint8_t* p, size_t n) {
    uint32_t state = ~crc;
#ifdef STRATA_CRC_X86
    size_t used = 0;
    if (impl == crc_impl::vpclmul && n >= 256) {
        state = crc_vpclmul_blocks(state, p, n, &used);
    } else if (impl != crc_impl::table && n >= 64) {
        state = crc_pclmul_blocks(state, p, n, &used);
    }
    p += used;
    n -= used;
#endif
    return ~crc_table_update(state, p, n);
}

crc_impl best_impl() {
#if defined(STRATA_CRC_X86) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw")) {
        return crc_impl::vpclmul;
    }
    if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) return crc_impl::pclmul;
#elif defined(STRATA_CRC_X86)
    // MSVC: cpuid leaf 1 (ECX: PCLMULQDQ bit 1, SSE4.1 bit 19, OSXSAVE bit 27) and leaf 7 (EBX: AVX512F
    // bit 16, AVX512BW bit 30; ECX: VPCLMULQDQ bit 10), and XGETBV: the OS saves the AVX-512 state
    // (XCR0 bits 1, 2, 5, 6, 7), as __builtin_cpu_supports checks
    int r0[4], r1[4], r7[4] = {0, 0, 0, 0};
    __cpuid(r0, 0);
    __cpuid(r1, 1);
    if (r0[0] >= 7) __cpuidex(r7, 7, 0);
    const auto bit = [](int reg, int b) { return ((unsigned(reg) >> b) & 1u) != 0; };
    const bool os_avx512 = bit(r1[2], 27) && (_xgetbv(0) & 0xE6) == 0xE6;
    if (os_avx512 && bit(r7[1], 16) && bit(r7[1], 30) && bit(r7[2], 10)) return crc_impl::vpclmul;
    if (bit(r1[2], 1) && bit(r1[2], 19)) return crc_impl::pclmul;
#endif
    return crc_impl::table;
}

const crc_impl g_impl = best_impl();

const char* impl_name(crc_impl i) {
    return i == crc_impl::vpclmul ? "vpclmul" : i == crc_impl::pclmul ? "pclmul" : "table";
}

crc_impl impl_named(const std::string& name) {
    if (name == "table") return crc_impl::table;
    const crc_impl want = name == "vpclmul" ? crc_impl::vpclmul : name == "pclmul" ? crc_impl::pclmul : crc_impl::table;
    if (name != "vpclmul" && name != "pclmul") {
        throw std::invalid_argument("crc32_with: unknown implementation '" + name + "' (table, pclmul, vpclmul)");
    }
    if (int(want) > int(g_impl)) {
        throw std::invalid_argument(std::string("crc32_with: '") + name + "' is not supported by this CPU (best: " +
                                    impl_name(g_impl) + ")");
    }
    return want;
}

struct byte_view {
    const uint8_t* p;
    size_t n;
};

// The bytes of a C-contiguous buffer (bytes, bytearray, memoryview, mmap, numpy); others refused.
byte_view bytes_of(const py::buffer& data, const char* who) {
    py::buffer_info info = data.request();
    py::ssize_t stride = info.itemsize;
    for (py::ssize_t d = info.ndim - 1; d >= 0; d--) {
        if (info.shape[size_t(d)] > 1 && info.strides[size_t(d)] != stride) {
            throw std::invalid_argument(std::string(who) + ": the buffer must be C-contiguous");
        }
        stride *= info.shape[size_t(d)];
    }
    return {static_cast<const uint8_t*>(info.ptr), size_t(info.size) * size_t(info.itemsize)};
}

constexpr size_t k_release_gil_bytes = 64 << 10;   // below this, releasing the GIL costs more than the CRC

// Raised (strata._engine.MappedReadFault, an OSError) when a guarded read met a page of a memory-mapped
// file that another process truncated (SIGBUS), or whose disk went away (Windows: mapped-read-guard.h).
struct mapped_read_fault : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cut_short(const char* who, const byte_view& b) {
    throw mapped_read_fault(std::string(who) + ": the mapped file was cut short while read (a page of its " +
                            std::to_string(b.n) + " bytes is gone: truncated by another process?)");
}

// The CRC of a buffer that may be a memory map (guarded); false when a page of it is gone.
bool crc32_guarded(crc_impl impl, uint32_t value, const byte_view& b, uint32_t& out) {
    return mapped_read(b.p, b.n, [&] { out = crc32_with(impl, value, b.p, b.n); });
}

uint32_t crc32_buffer(crc_impl impl, const py::buffer& data, uint32_t value) {
    const byte_view b = bytes_of(data, "crc32");   // the buffer (and its owner) stays alive for the call
    uint32_t crc = 0;
    bool ok;
    if (b.n < k_release_gil_bytes) {
        ok = crc32_guarded(impl, value, b, crc);
    } else {
        py::gil_scoped_release nogil;
        ok = crc32_guarded(impl, value, b, crc);
    }
    if (!ok) throw_cut_short("crc32", b);
    return crc;
}

// A copy of a buffer that may be a memory map (guarded), as bytes.
py::bytes copy_guarded(const py::buffer& data) {
    const byte_view b = bytes_of(data, "read_mapped");
    py::bytes out(nullptr, py::ssize_t(b.n));   // uninitialized, filled below (not yet shared)
    char* dst = PyBytes_AS_STRING(out.ptr());
    bool ok;
    {
        py::gil_scoped_release nogil;
        ok = mapped_copy(dst, b.p, b.n);
    }
    if (!ok) throw_cut_short("read_mapped", b);
    return out;
}

}  // namespace

uint32_t crc32_update(uint32_t crc, const uint8_t* p, size_t n) { return crc32_with(g_impl, crc, p, n); }

void register_snapshot_bindings(py::module_& m) {
    m.def("crc32", [](const py::buffer& data, uint32_t value) { return crc32_buffer(g_impl, data, value); },
          py::arg("data"), py::arg("value") = 0,
          "zlib.crc32(data, value), bit for bit, without the GIL for large buffers");
    py::register_exception<mapped_read_fault>(m, "MappedReadFault", PyExc_OSError);
    m.def("read_mapped", &copy_guarded, py::arg("data"),
          "bytes(data), the read guarded: a memory map whose file was truncated under it raises "
          "MappedReadFault (an OSError) instead of killing the process with SIGBUS");
    m.def("crc32_impl", []() { return std::string(impl_name(g_impl)); });
    m.def("crc32_with",
          [](const std::string& impl, const py::buffer& data, uint32_t value) {
              return crc32_buffer(impl_named(impl), data, value);
          },
          py::arg("impl"), py::arg("data"), py::arg("value") = 0);
    // Writes a snapshot chunk's tokens and KV (kv_read's layout) at t0 only when crc32(data) equals
    // expected_crc; returns whether it did. One call without the GIL: the CRC, then the copy while the
    // chunk is still in cache.
    py::class_<engine> cls = py::reinterpret_borrow<py::class_<engine>>(m.attr("Engine"));
    cls.def("kv_write_checked",
            [](engine& e, int c, int64_t t0, const py::object& tokens, const py::buffer& data, uint32_t expected_crc) {
                py::array_t<int32_t, py::array::c_style | py::array::forcecast> a =
                    py::cast<py::array_t<int32_t, py::array::c_style | py::array::forcecast>>(tokens);
                if (a.ndim() != 1) throw engine_error("kv_write_checked: tokens must be a 1-D sequence of ints");
                const byte_view b = bytes_of(data, "kv_write_checked");
                const size_t need = e.kv().bytes_per_token() * size_t(a.size());
                if (b.n != need) {
                    throw engine_error("kv_write_checked: " + std::to_string(a.size()) + " tokens need " +
                                       std::to_string(need) + " KV bytes, got " + std::to_string(b.n));
                }
                const int32_t* t = a.data();
                const int64_t n = int64_t(a.size());
                bool cut = false, ok = false;
                {
                    py::gil_scoped_release nogil;
                    uint32_t crc = 0;
                    if (!crc32_guarded(g_impl, 0, b, crc)) cut = true;
                    else if (crc == expected_crc) cut = !(ok = e.kv_write(c, t0, t, n, b.p, true));
                }
                if (cut) throw_cut_short("kv_write_checked", b);
                return ok;
            },
            py::arg("ctx"), py::arg("t0"), py::arg("tokens"), py::arg("data"), py::arg("expected_crc"));
}

}  // namespace strata
