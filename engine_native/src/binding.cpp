// pybind11 module strata._engine: the only file that knows about Python. Engine code throws
// std::exception subclasses; pybind11 turns them into Python exceptions (never exit()).
#include <pybind11/pybind11.h>

namespace py = pybind11;

PYBIND11_MODULE(_engine, m) {
    m.doc() = "Strata native engine";
    m.def("build_info", []() {
        py::dict d;
#if defined(__AVX512F__)
        d["simd"] = "avx512";
#elif defined(__AVX2__)
        d["simd"] = "avx2";
#else
        d["simd"] = "scalar";
#endif
        return d;
    });
}
