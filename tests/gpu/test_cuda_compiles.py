"""The CUDA backend compiles (nvcc, sm_80 and sm_90, warnings as errors) and stays out of the CPU build.

Runs wherever nvcc is installed (CI has it; nothing there runs the result), skipped otherwise, so the
kernels never rot between the sessions that have a GPU. One nvcc process per .cu file, two at a time
(the machines have 2 cores); about a minute in all.
Not here: whether the kernels compute the right thing (test_parity.py, which needs a device).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CUDA_DIR = ROOT / "engine_native" / "cuda"
SRC_DIR = ROOT / "engine_native" / "src"
ARCHS = ("80", "90")


def find_nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def cu_files() -> list[Path]:
    return sorted(CUDA_DIR.glob("*.cu"))


def test_every_kernel_file_is_known():
    names = {p.name for p in cu_files()}
    assert {"cuda-backend.cu", "cuda-kernels.cu", "cuda-matmul.cu"} <= names, names


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_every_cu_file_compiles_for_sm80_and_sm90(tmp_path):
    nvcc = find_nvcc()
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in ARCHS]

    def compile_one(cu: Path) -> tuple[Path, subprocess.CompletedProcess]:
        cmd = [nvcc, "-c", "-std=c++17", "-O1", *gencode, "--Werror", "all-warnings",
               "-Xcompiler", "-Wall,-Wextra,-Werror", f"-I{SRC_DIR}", f"-I{CUDA_DIR}",
               "-DSTRATA_WITH_CUDA=1", str(cu), "-o", str(tmp_path / (cu.stem + ".o"))]
        return cu, subprocess.run(cmd, capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compile_one, cu_files()))
    failures = [f"{cu.name}:\n{r.stderr[-4000:]}" for cu, r in results if r.returncode != 0]
    assert not failures, "\n\n".join(failures)
    for cu, _ in results:
        assert (tmp_path / (cu.stem + ".o")).stat().st_size > 0


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
def test_element_decoder_matches_dequantize_row_on_the_host(tmp_path):
    """cuda-dequant.cuh's dq<TYPE>, which every CUDA product and embedding lookup reads weights with,
    run on the CPU against dequantize_row for all 11 weight types (tests/gpu/dequant_check.cu)."""
    exe = tmp_path / "dequant_check"
    cmd = [find_nvcc(), "-std=c++17", "-O1", f"-I{SRC_DIR}", f"-I{CUDA_DIR}", str(Path(__file__).parent / "dequant_check.cu"),
           str(SRC_DIR / "quants.cpp"), str(SRC_DIR / "quants-generic.cpp"), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-4000:]
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.split() == [w for t in ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K",
                                             "Q5_K", "Q6_K") for w in ("ok", t)]


def test_engine_hooks_compile_with_strata_with_cuda():
    """The `#ifdef STRATA_WITH_CUDA` lines in engine_native/src (engine, forward pass, bindings) compile as a
    CUDA build sees them, so a change there cannot rot unseen on machines without a GPU. Syntax and
    types only (g++ -fsyntax-only), no nvcc needed."""
    import sysconfig

    import pybind11

    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    includes = [f"-I{SRC_DIR}", f"-I{CUDA_DIR}", f"-I{pybind11.get_include()}",
                f"-I{sysconfig.get_paths()['include']}"]
    sources = [SRC_DIR / n for n in ("engine.cpp", "forward.cpp", "binding.cpp", "binding-engine.cpp")]

    def check(src: Path) -> tuple[Path, subprocess.CompletedProcess]:
        cmd = [cxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
               "-DSTRATA_WITH_CUDA=1", *includes, str(src)]
        return src, subprocess.run(cmd, capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(check, sources))
    failures = [f"{src.name}:\n{r.stderr[-4000:]}" for src, r in results if r.returncode != 0]
    assert not failures, "\n\n".join(failures)


def _outside_cuda_blocks(text: str) -> list[tuple[int, str]]:
    """Lines of a C++ file that are outside every `#ifdef STRATA_WITH_CUDA` block (its #else included)."""
    out: list[tuple[int, str]] = []
    stack: list[bool] = []   # per open #if: True when it is a STRATA_WITH_CUDA block
    for number, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("#if"):
            stack.append(s in ("#ifdef STRATA_WITH_CUDA", "#if defined(STRATA_WITH_CUDA)"))
            continue
        if s.startswith("#endif"):
            stack.pop()
            continue
        if s.startswith("#else") and stack and stack[-1]:
            stack[-1] = False   # the #else of a CUDA block is CPU-build code
            continue
        if not any(stack):
            out.append((number, line))
    return out


CUDA_NAMES = re.compile(r"cuda_backend|cuda_row|cuda_device|cuda_error|cuda_runtime|cuda-backend\.h|\bgpu_\b|cudaMalloc")


def test_cpu_sources_reach_cuda_only_under_strata_with_cuda():
    """The CPU-only build (the default) compiles engine_native/src alone: every mention of the CUDA
    backend there sits inside `#ifdef STRATA_WITH_CUDA`."""
    leaks = []
    for path in sorted(SRC_DIR.glob("*.[ch]*")):
        for number, line in _outside_cuda_blocks(path.read_text()):
            code = re.sub(r'"[^"]*"', '""', line.split("//")[0])   # names in strings are only text
            if CUDA_NAMES.search(code):
                leaks.append(f"{path.name}:{number}: {line.strip()}")
    assert not leaks, "CUDA names outside #ifdef STRATA_WITH_CUDA:\n" + "\n".join(leaks)


def test_cmake_keeps_cuda_behind_its_option():
    text = (ROOT / "CMakeLists.txt").read_text()
    assert re.search(r'option\(STRATA_CUDA "[^"]*" OFF\)', text), "STRATA_CUDA must default to OFF"
    before_option_block = text.split("if(STRATA_CUDA)")[0]
    for needle in ("enable_language(CUDA)", "CUDA::cudart", "STRATA_WITH_CUDA"):
        assert needle not in before_option_block, f"{needle} outside if(STRATA_CUDA)"


def test_this_build_reports_its_backends():
    from strata.engine.gpu import cuda_built, cuda_devices, resolve_backend

    from strata import _engine

    info = dict(_engine.build_info())
    assert isinstance(info.get("cuda"), bool)
    assert cuda_built() == info["cuda"]
    assert resolve_backend("cpu") == "cpu"
    expected_auto = "cuda" if info["cuda"] and cuda_devices() else "cpu"
    assert resolve_backend("auto") == expected_auto
    with pytest.raises(ValueError, match="backend must be one of"):
        resolve_backend("tpu")
    if expected_auto == "cpu":
        with pytest.raises(ValueError, match="backend 'cuda' is not available"):
            resolve_backend("cuda")
