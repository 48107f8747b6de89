"""The q8_0 KV path (attention-q8.cpp and kv-layout.cpp's layout: tiled K scored with exact int32
dots, row V) against a plain scalar rendering of the same arithmetic, bit for bit, on every build: AVX-512 with VNNI (vpdpbusd),
AVX-512 without it, AVX2 + FMA + F16C and no SIMD flags, each compiled with the check program
attention_q8_check.cpp. Also checks kv_store's rows (kv_get_rows: llama.cpp's q8_0 blocks, the
snapshot and cache-file format) and the kv_set_rows round trip, and that every build prints the
same checksum of its outputs (the same floats on every build).

Skipped without g++ or on a CPU without the variant's instructions. ~2 s per compile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .toolchain import VEC16_BUILDS, build_and_run_check, same_checksum_as_other_builds

HERE = Path(__file__).resolve().parent

VARIANTS = VEC16_BUILDS
CASES = 580   # 576 stored by kv_store (4 head sizes x 3 kv heads x 8 head counts x 6 histories), 4 of extreme K bytes
CHECKSUMS: dict[str, str] = {}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_q8_0_attention_equals_its_reference_bitwise(variant, tmp_path):
    flags_cc, flags_cpu = VARIANTS[variant]
    out = build_and_run_check(HERE / "attention_q8_check.cpp", flags_cc, flags_cpu, tmp_path / "check_q8", CASES)
    same_checksum_as_other_builds(out, variant, CHECKSUMS)
