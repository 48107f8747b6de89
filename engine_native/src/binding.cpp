// pybind11 module strata._engine: the only file that knows about Python. Engine code throws
// std::exception subclasses; pybind11 turns them into Python exceptions (never exit()).
// gguf_error becomes strata._engine.GGUFError (a ValueError).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "gguf.h"
#include "op-times.h"
#ifdef STRATA_WITH_CUDA
#include "cuda-backend.h"
#endif

namespace py = pybind11;

namespace strata { void register_kernel_bindings(py::module_& parent); }  // binding-kernels.cpp
namespace strata { void register_engine_bindings(py::module_& m); }     // binding-engine.cpp
namespace strata { void register_snapshot_bindings(py::module_& m); }   // binding-snapshot.cpp
using namespace strata;

namespace {

py::object number_at(int32_t type, const uint8_t* p) {
    switch (type) {
        case GGUF_TYPE_UINT8: return py::int_(*p);
        case GGUF_TYPE_INT8: return py::int_(int8_t(*p));
        case GGUF_TYPE_BOOL: return py::bool_(*p != 0);
        case GGUF_TYPE_UINT16: { uint16_t v; std::memcpy(&v, p, 2); return py::int_(v); }
        case GGUF_TYPE_INT16: { int16_t v; std::memcpy(&v, p, 2); return py::int_(v); }
        case GGUF_TYPE_UINT32: { uint32_t v; std::memcpy(&v, p, 4); return py::int_(v); }
        case GGUF_TYPE_INT32: { int32_t v; std::memcpy(&v, p, 4); return py::int_(v); }
        case GGUF_TYPE_UINT64: { uint64_t v; std::memcpy(&v, p, 8); return py::int_(v); }
        case GGUF_TYPE_INT64: { int64_t v; std::memcpy(&v, p, 8); return py::int_(v); }
        case GGUF_TYPE_FLOAT32: { float v; std::memcpy(&v, p, 4); return py::float_(v); }
        case GGUF_TYPE_FLOAT64: { double v; std::memcpy(&v, p, 8); return py::float_(v); }
        default: throw gguf_error("unknown GGUF value type " + std::to_string(type));
    }
}

size_t number_size(int32_t type) {
    switch (type) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
        case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
        default: return 8;
    }
}

py::object value_to_py(const gguf_value& v) {
    switch (v.type) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
            return py::int_(v.u64);
        case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
            return py::int_(v.i64);
        case GGUF_TYPE_BOOL: return py::bool_(v.u64 != 0);
        case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: return py::float_(v.f64);
        case GGUF_TYPE_STRING: return py::str(v.str);
        case GGUF_TYPE_ARRAY: {
            py::list out(v.arr_n);
            if (v.arr_type == GGUF_TYPE_STRING) {
                for (size_t i = 0; i < v.arr_str.size(); i++) out[i] = py::str(v.arr_str[i]);
            } else if (v.arr_type == GGUF_TYPE_ARRAY) {
                for (size_t i = 0; i < v.arr_nested.size(); i++) out[i] = value_to_py(v.arr_nested[i]);
            } else {
                size_t es = number_size(v.arr_type);
                for (uint64_t i = 0; i < v.arr_n; i++) out[i] = number_at(v.arr_type, v.arr_data + i * es);
            }
            return std::move(out);
        }
        default: throw gguf_error("unknown GGUF value type " + std::to_string(v.type));
    }
}

struct py_tensor_info {
    std::string name;
    std::vector<int64_t> shape;
    std::string type;
    int32_t type_id;
    uint64_t offset;
    uint64_t n_bytes;
};

}  // namespace

