// Test-only Python binding of the kernels: strata._engine.kernels. Lets tests and benchmarks call
// dequantize_row, quantize_act_row, matvec, matvec_generic and matmul on NumPy arrays, the
// row-interleaved products of quants-packed.h (pack_rows, unpack_rows, matmul_packed), and the
// attention kernels of attention.h over a KV built here (kv_pack, kv_rows, kv_write_rows,
// attention_group, attention_row_group, attention_in_parts).
//
// Not the engine's Python surface (binding.cpp); nothing in the product calls this. Every compute
// call releases the GIL; bad arguments raise ValueError naming the problem.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention.h"
#include "quants-kernels.h"
#include "quants-packed.h"
#include "quants.h"

namespace py = pybind11;

namespace strata {
namespace {

using u8_array = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
using f32_array = py::array_t<float, py::array::c_style | py::array::forcecast>;

struct byte_view {
    const uint8_t* data;
    size_t size;
};

// Any C-contiguous buffer (bytes, bytearray, memoryview, NumPy array) as raw bytes.
byte_view bytes_of(const py::buffer& b, py::buffer_info& keep) {
    keep = b.request();
    py::ssize_t expect = keep.itemsize;
    for (py::ssize_t i = keep.ndim - 1; i >= 0; --i) {
        if (keep.shape[size_t(i)] > 1 && keep.strides[size_t(i)] != expect) {
            throw std::invalid_argument("buffer must be C-contiguous");
        }
        expect *= keep.shape[size_t(i)];
    }
    return {static_cast<const uint8_t*>(keep.ptr), size_t(keep.size) * size_t(keep.itemsize)};
}

// Row count of a weight buffer holding whole rows of n elements of `type`.
int64_t whole_rows(int32_t type, size_t n_bytes, int64_t n, size_t* row_bytes) {
    *row_bytes = type_row_bytes(type, n);
    if (n_bytes % *row_bytes != 0) {
        throw std::invalid_argument("weights hold " + std::to_string(n_bytes) + " bytes, not a whole number of " +
                                    type_name(type) + " rows of " + std::to_string(*row_bytes) + " bytes");
    }
    return int64_t(n_bytes / *row_bytes);
}

void resolve_range(int64_t n_rows, int64_t r0, py::object r1_obj, int64_t* r1) {
    *r1 = r1_obj.is_none() ? n_rows : r1_obj.cast<int64_t>();
    if (r0 < 0 || *r1 < r0 || *r1 > n_rows) {
        throw std::invalid_argument("row range [" + std::to_string(r0) + ", " + std::to_string(*r1) + ") is outside the " +
                                    std::to_string(n_rows) + " rows");
    }
}

// Runs `product(y)` into a (n_tok, r1) buffer indexed by absolute row, without the GIL, and returns
// its [r0, r1) columns as (n_tok, r1 - r0): matmul's Y contract (quants.h) seen from Python.
template <class Product>
py::array_t<float> row_range_columns(int64_t n_tok, int64_t r0, int64_t r1, Product product) {
    py::array_t<float> full({n_tok, r1});
    float* y = full.mutable_data();
    {
        py::gil_scoped_release nogil;
        product(y);
    }
    py::array_t<float> out({n_tok, r1 - r0});
    float* o = out.mutable_data();
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t r = r0; r < r1; ++r) o[t * (r1 - r0) + (r - r0)] = y[t * r1 + r];
    }
    return out;
}

py::array_t<float> py_dequantize_row(int32_t type, const py::buffer& src, int64_t n) {
    py::buffer_info keep;
    const byte_view v = bytes_of(src, keep);
    const size_t need = type_row_bytes(type, n);
    if (v.size < need) {
        throw std::invalid_argument("dequantize_row: " + std::to_string(v.size) + " bytes given, a " + type_name(type) +
                                    " row of " + std::to_string(n) + " needs " + std::to_string(need));
    }
    py::array_t<float> out(n);
    float* dst = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        dequantize_row(type, v.data, dst, n);
    }
    return out;
}

// x: (n,) or (n_tok, n) float32 -> (act_row_bytes,) or (n_tok, act_row_bytes) uint8.
py::array_t<uint8_t> py_quantize_act_row(int32_t weight_type, const f32_array& x) {
    if (x.ndim() != 1 && x.ndim() != 2) throw std::invalid_argument("quantize_act_row: x must be (n,) or (n_tok, n)");
    const int64_t n = x.shape(x.ndim() - 1);
    const int64_t n_tok = x.ndim() == 2 ? x.shape(0) : 1;
    const size_t row = act_row_bytes(weight_type, n);
    py::array_t<uint8_t> out = x.ndim() == 2 ? py::array_t<uint8_t>({n_tok, int64_t(row)}) : py::array_t<uint8_t>(int64_t(row));
    const float* src = x.data();
    uint8_t* dst = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        for (int64_t t = 0; t < n_tok; ++t) quantize_act_row(weight_type, src + t * n, dst + size_t(t) * row, n);
    }
    return out;
}

