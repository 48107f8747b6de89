"""For the tests that compile engine sources themselves with other instruction sets: g++ and the CPU
flags a variant needs, or a skip that says which is missing; a check program built with the attention
sources of engine_native/src (ATTENTION_SOURCES), and run."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest


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


def build_and_run_check(program: Path, flags: list[str], cpu_flags: list[str], exe: Path, cases: int) -> str:
    """Compiles `program` with the attention sources and `flags` (skips as gxx_and_cpu_or_skip does), runs it,
    asserts it printed "0 of `cases` cases differ" and exited 0; returns its output."""
    compiler = gxx_and_cpu_or_skip(cpu_flags)
    cmd = [compiler, "-std=gnu++17", "-O2", "-fno-math-errno", *flags, f"-I{SRC}", str(program),
           *[str(SRC / f) for f in ATTENTION_SOURCES], "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]
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
