"""The q8_0 KV path of attention.cpp (tiled K scored with exact int32 dots, row V) against a plain
scalar rendering of the same arithmetic, bit for bit, on every build: AVX-512 with VNNI (vpdpbusd),
AVX-512 without it, AVX2 + FMA + F16C and no SIMD flags, each compiled with the check program
attention_q8_check.cpp. Also checks kv_store's rows (kv_get_rows: llama.cpp's q8_0 blocks, the
snapshot and cache-file format) and the kv_set_rows round trip, and that every build prints the
same checksum of its outputs (the same floats on every build).

Skipped without g++ or on a CPU without the variant's instructions. ~2 s per compile.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from .toolchain import gxx_and_cpu_or_skip

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "engine_native" / "src"
AVX512 = ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mfma", "-mf16c"]
VARIANTS = {   # name: (compiler flags, /proc/cpuinfo flags the CPU needs)
    "avx512vnni": ([*AVX512, "-mavx512vnni"], ["avx512f", "avx512bw", "avx512_vnni"]),
    "avx512": (AVX512, ["avx512f", "avx512bw"]),
    "avx2": (["-mavx2", "-mfma", "-mf16c"], ["avx2", "fma", "f16c"]),
    "scalar": ([], []),
}
CASES = 192
CHECKSUMS: dict[str, str] = {}


def build_and_run(variant: str, tmp_path: Path) -> str:
    flags_cc, flags_cpu = VARIANTS[variant]
    compiler = gxx_and_cpu_or_skip(flags_cpu)
    exe = tmp_path / "check_q8"
    cmd = [compiler, "-std=gnu++17", "-O2", "-fno-math-errno", *flags_cc, f"-I{SRC}",
           str(HERE / "attention_q8_check.cpp"), str(SRC / "attention.cpp"), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]
    ran = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert ran.stdout.strip().endswith(f"0 of {CASES} cases differ"), ran.stdout[-2000:] + ran.stderr[-2000:]
    assert ran.returncode == 0
    found = re.search(r"checksum ([0-9a-f]{8})", ran.stdout)
    assert found, ran.stdout[-2000:]
    return found.group(1)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_q8_0_attention_equals_its_reference_bitwise(variant, tmp_path):
    CHECKSUMS[variant] = build_and_run(variant, tmp_path)
    # every build that ran before this one printed the same outputs
    assert len(set(CHECKSUMS.values())) == 1, CHECKSUMS