template <bool GENERIC>
py::array_t<float> py_matvec(int32_t type, const py::buffer& w, const py::buffer& xq, int64_t n, int64_t r0, py::object r1_obj) {
    py::buffer_info keep_w, keep_x;
    const byte_view wv = bytes_of(w, keep_w);
    const byte_view xv = bytes_of(xq, keep_x);
    size_t row_bytes = 0;
    const int64_t n_rows = whole_rows(type, wv.size, n, &row_bytes);
    int64_t r1 = 0;
    resolve_range(n_rows, r0, r1_obj, &r1);
    if (xv.size < act_row_bytes(type, n)) {
        throw std::invalid_argument("xq holds " + std::to_string(xv.size) + " bytes, one activation row needs " +
                                    std::to_string(act_row_bytes(type, n)));
    }
    py::array_t<float> out(r1 - r0);
    float* y = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        if (GENERIC) {
            matvec_generic(type, wv.data, row_bytes, xv.data, y, n, r0, r1);
        } else {
            matvec(type, wv.data, row_bytes, xv.data, y, n, r0, r1);
        }
    }
    return out;
}

// xq: (n_tok, act_row_bytes) uint8 -> (n_tok, r1 - r0) float32.
py::array_t<float> py_matmul(int32_t type, const py::buffer& w, const u8_array& xq, int64_t n, int64_t r0, py::object r1_obj) {
    py::buffer_info keep_w;
    const byte_view wv = bytes_of(w, keep_w);
    size_t row_bytes = 0;
    const int64_t n_rows = whole_rows(type, wv.size, n, &row_bytes);
    int64_t r1 = 0;
    resolve_range(n_rows, r0, r1_obj, &r1);
    const size_t act_row = act_row_bytes(type, n);
    if (xq.ndim() != 2 || size_t(xq.shape(1)) != act_row) {
        throw std::invalid_argument("matmul: xq must be (n_tok, " + std::to_string(act_row) + ") uint8");
    }
    const int64_t n_tok = xq.shape(0);
    return row_range_columns(n_tok, r0, r1, [&](float* y) {
        matmul(type, wv.data, row_bytes, xq.data(), act_row, n_tok, y, r1, n, r0, r1);
    });
}

// (n_rows, row bytes) GGUF weights -> the packed matrix, (packed_bytes,) uint8.
py::array_t<uint8_t> py_pack_rows(int32_t type, const py::buffer& w, int64_t n) {
    py::buffer_info keep_w;
    const byte_view wv = bytes_of(w, keep_w);
    size_t row_bytes = 0;
    const int64_t n_rows = whole_rows(type, wv.size, n, &row_bytes);
    py::array_t<uint8_t> out(py::ssize_t(packed_bytes(type, n_rows, n)));
    uint8_t* dst = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        pack_rows(type, wv.data, row_bytes, n_rows, n, dst, 0, (n_rows + PACK_ROWS - 1) / PACK_ROWS);
    }
    return out;
}

void check_packed_size(int32_t type, size_t have, int64_t n_rows, int64_t n) {
    const size_t need = packed_bytes(type, n_rows, n);
    if (have != need) {
        throw std::invalid_argument("packed weights hold " + std::to_string(have) + " bytes, a packed (" + std::to_string(n_rows) +
                                    ", " + std::to_string(n) + ") matrix is " + std::to_string(need));
    }
}

// packed matrix -> (n_rows * row bytes,) uint8 GGUF rows.
py::array_t<uint8_t> py_unpack_rows(int32_t type, const py::buffer& packed, int64_t n_rows, int64_t n) {
    py::buffer_info keep;
    const byte_view pv = bytes_of(packed, keep);
    check_packed_size(type, pv.size, n_rows, n);
    py::array_t<uint8_t> out(py::ssize_t(size_t(n_rows) * type_row_bytes(type, n)));
    unpack_rows(type, pv.data, n_rows, n, out.mutable_data());
    return out;
}

