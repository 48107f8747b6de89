"""The AVX2 packed products (quants-packed-avx2.cpp: Q4_1, Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K) under AddressSanitizer
and UndefinedBehaviorSanitizer: the kernel files built with -fsanitize=address,undefined into a throwaway
module, driven in a subprocess with libasan preloaded (sanitized_packed_driver.py: exactly sized buffers,
every padded last group, token tiles 1..8, row ranges ending anywhere, non-finite rows), so a vector load
past a packed matrix's or an activation row's end, or undefined behaviour, fails the run with the
sanitizer's report; the results equal this venv's engine. The prefetches ahead of a block are not loads
(they never fault, and ASan does not check them).

Skipped without g++, libasan / libubsan, or on a CPU without AVX2 / FMA / F16C. The build takes a minute
or two on two cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .toolchain import gxx_and_cpu_or_skip, kernels_module

ROOT = Path(__file__).resolve().parents[2]
SANITIZE = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
TYPES = "Q4_1,Q8_0,IQ4_NL,Q4_K,Q5_K,Q6_K"


def runtime_or_skip(compiler: str, lib: str) -> str:
    path = subprocess.run([compiler, f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        pytest.skip(f"no {lib} for {compiler}")
    return path


def test_packed_products_clean_under_asan_and_ubsan(tmp_path):
    compiler = gxx_and_cpu_or_skip(["avx2", "fma", "f16c"])
    preload = [runtime_or_skip(compiler, "libasan.so"), runtime_or_skip(compiler, "libubsan.so")]
    flags = ["-std=gnu++17", "-fno-math-errno", "-mavx2", "-mfma", "-mf16c", *SANITIZE]
    target = kernels_module(compiler, flags, "_kernels_avx2", tmp_path, link_flags=tuple(SANITIZE))

    env = dict(os.environ, LD_PRELOAD=" ".join(preload), ASAN_OPTIONS="detect_leaks=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    run = subprocess.run([sys.executable, "-m", "tests.native.sanitized_packed_driver", str(target), TYPES],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and run.stdout.startswith("ok "), (run.stdout[-2000:], run.stderr[-6000:])
