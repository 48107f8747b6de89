"""For the tests that compile engine sources themselves with other instruction sets: g++ and the CPU
flags a variant needs, or a skip that says which is missing; engine sources compiled into objects once
per test session for each set of flags (several test files build the same sources with the same flags),
one g++ per core (compiler_runs: none outlives its test, past its time limit or on an interrupt or a failure
beside it); a check program linked with the attention sources of engine_native/src
(ATTENTION_SOURCES), and run; a kernels module (KERNEL_FILES) built and loaded."""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .compiler_runs import CompilerRuns, valid_timeout


def gxx_and_cpu_or_skip(cpu_flags: list[str]) -> str:
    """The g++ path; skips the test without g++ or on a CPU without all of `cpu_flags`
    (/proc/cpuinfo names)."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++")
    if cpu_flags:
        try:
            cpu = Path("/proc/cpuinfo").read_text()
        except OSError:
            pytest.skip("no /proc/cpuinfo")
        if not all(re.search(rf"\b{f}\b", cpu) for f in cpu_flags):
            pytest.skip(f"CPU without {cpu_flags}")
    return compiler


SRC = Path(__file__).resolve().parents[2] / "engine_native" / "src"

# The sources of attention.h's functions (the KV layout and the attention kernels), nothing else of the engine
ATTENTION_SOURCES = ["attention.cpp", "attention-grouped.cpp", "attention-q8.cpp", "kv-layout.cpp"]

# The vec16 builds the check programs compile: name -> (compiler flags, /proc/cpuinfo flags the CPU needs)
_AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mfma", "-mf16c"]
VEC16_BUILDS = {
    "avx512vnni": ([*_AVX512, "-mavx512vnni"], ["avx512f", "avx512bw", "avx512_vnni"]),
    "avx512": (_AVX512, ["avx512f", "avx512bw"]),
    "avx2": (["-mavx2", "-mfma", "-mf16c"], ["avx2", "fma", "f16c"]),
    "scalar": ([], []),
}


# The kernels module's sources (binding-kernels.cpp's register_kernel_bindings and all it calls)
KERNEL_FILES = ["quants.cpp", "quants-generic.cpp", "quants-avx512.cpp", "quants-avx2.cpp", "quants-packed.cpp",
                "quants-packed-avx512.cpp", "quants-packed-lowbit-avx512.cpp", "quants-packed-avx2.cpp",
                *ATTENTION_SOURCES, "binding-kernels.cpp"]
CHECK_FLAGS = ["-std=gnu++17", "-O2", "-fno-math-errno"]   # every check program's and kernels module's

_objects: dict[tuple[str, ...], Path] = {}   # (compiler, source, *flags) -> its object, for the whole session
_object_dir: list[Path] = []                 # the session's folder of objects, made on first use


def _objects_folder() -> Path:
    if not _object_dir:
        _object_dir.append(Path(tempfile.mkdtemp(prefix="strata-test-objects-")))
        atexit.register(shutil.rmtree, _object_dir[0], True)
    return _object_dir[0]


def compiled_objects(compiler: str, sources: list[Path], flags: list[str], timeout_s: float = 900) -> list[Path]:
    """`sources` compiled (-c) with `flags`, in the order given: each (source, flags) compiled once a session,
    the ones not yet built one g++ per core at once, each within `timeout_s`. The same g++ command gives the same
    object a single `g++ a.cpp b.cpp -o exe` would (no LTO), so a program linked from these is the one built in
    one go."""
    valid_timeout(timeout_s)
    keys = {src: (compiler, str(src), *flags) for src in sources}
    todo = [src for src in sources if keys[src] not in _objects]

    def compile_one(src: Path) -> tuple[Path, Path, subprocess.CompletedProcess]:
        digest = hashlib.sha1("\0".join(keys[src]).encode()).hexdigest()[:12]
        obj = _objects_folder() / f"{src.stem}-{digest}.o"
        return src, obj, runs.run([compiler, *flags, "-c", str(src), "-o", str(obj)], timeout_s, src.name)

    runs = CompilerRuns()
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        try:   # map's results in order; a failure closes it, which cancels the compiles not yet begun
            for src, obj, result in pool.map(compile_one, todo):
                assert result.returncode == 0, f"{src.name}: {result.stderr[-4000:]}"
                _objects[keys[src]] = obj
        except BaseException:   # a compile failed, or an interrupt: the ones under way go too, not waited for
            runs.stop()
            raise
    return [_objects[keys[src]] for src in sources]


def link(compiler: str, objects: list[Path], flags: list[str], target: Path, timeout_s: float = 600) -> None:
    linked = CompilerRuns().run([compiler, *flags, *map(str, objects), "-o", str(target)], timeout_s,
                                f"linking {target.name}")
    assert linked.returncode == 0, linked.stderr[-4000:]


def build_and_run_check(program: Path, flags: list[str], cpu_flags: list[str], exe: Path, cases: int,
                        program_flags: tuple[str, ...] = ()) -> str:
    """Compiles `program` with the attention sources and `flags` (skips as gxx_and_cpu_or_skip does), runs it,
    asserts it printed "0 of `cases` cases differ" and exited 0; returns its output. `program_flags` go to the
    program's own compile and the link only (-pthread: it changes no attention object, checked byte for byte)."""
    compiler = gxx_and_cpu_or_skip(cpu_flags)
    cc = [*CHECK_FLAGS, *flags, f"-I{SRC}"]
    objects = compiled_objects(compiler, [SRC / f for f in ATTENTION_SOURCES], cc)
    objects += compiled_objects(compiler, [program], [*cc, *program_flags])
    link(compiler, objects, [*flags, *program_flags], exe)
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert ran.stdout.strip().endswith(f"0 of {cases} cases differ"), ran.stdout[-2000:] + ran.stderr[-2000:]
    assert ran.returncode == 0
    return ran.stdout


def same_checksum_as_other_builds(out: str, variant: str, seen: dict[str, str]) -> None:
    """The "checksum XXXXXXXX" a check program printed, recorded in `seen` under `variant`; asserts every build
    that ran before printed the same (the same floats on every build)."""
    found = re.search(r"checksum ([0-9a-f]{8})", out)
    assert found, out[-2000:]
    seen[variant] = found.group(1)
    assert len(set(seen.values())) == 1, seen


def kernels_module(compiler: str, flags: list[str], name: str, out: Path, link_flags: tuple[str, ...] = ()) -> Path:
    """The file of a kernels module (KERNEL_FILES and a PYBIND11_MODULE `name`) compiled with `flags` (-fPIC
    added), linked in `out` with -shared and `link_flags` (a sanitizer's)."""
    import pybind11

    main = out / f"{name}_main.cpp"
    main.write_text(f"""#include <pybind11/pybind11.h>
namespace strata {{ void register_kernel_bindings(pybind11::module_& parent); }}
PYBIND11_MODULE({name}, m) {{ strata::register_kernel_bindings(m); }}
""")
    cc = [*flags, "-fPIC", f"-I{pybind11.get_include()}", f"-I{sysconfig.get_paths()['include']}", f"-I{SRC}"]
    objects = compiled_objects(compiler, [SRC / f for f in KERNEL_FILES] + [main], cc)
    target = out / (name + sysconfig.get_config_var("EXT_SUFFIX"))
    link(compiler, objects, ["-shared", *link_flags], target)
    return target


def load_kernels(target: Path, name: str):
    """The `kernels` submodule of the module file `target` (PYBIND11_MODULE `name`), kept out of sys.modules."""
    spec = importlib.util.spec_from_file_location(name, target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop(name, None)
    return module.kernels