// xq: (n_tok, act_row_bytes) uint8 from quantize_act_row -> (n_tok, packed_act_row_bytes) uint8.
py::array_t<uint8_t> py_prepare_act_packed(int32_t type, const u8_array& xq, int64_t n) {
    const size_t act_row = act_row_bytes(type, n), prow = packed_act_row_bytes(type, n);
    if (xq.ndim() != 2 || size_t(xq.shape(1)) != act_row) {
        throw std::invalid_argument("prepare_act_packed: xq must be (n_tok, " + std::to_string(act_row) + ") uint8");
    }
    py::array_t<uint8_t> out({py::ssize_t(xq.shape(0)), py::ssize_t(prow)});
    for (py::ssize_t t = 0; t < xq.shape(0); ++t) {
        prepare_act_row_packed(type, xq.data() + size_t(t) * act_row, out.mutable_data() + size_t(t) * prow, n);
    }
    return out;
}

// x: (n_tok, n) float32 -> (n_tok, row_bytes) uint8 by quantize_act_row_packed (the engine's path), rows
// row_bytes apart (default packed_act_row_bytes); given row_bytes, the bytes past each row are left
// ACT_CANARY, so a test sees a quantizer that writes beyond its row.
constexpr uint8_t ACT_CANARY = 0xA5;
py::array_t<uint8_t> py_quantize_act_packed(int32_t type, const f32_array& x, py::object row_bytes_obj) {
    if (x.ndim() != 2) throw std::invalid_argument("quantize_act_packed: x must be (n_tok, n) float32");
    const int64_t n_tok = x.shape(0), n = x.shape(1);
    const size_t prow = packed_act_row_bytes(type, n);
    const int64_t row = row_bytes_obj.is_none() ? int64_t(prow) : row_bytes_obj.cast<int64_t>();
    if (row < int64_t(prow)) {
        throw std::invalid_argument("quantize_act_packed: row_bytes=" + std::to_string(row) + " is less than one prepared row (" +
                                    std::to_string(prow) + " bytes)");
    }
    py::array_t<uint8_t> out({n_tok, row});
    const float* src = x.data();
    uint8_t* dst = out.mutable_data();
    if (!row_bytes_obj.is_none() && n_tok > 0) std::memset(dst, ACT_CANARY, size_t(n_tok * row));   // not in benchmarks' calls
    {
        py::gil_scoped_release nogil;
        for (int64_t t = 0; t < n_tok; ++t) quantize_act_row_packed(type, src + t * n, dst + size_t(t * row), n);
    }
    return out;
}

// xp: (n_tok, packed_act_row_bytes) uint8 -> (n_tok, r1 - r0) float32.
py::array_t<float> py_matmul_packed(int32_t type, const py::buffer& packed, int64_t n_rows, const u8_array& xp, int64_t n,
                                    int64_t r0, py::object r1_obj) {
    py::buffer_info keep;
    const byte_view pv = bytes_of(packed, keep);
    check_packed_size(type, pv.size, n_rows, n);
    int64_t r1 = 0;
    resolve_range(n_rows, r0, r1_obj, &r1);
    const size_t prow = packed_act_row_bytes(type, n);
    if (xp.ndim() != 2 || size_t(xp.shape(1)) != prow) {
        throw std::invalid_argument("matmul_packed: xp must be (n_tok, " + std::to_string(prow) + ") uint8");
    }
    const int64_t n_tok = xp.shape(0);
    return row_range_columns(n_tok, r0, r1, [&](float* y) {
        matmul_packed(type, pv.data, n_rows, xp.data(), prow, n_tok, y, r1, n, r0, r1);
    });
}

// XOR of every 64-byte line: a plain read of the buffer with the kernels' software prefetch
// (16 KiB ahead), for the memory-bandwidth figure.
uint64_t stream_read(const py::buffer& b) {
    py::buffer_info keep;
    const byte_view v = bytes_of(b, keep);
    uint64_t r = 0;
    {
        py::gil_scoped_release nogil;
#if defined(__GNUC__)
        typedef uint64_t line_t __attribute__((vector_size(64), aligned(1)));   // one cache line
        const size_t n_lines = v.size / 64;
        line_t acc = {0, 0, 0, 0, 0, 0, 0, 0};
        for (size_t i = 0; i < n_lines; ++i) {
            __builtin_prefetch(v.data + (i + 256) * 64, 0, 3);
            acc ^= *reinterpret_cast<const line_t*>(v.data + i * 64);
        }
        for (int k = 0; k < 8; ++k) r ^= acc[k];
#else
        for (size_t i = 0; i + 8 <= v.size; i += 8) {
            uint64_t word;
            std::memcpy(&word, v.data + i, 8);
            r ^= word;
        }
#endif
    }
    return r;
}

// (multiply-adds done, CPU seconds of this process) of n_iter rounds of register-only int8 dot
// instructions. CPU time, not wall time, so that other processes on a shared machine do not count.
py::tuple int8_peak_probe(int64_t n_iter) {
    int32_t sink = 0;
    int64_t macs = 0;
    double seconds = 0;
    {
        py::gil_scoped_release nogil;
        const std::clock_t t0 = std::clock();
        macs = simd_int8_probe(n_iter, &sink);
        seconds = double(std::clock() - t0) / CLOCKS_PER_SEC;
    }
    return py::make_tuple(macs, seconds);
}


