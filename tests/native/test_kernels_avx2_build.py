"""The AVX2 kernels (quants-avx2.cpp), which a native build on an AVX-512 machine never compiles:
build the kernel files with -mavx2 -mfma -mf16c (and again with -mavxvnni, the dpbusd variant of
Intel desktop CPUs) into throwaway modules and hold them to the same rules as the native build
(fast matvec vs the scalar reference, matmul vs matvec bit for bit).

Skipped without g++ or on a CPU without the instructions. Takes ~15 s per compile."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from .kernel_data import (
    BLOCK,
    TYPE_IDS,
    WEIGHT_TYPES,
    act_values,
    quantize_act_numpy,
    random_activations,
    random_weights,
    true_values,
)
from .toolchain import ATTENTION_SOURCES, gxx_and_cpu_or_skip

SRC = Path(__file__).resolve().parents[2] / "engine_native" / "src"
KERNEL_FILES = ["quants.cpp", "quants-generic.cpp", "quants-avx512.cpp", "quants-avx2.cpp", "quants-packed.cpp",
                "quants-packed-avx512.cpp", "quants-packed-lowbit-avx512.cpp", *ATTENTION_SOURCES, "binding-kernels.cpp"]
VARIANTS = {   # name: (compiler flags, /proc/cpuinfo flags the CPU needs)
    "avx2": (["-mavx2", "-mfma", "-mf16c"], ["avx2", "fma", "f16c"]),
    "avx2-vnni": (["-mavx2", "-mfma", "-mf16c", "-mavxvnni"], ["avx2", "fma", "f16c", "avx_vnni"]),
}
MAIN = """#include <pybind11/pybind11.h>
namespace strata { void register_kernel_bindings(pybind11::module_& parent); }
PYBIND11_MODULE(_kernels_avx2, m) { strata::register_kernel_bindings(m); }
"""


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def avx2(request, tmp_path_factory):
    """The kernels module built for one AVX2 variant."""
    flags_cc, flags_cpu = VARIANTS[request.param]
    compiler = gxx_and_cpu_or_skip(flags_cpu)
    import pybind11

    out = tmp_path_factory.mktemp(request.param)
    (out / "main.cpp").write_text(MAIN)
    target = out / ("_kernels_avx2" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [compiler, "-std=gnu++17", "-O2", "-fno-math-errno", *flags_cc, "-shared", "-fPIC",
           f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}", f"-I{SRC}",
           *[str(SRC / f) for f in KERNEL_FILES], str(out / "main.cpp"), "-o", str(target)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    spec = importlib.util.spec_from_file_location("_kernels_avx2", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop("_kernels_avx2", None)
    return module.kernels


def test_avx2_build_is_avx2(avx2):
    assert avx2.simd_name() == "avx2"


@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_avx2_matvec_matches_generic_and_matmul_matches_matvec(avx2, name):
    tid = TYPE_IDS[name]
    n = {1: 1000, 32: 576, 256: 768}[BLOCK[name]]
    rng = np.random.default_rng(40 + tid)
    w = random_weights(rng, name, 23, n)
    xq = avx2.quantize_act_row(tid, random_activations(rng, 7, n))
    single = np.stack([avx2.matvec(tid, w, xq[t], n) for t in range(7)])
    for t in range(7):
        ref = avx2.matvec_generic(tid, w, xq[t], n)
        mag = np.abs(true_values(name, w).astype(np.float64)) @ np.abs(act_values(name, xq[t]))
        assert (np.abs(single[t].astype(np.float64) - ref) <= 1e-5 * mag + 1e-30).all(), (name, t)
    for r0, r1 in [(0, 23), (3, 14), (6, 7)]:
        for n_tok in (1, 2, 3, 5, 7):
            assert np.array_equal(avx2.matmul(tid, w, xq[:n_tok], n, r0, r1), single[:n_tok, r0:r1]), (name, r0, n_tok)


@pytest.mark.parametrize("name", ["Q8_0", "Q4_1", "Q4_K"])
def test_avx2_activation_quantizers_match_numpy(avx2, name):
    rng = np.random.default_rng(77)
    x = random_activations(rng, 5, 768)
    x[1, :256] = np.float32(127.0) * np.round(rng.uniform(-2, 2, 256) * 2) / 2   # exact .5 ties at d = 1
    x[1, 0] = 127.0
    got = avx2.quantize_act_row(TYPE_IDS[name], x)
    for t in range(5):
        np.testing.assert_array_equal(got[t], quantize_act_numpy(name, x[t]))
