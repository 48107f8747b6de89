"""Grouped attention (attention_row_group) against the per-row path, bit for bit, on every vec16
build: the attention sources compiled with AVX-512 (-march=native where the CPU has it), AVX2 + FMA + F16C,
and no SIMD flags (the scalar float[16] lanes), plus AVX-512 VNNI (q8_0's dots), each with a small
check program (attention_groups_check.cpp) over random f16 and q8_0 KV. The engine's own build covers
only one of these.

Skipped without g++ or on a CPU without the variant's instructions. ~2 s per compile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .toolchain import VEC16_BUILDS, build_and_run_check

HERE = Path(__file__).resolve().parent
VARIANTS = VEC16_BUILDS


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_grouped_attention_equals_rows_bitwise(variant, tmp_path):
    flags_cc, flags_cpu = VARIANTS[variant]
    build_and_run_check(HERE / "attention_groups_check.cpp", flags_cc, flags_cpu, tmp_path / "check", 144)