// ---- attention (attention.h) over one layer's KV of (n_head_kv, head_dim) heads, as kv_layout_make
// gives it for kv_type (TYPE_F16, TYPE_F32 or TYPE_Q8_0); buffers are uint8 arrays of the layout's bytes.

// values_in_keys: kv_layout::v_in_k (the V buffer empty, the values read from K)
kv_layout layout_of(int32_t kv_type, int64_t n_head_kv, int64_t head_dim, bool values_in_keys = false) {
    if (n_head_kv < 1 || head_dim < 1) {
        throw std::invalid_argument("kv layout: n_head_kv " + std::to_string(n_head_kv) + " and head_dim " +
                                    std::to_string(head_dim) + " must be positive");
    }
    return kv_layout_make(kv_type, 1, n_head_kv, head_dim, values_in_keys);
}

// The most positions any buffer of this layout may hold: 2^62 bytes' worth (a larger count would make the
// byte counts below overflow and wrap around to a small size that passes the checks).
int64_t max_kv_positions(const kv_layout& L) { return int64_t((uint64_t(1) << 62) / L.row_bytes); }

void check_kv_bytes(const kv_layout& L, const byte_view& b, bool is_k, int64_t n, const char* who) {
    if (n > max_kv_positions(L)) {
        throw std::invalid_argument(std::string(who) + ": positions [0, " + std::to_string(n) +
                                    ") need more than 2^62 bytes");
    }
    const size_t need = kv_prefix_bytes(L, is_k, n);
    if (b.size < need) {
        throw std::invalid_argument(std::string(who) + ": the " + (is_k ? "K" : "V") + " buffer holds " +
                                    std::to_string(b.size) + " bytes, positions [0, " + std::to_string(n) +
                                    ") need " + std::to_string(need));
    }
}

// k, v: (n, kv_dim) float32 -> (K buffer, V buffer) uint8 for `capacity` positions (default n)
py::tuple py_kv_pack(int32_t kv_type, int64_t n_head_kv, int64_t head_dim, const f32_array& k, const f32_array& v,
                     py::object capacity_obj, bool values_in_keys) {
    const kv_layout L = layout_of(kv_type, n_head_kv, head_dim, values_in_keys);
    if (k.ndim() != 2 || k.shape(1) != L.kv_dim || v.ndim() != 2 || v.shape(0) != k.shape(0) || v.shape(1) != L.kv_dim) {
        throw std::invalid_argument("kv_pack: k and v must both be (n, " + std::to_string(L.kv_dim) + ") float32");
    }
    const int64_t n = k.shape(0);
    const int64_t capacity = capacity_obj.is_none() ? n : capacity_obj.cast<int64_t>();
    if (capacity > max_kv_positions(L)) {
        throw std::invalid_argument("kv_pack: capacity " + std::to_string(capacity) + " is too large (more than 2^62 bytes)");
    }
    if (capacity < n) {
        throw std::invalid_argument("kv_pack: capacity " + std::to_string(capacity) + " is below the " +
                                    std::to_string(n) + " positions given");
    }
    py::array_t<uint8_t> kb(py::ssize_t(L.k_bytes(capacity))), vb(py::ssize_t(L.v_bytes(capacity)));
    std::memset(kb.mutable_data(), 0, size_t(kb.size()));
    std::memset(vb.mutable_data(), 0, size_t(vb.size()));
    for (int64_t t = 0; t < n; ++t) {
        kv_store(L, kb.mutable_data(), vb.mutable_data(), t, k.data() + t * L.kv_dim, v.data() + t * L.kv_dim);
    }
    return py::make_tuple(kb, vb);
}

// Positions [t0, t1) of a K (is_k) or V buffer as (t1 - t0, row_bytes) uint8 rows (kv_get_rows)
py::array_t<uint8_t> py_kv_rows(int32_t kv_type, int64_t n_head_kv, int64_t head_dim, const py::buffer& buf, bool is_k,
                                int64_t t0, int64_t t1) {
    const kv_layout L = layout_of(kv_type, n_head_kv, head_dim);
    py::buffer_info keep;
    const byte_view b = bytes_of(buf, keep);
    if (t0 < 0 || t1 < t0) throw std::invalid_argument("kv_rows: [" + std::to_string(t0) + ", " + std::to_string(t1) + ") is not a range");
    check_kv_bytes(L, b, is_k, t1, "kv_rows");
    py::array_t<uint8_t> out({py::ssize_t(t1 - t0), py::ssize_t(L.row_bytes)});
    kv_get_rows(L, b.data, is_k, t0, t1, out.mutable_data());
    return out;
}

