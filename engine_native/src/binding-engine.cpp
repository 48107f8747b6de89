// Python binding of the engine: strata._engine.Engine (wrapped by strata.engine.Engine).
//
// Not the public surface (engine_native/engine/__init__.py is); this file converts arguments and
// releases the GIL around every call that computes or copies. engine_error / model_error become
// ValueError with the engine's message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "engine.h"
#include "quants-packed.h"
#include "quants.h"

namespace py = pybind11;

namespace strata {

namespace {

using i32_array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

std::vector<int32_t> token_vector(const py::object& tokens) {
    i32_array a = py::cast<i32_array>(tokens);
    if (a.ndim() != 1) throw engine_error("tokens must be a 1-D sequence of ints");
    return std::vector<int32_t>(a.data(), a.data() + a.size());
}

// Prompt pieces (sequences of token ids) concatenated into flat, with each one's length in lens.
void flatten_pieces(const std::vector<py::object>& pieces, std::vector<int32_t>& flat, std::vector<int64_t>& lens) {
    for (const auto& p : pieces) {
        std::vector<int32_t> t = token_vector(p);
        lens.push_back(int64_t(t.size()));
        flat.insert(flat.end(), t.begin(), t.end());
    }
}

}  // namespace

void register_engine_bindings(py::module_& m) {
    auto& engine_error_type = py::register_exception<engine_error>(m, "EngineError", PyExc_ValueError);
    // registered after EngineError, so tried first: a subclass of it
    py::register_exception<engine_interrupted>(m, "EngineInterrupted", engine_error_type.ptr());
    py::register_exception<model_error>(m, "ModelError", PyExc_ValueError);
    // Whether this engine can run the file: the model is read (memory-mapped; architecture, shapes and
    // tensor types checked) but nothing is allocated or computed. ModelError / GGUFError otherwise.
    m.def("check_model", [](const std::string& path) {
        std::unique_ptr<model> mdl;
        {
            py::gil_scoped_release nogil;
            mdl = model_load(std::make_shared<gguf_file>(path, /*random_access=*/true));   // no read-ahead
        }
        py::dict d;
        d["arch"] = mdl->hp.arch;
        d["n_layer"] = mdl->hp.n_layer;
        d["n_expert"] = mdl->hp.n_expert;
        d["n_expert_used"] = mdl->hp.n_expert_used;
        return d;
    }, py::arg("path"));

    py::class_<engine>(m, "Engine")
        .def(py::init([](const std::string& path, int64_t n_ctx, int n_slots, int n_groups, int64_t slot_ctx,
                         int n_threads, const std::string& kv_type, int64_t max_chunk, const std::string& backend,
                         bool pack_weights) {
                 engine_params p;
                 p.n_ctx = n_ctx;
                 p.n_slots = n_slots;
                 p.n_groups = n_groups;
                 p.slot_ctx = slot_ctx;
                 p.n_threads = n_threads;
                 p.kv_type = kv_type;
                 p.max_chunk = max_chunk;
                 p.backend = backend;
                 p.pack_weights = pack_weights;
                 py::gil_scoped_release nogil;
                 return new engine(path, p);
             }),
             py::arg("model_path"), py::arg("n_ctx") = 4096, py::arg("n_slots") = 0, py::arg("n_groups") = 1,
             py::arg("slot_ctx") = 0, py::arg("n_threads") = 0, py::arg("kv_type") = "f16",
             py::arg("max_chunk") = 512, py::arg("backend") = "cpu", py::arg("pack_weights") = true)
        .def("hparams", [](const engine& e) {
            const model_hparams& h = e.hp();
            py::dict d;
            d["arch"] = h.arch;
            d["n_vocab"] = h.n_vocab;
            d["n_ctx_train"] = h.n_ctx_train;
            d["n_embd"] = h.n_embd;
            d["n_layer"] = h.n_layer;
            d["n_head"] = h.n_head;
            d["n_head_kv"] = h.n_head_kv;
            d["head_dim"] = h.head_dim;
            d["n_ff"] = h.n_ff;
            d["n_expert"] = h.n_expert;             // 0: a dense FFN
            d["n_expert_used"] = h.n_expert_used;
            d["n_ff_exp"] = h.n_ff_exp;
            d["n_rot"] = h.n_rot;
            d["rope_freq_base"] = h.rope_freq_base;
            d["rms_eps"] = h.rms_eps;
            return d;
        })
        .def_property_readonly("n_contexts", &engine::n_contexts)
        .def_property_readonly("n_threads", &engine::n_threads)
        .def_property_readonly("large_pages", &engine::large_pages)
        .def_property_readonly("arena_bytes", &engine::arena_bytes)
        .def_property_readonly("bytes_per_token", [](const engine& e) { return e.kv().bytes_per_token(); })
        .def_property_readonly("kv_row_bytes", [](const engine& e) { return e.kv().row_bytes; })
        .def_property_readonly("kv_type", [](const engine& e) { return e.params().kv_type; })
        .def_property_readonly("max_chunk", [](const engine& e) { return e.params().max_chunk; })
        .def_property_readonly("simd", [](const engine&) { return std::string(simd_name()); })
        .def_property_readonly("gpu", [](const engine& e) -> py::object {   // None unless backend "cuda"
#ifdef STRATA_WITH_CUDA
            if (const cuda_backend* g = e.gpu()) {
                const cuda_device_info d = g->device();
                py::dict r;
                r["index"] = d.index;
                r["name"] = d.name;
                r["compute_capability"] = std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
                r["vram_total"] = d.vram_total;
                r["vram_free"] = d.vram_free;
                r["vram_used"] = g->vram_used();   // this engine's weights + KV + scratch
                r["weight_bytes"] = g->weight_bytes();
                r["kv_bytes"] = g->kv_bytes();
                return std::move(r);
            }
#endif
            return py::none();
        })
        .def_property_readonly("data_offset", [](const engine& e) { return e.mdl().file->data_offset(); })
        .def_property_readonly("weight_bytes", [](const engine& e) { return e.mdl().weight_bytes(); })
        // {GGUF type name: bytes of its packed (row-interleaved) copies}: empty when nothing is packed
        .def_property_readonly("packed_bytes",
                               [](const engine& e) {
                                   py::dict out;
                                   for (const weight* w : const_cast<model&>(e.mdl()).product_weights()) {
                                       if (!w->packed) continue;
                                       const py::str name(type_name(w->type));
                                       const size_t have = out.contains(name) ? out[name].cast<size_t>() : 0;
                                       out[name] = have + packed_bytes(w->type, w->n_rows, w->n_cols);
                                   }
                                   return out;
                               })
        .def("context_capacity", [](const engine& e, int c) { return e.ctx(c).capacity; })
        .def("context_group", [](const engine& e, int c) { return e.ctx(c).group; })
        // history reads take the engine's lock (a compute on another thread may be appending),
        // without the GIL while they wait
        .def("context_len",
             [](engine& e, int c) {
                 py::gil_scoped_release nogil;
                 return e.context_len(c);
             })
        .def("context_tokens",
             [](engine& e, int c) {
                 std::vector<int32_t> t;
                 {
                     py::gil_scoped_release nogil;
                     t = e.context_tokens(c);
                 }
                 return t;
             })
        .def("has_logits",
             [](engine& e, int c) {
                 py::gil_scoped_release nogil;
                 return e.context_has_logits(c);
             })
        .def("interrupt", &engine::interrupt, py::arg("on"))   // atomic, no lock: called while a forward runs
        .def_property_readonly("interrupted", &engine::interrupted)
        .def("prefill",
             [](engine& e, int c, const py::object& tokens, int64_t chunk) {
                 std::vector<int32_t> t = token_vector(tokens);
                 py::gil_scoped_release nogil;
                 e.prefill(c, t.data(), int64_t(t.size()), chunk);
             },
             py::arg("ctx"), py::arg("tokens"), py::arg("chunk") = 512)
        .def("decode",
             [](engine& e, const std::vector<int>& ctxs, const py::object& tokens) {
                 std::vector<int32_t> t = token_vector(tokens);
                 if (t.size() != ctxs.size()) {
                     throw engine_error("decode: " + std::to_string(ctxs.size()) + " contexts but " +
                                        std::to_string(t.size()) + " tokens");
                 }
                 py::array_t<float> out({py::ssize_t(ctxs.size()), py::ssize_t(e.hp().n_vocab)});
                 float* p = out.mutable_data();
                 {
                     py::gil_scoped_release nogil;
                     e.decode(ctxs.data(), t.data(), int64_t(t.size()), p);
                 }
                 return out;
             },
             py::arg("ctxs"), py::arg("tokens"))
        .def("step",
             [](engine& e, const std::vector<int>& piece_ctxs, const std::vector<py::object>& pieces,
                const std::vector<int>& ctxs, const py::object& tokens) {
                 if (piece_ctxs.size() != pieces.size()) {
                     throw engine_error("step: " + std::to_string(piece_ctxs.size()) + " piece contexts but " +
                                        std::to_string(pieces.size()) + " pieces");
                 }
                 std::vector<int32_t> flat;
                 std::vector<int64_t> lens;
                 flatten_pieces(pieces, flat, lens);
                 std::vector<int32_t> t = token_vector(tokens);
                 if (t.size() != ctxs.size()) {
                     throw engine_error("step: " + std::to_string(ctxs.size()) + " contexts but " +
                                        std::to_string(t.size()) + " tokens");
                 }
                 py::array_t<float> out({py::ssize_t(ctxs.size()), py::ssize_t(e.hp().n_vocab)});
                 float* o = out.mutable_data();
                 {
                     py::gil_scoped_release nogil;
                     e.step(piece_ctxs.data(), lens.data(), int64_t(lens.size()), flat.data(), ctxs.data(), t.data(),
                            int64_t(t.size()), o);
                 }
                 return out;
             },
             py::arg("piece_ctxs"), py::arg("pieces"), py::arg("ctxs"), py::arg("tokens"))
        .def("extend",
             [](engine& e, const std::vector<int>& piece_ctxs, const std::vector<py::object>& pieces) {
                 if (piece_ctxs.size() != pieces.size()) {
                     throw engine_error("extend: " + std::to_string(piece_ctxs.size()) + " contexts but " +
                                        std::to_string(pieces.size()) + " pieces");
                 }
                 std::vector<int32_t> flat;
                 std::vector<int64_t> lens;
                 flatten_pieces(pieces, flat, lens);
                 e.check_logit_rows("extend", int64_t(flat.size()));   // before the (rows, n_vocab) array
                 py::array_t<float> out({py::ssize_t(flat.size()), py::ssize_t(e.hp().n_vocab)});
                 float* o = out.mutable_data();
                 {
                     py::gil_scoped_release nogil;
                     e.extend(piece_ctxs.data(), lens.data(), int64_t(lens.size()), flat.data(), o);
                 }
                 return out;
             },
             py::arg("piece_ctxs"), py::arg("pieces"))
        .def_property_readonly("max_rows", &engine::max_rows)
        .def_property_readonly("max_logit_rows", &engine::max_logit_rows)
        .def("logits",
             [](engine& e, int c) {
                 py::array_t<float> out(py::ssize_t(e.hp().n_vocab));
                 float* p = out.mutable_data();
                 {
                     py::gil_scoped_release nogil;
                     e.logits(c, p);
                 }
                 return out;
             })
        .def("truncate",
             [](engine& e, int c, int64_t n) {
                 py::gil_scoped_release nogil;
                 e.truncate(c, n);
             })
        .def("shift_refusal", &engine::shift_refusal)
        // pieces as (src, n) pairs, src -1 for new tokens (their ids in `tokens`, the new pieces' in order)
        .def("splice",
             [](engine& e, int c, int64_t keep, const std::vector<std::pair<int64_t, int64_t>>& pieces,
                const py::object& tokens) {
                 std::vector<int32_t> t = token_vector(tokens);
                 std::vector<engine::splice_piece> ps;
                 size_t used = 0;
                 for (const auto& [src, n] : pieces) {
                     const int32_t* at = nullptr;
                     if (src == -1) {
                         if (n < 0 || used + size_t(n) > t.size()) {
                             throw engine_error("splice: the new pieces' lengths exceed the " + std::to_string(t.size()) +
                                                " tokens given");
                         }
                         at = t.data() + used;
                         used += size_t(n);
                     }
                     ps.push_back({src, n, at});
                 }
                 if (used != t.size()) {
                     throw engine_error("splice: " + std::to_string(t.size()) + " tokens given, the new pieces take " +
                                        std::to_string(used));
                 }
                 py::gil_scoped_release nogil;
                 e.splice(c, keep, ps.data(), int64_t(ps.size()));
             },
             py::arg("ctx"), py::arg("keep"), py::arg("pieces"), py::arg("tokens"))
        .def("copy",
             [](engine& e, int src, int dst, int64_t n) {
                 py::gil_scoped_release nogil;
                 e.copy(src, dst, n);
             })
        .def("kv_read",
             [](engine& e, int c, int64_t t0, int64_t t1) {
                 if (t0 < 0 || t1 < t0) throw engine_error("kv_read: bad range");
                 size_t n = e.kv().bytes_per_token() * size_t(t1 - t0);
                 py::bytes out(nullptr, n);   // filled in place below, before anyone sees it
                 char* p = PyBytes_AsString(out.ptr());
                 {
                     py::gil_scoped_release nogil;
                     e.kv_read(c, t0, t1, reinterpret_cast<uint8_t*>(p));
                 }
                 return out;
             })
        .def("kv_write", [](engine& e, int c, int64_t t0, const py::object& tokens, const py::buffer& data) {
            std::vector<int32_t> t = token_vector(tokens);
            py::buffer_info info = data.request();
            size_t need = e.kv().bytes_per_token() * t.size();
            size_t got = size_t(info.size) * size_t(info.itemsize);
            if (got != need) {
                throw engine_error("kv_write: " + std::to_string(t.size()) + " tokens need " + std::to_string(need) +
                                   " KV bytes, got " + std::to_string(got));
            }
            const uint8_t* p = static_cast<const uint8_t*>(info.ptr);
            py::gil_scoped_release nogil;
            e.kv_write(c, t0, t.data(), int64_t(t.size()), p);
        });
}

}  // namespace strata