PYBIND11_MODULE(_engine, m) {
    m.doc() = "Strata native engine";
    strata::register_kernel_bindings(m);
    strata::register_engine_bindings(m);
    strata::register_snapshot_bindings(m);   // after Engine: adds kv_write_checked to it
    // op name -> (nanoseconds, calls) since the last reset; empty unless built with STRATA_OP_TIMES
    m.def("op_times", [](bool reset) {
        py::dict d;
        if (!strata::op_times_enabled()) return d;
        for (int k = 0; k < strata::OP_COUNT; k++) {
            d[strata::op_name(k)] = py::make_tuple(strata::op_times().ns[k].load(), strata::op_times().calls[k].load());
        }
        if (reset) strata::op_times_reset();
        return d;
    }, py::arg("reset") = false);
    m.def("build_info", []() {
        py::dict d;
#if defined(__AVX512F__)
        d["simd"] = "avx512";
#elif defined(__AVX2__)
        d["simd"] = "avx2";
#else
        d["simd"] = "scalar";
#endif
#ifdef STRATA_WITH_CUDA
        d["cuda"] = true;
#else
        d["cuda"] = false;
#endif
        return d;
    });
    // Usable CUDA devices as dicts (index, name, compute_capability, vram_total, vram_free); [] without
    // a CUDA build, a driver or a device.
    m.def("cuda_devices", []() {
        py::list out;
#ifdef STRATA_WITH_CUDA
        const int n = cuda_device_count();
        for (int i = 0; i < n; i++) {
            const cuda_device_info d = cuda_device_query(i);
            py::dict r;
            r["index"] = d.index;
            r["name"] = d.name;
            r["compute_capability"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
            r["vram_total"] = d.vram_total;
            r["vram_free"] = d.vram_free;
            out.append(r);
        }
#endif
        return out;
    });
#ifdef STRATA_WITH_CUDA
    // Every CUDA kernel against host loops on small random inputs (engine_native/cuda/cuda-selftest.cu).
    m.def("cuda_selftest", []() {
        std::vector<cuda_selftest_result> r;
        {
            py::gil_scoped_release nogil;
            r = cuda_selftest(0);
        }
        py::list out;
        for (const cuda_selftest_result& c : r) {
            py::dict d;
            d["name"] = c.name;
            d["error"] = c.error;
            d["limit"] = c.limit;
            d["ok"] = c.ok;
            out.append(d);
        }
        return out;
    });
#endif

    py::register_exception<gguf_error>(m, "GGUFError", PyExc_ValueError);

    py::class_<py_tensor_info>(m, "GGUFTensor")
        .def_readonly("name", &py_tensor_info::name)
        .def_readonly("shape", &py_tensor_info::shape)
        .def_readonly("type", &py_tensor_info::type)
        .def_readonly("type_id", &py_tensor_info::type_id)
        .def_readonly("offset", &py_tensor_info::offset)
        .def_readonly("n_bytes", &py_tensor_info::n_bytes)
        .def("__repr__", [](const py_tensor_info& t) {
            std::string s = "GGUFTensor(" + t.name + ", " + t.type + ", [";
            for (size_t i = 0; i < t.shape.size(); i++) s += (i ? ", " : "") + std::to_string(t.shape[i]);
            return s + "], offset=" + std::to_string(t.offset) + ")";
        });

    py::class_<gguf_file, std::shared_ptr<gguf_file>>(m, "GGUFFile")
        .def(py::init([](const std::string& path) {
                 py::gil_scoped_release nogil;
                 return std::make_shared<gguf_file>(path);
             }),
             py::arg("path"))
        .def_property_readonly("path", &gguf_file::path)
        .def_property_readonly("version", &gguf_file::version)
        .def_property_readonly("alignment", &gguf_file::alignment)
        .def_property_readonly("data_offset", &gguf_file::data_offset)
        .def_property_readonly("file_size", &gguf_file::file_size)
        .def("metadata_dict", [](const gguf_file& f) {
            py::dict d;
            for (const auto& kv : f.metadata()) d[py::str(kv.key)] = value_to_py(kv.value);
            return d;
        })
        .def("metadata_types", [](const gguf_file& f) {
            py::dict d;
            for (const auto& kv : f.metadata()) {
                if (kv.value.type == GGUF_TYPE_ARRAY) {
                    d[py::str(kv.key)] = py::make_tuple(kv.value.type, kv.value.arr_type);
                } else {
                    d[py::str(kv.key)] = py::make_tuple(kv.value.type);
                }
            }
            return d;
        })
        .def("tensor_list", [](const gguf_file& f) {
            py::list out;
            for (const auto& t : f.tensors()) {
                const char* tn = gguf_type_name(t.type);
                out.append(py_tensor_info{t.name, t.shape, tn ? tn : "?", t.type, t.offset, t.n_bytes});
            }
            return out;
        });
}