// rows (n, row_bytes) uint8 into positions [t0, t0 + n) of a K (is_k) or V buffer, in place (kv_set_rows)
void py_kv_write_rows(int32_t kv_type, int64_t n_head_kv, int64_t head_dim, py::array buf, bool is_k,
                      int64_t t0, const u8_array& rows) {
    const kv_layout L = layout_of(kv_type, n_head_kv, head_dim);
    if (rows.ndim() != 2 || size_t(rows.shape(1)) != L.row_bytes) {
        throw std::invalid_argument("kv_write_rows: rows must be (n, " + std::to_string(L.row_bytes) + ") uint8");
    }
    if (!buf.dtype().is(py::dtype::of<uint8_t>()) || !(buf.flags() & py::array::c_style) || !buf.writeable()) {
        throw std::invalid_argument("kv_write_rows: the buffer must be a writable C-contiguous uint8 array");
    }
    const int64_t room = max_kv_positions(L);
    const int64_t t1 = t0 >= 0 && t0 <= room ? t0 + rows.shape(0) : t0;   // no overflow past the room's end
    if (t0 < 0 || t0 > room || t1 > room || size_t(buf.size()) < kv_prefix_bytes(L, is_k, t1)) {
        throw std::invalid_argument("kv_write_rows: " + std::to_string(rows.shape(0)) + " rows at position " +
                                    std::to_string(t0) + " are outside the buffer's " + std::to_string(buf.size()) +
                                    " bytes");
    }
    kv_set_rows(L, static_cast<uint8_t*>(buf.mutable_data()), is_k, t0, t1, rows.data());
}

// The arguments every attention call checks: the layout, kv head g, the query heads per kv head, the
// window and the sinks ((n_rep,) float32 or None, not NaN); returns the sinks' pointer or nullptr.
struct attention_args {
    kv_layout L;
    byte_view k, v;
    py::buffer_info keep_k, keep_v;
    std::vector<float> sinks;
    const float* sinks_ptr() const { return sinks.empty() ? nullptr : sinks.data(); }
};

void read_attention_args(attention_args& a, int32_t kv_type, int64_t n_head_kv, int64_t head_dim, const py::buffer& k,
                         const py::buffer& v, int64_t g, int64_t n_rep, int64_t max_pos, int64_t window,
                         const py::object& sinks, const char* who, bool values_in_keys = false) {
    a.L = layout_of(kv_type, n_head_kv, head_dim, values_in_keys);
    a.k = bytes_of(k, a.keep_k);
    a.v = values_in_keys ? a.k : bytes_of(v, a.keep_v);   // V at K, as the engine's contexts have it
    if (g < 0 || g >= n_head_kv) {
        throw std::invalid_argument(std::string(who) + ": kv head " + std::to_string(g) + " is outside [0, " +
                                    std::to_string(n_head_kv) + ")");
    }
    if (n_rep < 1 || n_rep > 64) {
        throw std::invalid_argument(std::string(who) + ": " + std::to_string(n_rep) + " query heads per kv head (1 to 64)");
    }
    if (window < 0) throw std::invalid_argument(std::string(who) + ": window " + std::to_string(window) + " is negative");
    check_kv_bytes(a.L, a.k, true, max_pos, who);
    check_kv_bytes(a.L, a.v, false, max_pos, who);
    if (sinks.is_none()) return;
    const f32_array s = sinks.cast<f32_array>();
    if (s.ndim() != 1 || s.shape(0) != n_rep) {
        throw std::invalid_argument(std::string(who) + ": sinks must be (" + std::to_string(n_rep) + ",) float32, one per query head");
    }
    a.sinks.assign(s.data(), s.data() + n_rep);
    for (float x : a.sinks) {
        if (std::isnan(x)) throw std::invalid_argument(std::string(who) + ": a sink logit is NaN");
    }
}

// Floats past a kernel's scratch, filled with a canary: a write past the promised size shows as a
// RuntimeError instead of passing unseen.
constexpr size_t k_scratch_guard = 64;
constexpr float k_scratch_canary = 1234.5f;
void check_scratch_guard(const std::vector<float>& scratch, size_t used, const char* who) {
    for (size_t i = used; i < scratch.size(); ++i) {
        if (scratch[i] != k_scratch_canary) {
            throw std::runtime_error(std::string(who) + " wrote past its scratch of " + std::to_string(used) + " floats");
        }
    }
}

void check_n_pos(int64_t n_pos, const char* who) {
    if (n_pos < 1) throw std::invalid_argument(std::string(who) + ": n_pos " + std::to_string(n_pos) + " (at least 1)");
}

// q: (n_rep, head_dim) float32 -> (n_rep, head_dim): attention_group for kv head g over [0, n_pos)
py::array_t<float> py_attention_group(int32_t kv_type, int64_t n_head_kv, int64_t head_dim, const py::buffer& k,
                                      const py::buffer& v, const f32_array& q, int64_t g, int64_t n_pos, float scale,
                                      int64_t window, const py::object& sinks, bool values_in_keys) {
    if (q.ndim() != 2 || q.shape(1) != head_dim) {
        throw std::invalid_argument("attention_group: q must be (n_rep, " + std::to_string(head_dim) + ") float32");
    }
    const int64_t n_rep = q.shape(0);
    check_n_pos(n_pos, "attention_group");
    attention_args a;
    read_attention_args(a, kv_type, n_head_kv, head_dim, k, v, g, n_rep, n_pos, window, sinks, "attention_group",
                        values_in_keys);
    py::array_t<float> out({n_rep, head_dim});
    // the scratch attention.h promises is enough (a window's share), then a guard that must stay intact
    const int64_t span = window > 0 && window < n_pos ? std::min(n_pos, window + k_kv_tile - 1) : n_pos;
    const size_t n_scratch = size_t(attention_scratch_floats(n_rep, span));
    std::vector<float> scores(n_scratch + k_scratch_guard, k_scratch_canary);
    float* o = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        attention_group(a.L, a.k.data, a.v.data, q.data(), g, n_rep, n_pos, scale, o, scores.data(), window,
                        a.sinks_ptr());
    }
    check_scratch_guard(scores, n_scratch, "attention_group");
    return out;
}

// q: (n_rows, n_rep, head_dim) float32, n_pos: (n_rows,) -> (n_rows, n_rep, head_dim): attention_row_group
py::array_t<float> py_attention_row_group(int32_t kv_type, int64_t n_head_kv, int64_t head_dim, const py::buffer& k,
                                          const py::buffer& v, const f32_array& q, int64_t g,
                                          const std::vector<int64_t>& n_pos, float scale, int64_t window,
                                          const py::object& sinks) {
    if (q.ndim() != 3 || q.shape(2) != head_dim || q.shape(0) != int64_t(n_pos.size())) {
        throw std::invalid_argument("attention_row_group: q must be (n_rows, n_rep, " + std::to_string(head_dim) +
                                    ") float32 with one n_pos per row");
    }
    const int64_t n_rows = q.shape(0), n_rep = q.shape(1);
    int64_t max_pos = 0;
    for (int64_t p : n_pos) {
        check_n_pos(p, "attention_row_group");
        max_pos = std::max(max_pos, p);
    }
    attention_args a;
    read_attention_args(a, kv_type, n_head_kv, head_dim, k, v, g, n_rep, max_pos, window, sinks, "attention_row_group");
    py::array_t<float> out({n_rows, n_rep, head_dim});
    const size_t floats = size_t(std::max(attention_rows_scratch_floats(n_rep, n_rows, max_pos),
                                          attention_scratch_floats(n_rep, max_pos)));
    std::vector<float> scratch(floats + k_scratch_guard, k_scratch_canary);
    float* o = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        attention_row_group(a.L, a.k.data, a.v.data, q.data(), n_rep * head_dim, g, n_rep, n_rows, n_pos.data(), scale,
                            o, n_rep * head_dim, scratch.data(), window, a.sinks_ptr());
    }
    check_scratch_guard(scratch, floats, "attention_row_group");
    return out;
}

// One row in parts as forward.cpp's attention_parts runs them (no window): the scores of the tiles cut
// into n_parts ranges, each query head's softmax (with its sink), the values by 32 dimensions.
// q: (n_rep, head_dim) -> (n_rep, head_dim). Only where attention_split_ok.
py::array_t<float> py_attention_in_parts(int32_t kv_type, int64_t n_head_kv, int64_t head_dim, const py::buffer& k,
                                         const py::buffer& v, const f32_array& q, int64_t g, int64_t n_pos,
                                         float scale, const py::object& sinks, int64_t n_parts, bool values_in_keys) {
    if (q.ndim() != 2 || q.shape(1) != head_dim) {
        throw std::invalid_argument("attention_in_parts: q must be (n_rep, " + std::to_string(head_dim) + ") float32");
    }
    const int64_t n_rep = q.shape(0);
    check_n_pos(n_pos, "attention_in_parts");
    if (n_parts < 1) throw std::invalid_argument("attention_in_parts: n_parts " + std::to_string(n_parts) + " (at least 1)");
    attention_args a;
    read_attention_args(a, kv_type, n_head_kv, head_dim, k, v, g, n_rep, n_pos, 0, sinks, "attention_in_parts",
                        values_in_keys);
    if (!attention_split_ok(a.L)) {
        throw std::invalid_argument("attention_in_parts: this layout is not split into parts (attention_split_ok)");
    }
    const int64_t n_tiles = (n_pos + k_kv_tile - 1) / k_kv_tile, n_pad = n_tiles * k_kv_tile;
    py::array_t<float> out({n_rep, head_dim});
    std::vector<float> scores(static_cast<size_t>(n_rep * n_pad)), inv(static_cast<size_t>(n_rep));
    float* o = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        for (int64_t p = 0; p < n_parts; ++p) {
            attention_scores_part(a.L, a.k.data, q.data(), g, n_rep, n_tiles * p / n_parts, n_tiles * (p + 1) / n_parts,
                                  n_pad, scale, scores.data());
        }
        for (int64_t h = 0; h < n_rep; ++h) {
            inv[size_t(h)] = attention_softmax_part(scores.data() + h * n_pad, n_pos, n_pad,
                                                    a.sinks.empty() ? -INFINITY : a.sinks[size_t(h)]);
        }
        for (int64_t d0 = 0; d0 < head_dim; d0 += k_attention_split_dims) {
            attention_values_part(a.L, a.v.data, scores.data(), g, n_rep, n_pos, n_pad, inv.data(), d0, o);
        }
    }
    return out;
}

// q: (n_rep, head_dim) float32 -> (n_rep, n_pad): attention_scores_part over all of [0, n_pos)'s tiles of kv head
// g (a decode step's K scores alone, scale applied, no softmax), computed `repeat` times: a benchmark's calls
// without Python between them. Only where attention_split_ok.
py::array_t<float> py_attention_scores(int32_t kv_type, int64_t n_head_kv, int64_t head_dim, const py::buffer& k,
                                       const f32_array& q, int64_t g, int64_t n_pos, float scale, int64_t repeat) {
    if (q.ndim() != 2 || q.shape(1) != head_dim) {
        throw std::invalid_argument("attention_scores: q must be (n_rep, " + std::to_string(head_dim) + ") float32");
    }
    const int64_t n_rep = q.shape(0);
    check_n_pos(n_pos, "attention_scores");
    if (repeat < 1) throw std::invalid_argument("attention_scores: repeat " + std::to_string(repeat) + " (at least 1)");
    const kv_layout L = layout_of(kv_type, n_head_kv, head_dim);
    py::buffer_info keep;
    const byte_view kb = bytes_of(k, keep);
    if (g < 0 || g >= n_head_kv) {
        throw std::invalid_argument("attention_scores: kv head " + std::to_string(g) + " is outside [0, " +
                                    std::to_string(n_head_kv) + ")");
    }
    if (n_rep < 1 || n_rep > 64) {
        throw std::invalid_argument("attention_scores: " + std::to_string(n_rep) + " query heads per kv head (1 to 64)");
    }
    check_kv_bytes(L, kb, true, n_pos, "attention_scores");
    if (!attention_split_ok(L)) {
        throw std::invalid_argument("attention_scores: this layout is not split into parts (attention_split_ok)");
    }
    const int64_t n_tiles = (n_pos + k_kv_tile - 1) / k_kv_tile, n_pad = n_tiles * k_kv_tile;
    py::array_t<float> out({n_rep, n_pad});
    float* o = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        for (int64_t r = 0; r < repeat; ++r) {
            attention_scores_part(L, kb.data, q.data(), g, n_rep, 0, n_tiles, n_pad, scale, o);
        }
    }
    return out;
}

}  // namespace

void register_kernel_bindings(py::module_& parent) {
    py::module_ k = parent.def_submodule("kernels", "Test-only access to the quantized kernels (quants.h)");
    k.def("simd_name", []() { return std::string(simd_name()); });
    k.def("type_name", [](int32_t type) -> py::object {
        const char* s = type_name(type);
        return s ? py::object(py::str(s)) : py::object(py::none());
    });
    k.def("type_supported", &type_supported);
    k.def("type_block_size", &type_block_size);
    k.def("type_row_bytes", &type_row_bytes, py::arg("type"), py::arg("n"));
    k.def("act_type_for", &act_type_for);
    k.def("act_row_bytes", &act_row_bytes, py::arg("weight_type"), py::arg("n"));
    k.def("dequantize_row", &py_dequantize_row, py::arg("type"), py::arg("data"), py::arg("n"));
    k.def("quantize_act_row", &py_quantize_act_row, py::arg("weight_type"), py::arg("x"));
    k.def("matvec", &py_matvec<false>, py::arg("type"), py::arg("w"), py::arg("xq"), py::arg("n"), py::arg("r0") = 0,
          py::arg("r1") = py::none());
    k.def("matvec_generic", &py_matvec<true>, py::arg("type"), py::arg("w"), py::arg("xq"), py::arg("n"),
          py::arg("r0") = 0, py::arg("r1") = py::none());
    k.def("matmul", &py_matmul, py::arg("type"), py::arg("w"), py::arg("xq"), py::arg("n"), py::arg("r0") = 0,
          py::arg("r1") = py::none());
    k.def("packed_supported", &packed_supported, py::arg("type"));
    k.def("packed_bytes", &packed_bytes, py::arg("type"), py::arg("n_rows"), py::arg("n"));
    k.def("pack_rows", &py_pack_rows, py::arg("type"), py::arg("w"), py::arg("n"));
    k.def("unpack_rows", &py_unpack_rows, py::arg("type"), py::arg("packed"), py::arg("n_rows"), py::arg("n"));
    k.def("prepare_act_packed", &py_prepare_act_packed, py::arg("type"), py::arg("xq"), py::arg("n"));
    k.def("quantize_act_packed", &py_quantize_act_packed, py::arg("type"), py::arg("x"), py::arg("row_bytes") = py::none());
    k.def("matmul_packed", &py_matmul_packed, py::arg("type"), py::arg("packed"), py::arg("n_rows"), py::arg("xp"),
          py::arg("n"), py::arg("r0") = 0, py::arg("r1") = py::none());
    k.def("stream_read", &stream_read, py::arg("buffer"));
    k.def("kv_pack", &py_kv_pack, py::arg("kv_type"), py::arg("n_head_kv"), py::arg("head_dim"), py::arg("k"),
          py::arg("v"), py::arg("capacity") = py::none(), py::arg("values_in_keys") = false);
    k.def("kv_rows", &py_kv_rows, py::arg("kv_type"), py::arg("n_head_kv"), py::arg("head_dim"), py::arg("buf"),
          py::arg("is_k"), py::arg("t0"), py::arg("t1"));
    k.def("kv_write_rows", &py_kv_write_rows, py::arg("kv_type"), py::arg("n_head_kv"), py::arg("head_dim"),
          py::arg("buf"), py::arg("is_k"), py::arg("t0"), py::arg("rows"));
    k.def("attention_rows_grouped", [](int32_t kv_type, int64_t n_head_kv, int64_t head_dim) {
        return attention_rows_grouped(layout_of(kv_type, n_head_kv, head_dim));
    }, py::arg("kv_type"), py::arg("n_head_kv"), py::arg("head_dim"));
    k.def("attention_group", &py_attention_group, py::arg("kv_type"), py::arg("n_head_kv"), py::arg("head_dim"),
          py::arg("k"), py::arg("v"), py::arg("q"), py::arg("g"), py::arg("n_pos"), py::arg("scale"),
          py::arg("window") = 0, py::arg("sinks") = py::none(), py::arg("values_in_keys") = false);
    k.def("attention_row_group", &py_attention_row_group, py::arg("kv_type"), py::arg("n_head_kv"),
          py::arg("head_dim"), py::arg("k"), py::arg("v"), py::arg("q"), py::arg("g"), py::arg("n_pos"),
          py::arg("scale"), py::arg("window") = 0, py::arg("sinks") = py::none());
    k.def("attention_in_parts", &py_attention_in_parts, py::arg("kv_type"), py::arg("n_head_kv"), py::arg("head_dim"),
          py::arg("k"), py::arg("v"), py::arg("q"), py::arg("g"), py::arg("n_pos"), py::arg("scale"),
          py::arg("sinks") = py::none(), py::arg("n_parts") = 3, py::arg("values_in_keys") = false);
    k.def("attention_scores", &py_attention_scores, py::arg("kv_type"), py::arg("n_head_kv"), py::arg("head_dim"),
          py::arg("k"), py::arg("q"), py::arg("g"), py::arg("n_pos"), py::arg("scale"), py::arg("repeat") = 1);
    k.def("int8_peak_probe", &int8_peak_probe, py::arg("n_iter"));
    k.def("fp32_to_fp16", [](const f32_array& x) {
        py::array_t<uint16_t> out(x.size());
        for (py::ssize_t i = 0; i < x.size(); ++i) out.mutable_data()[i] = fp32_to_fp16(x.data()[i]);
        return out;
    });
    k.def("fp16_to_fp32", [](const py::array_t<uint16_t, py::array::c_style | py::array::forcecast>& h) {
        py::array_t<float> out(h.size());
        for (py::ssize_t i = 0; i < h.size(); ++i) out.mutable_data()[i] = fp16_to_fp32(h.data()[i]);
        return out;
    });
}

}  // namespace strata
