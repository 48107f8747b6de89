"""Sliding windows and attention sinks on every vec16 build: the attention sources compiled
with AVX-512 + VNNI, AVX-512, AVX2 + FMA + F16C and no SIMD flags, each with the check program
attention_window_check.cpp over f16 / f32 / q8_0 KV, tiled and rows head sizes, windows 0-128 and
sinks none / near the scores / dominating. Per build it shows: attention_row_group equals attention_group
row by row bitwise with windows and sinks; NaN in every K and V position before the rows' windows
changes no output bit (positions before the window never reach a result); and every build prints the
same checksum (the same floats everywhere). The engine's own build covers only one of these builds;
the values against NumPy are test_attention_window.py's.

Skipped without g++ or on a CPU without the variant's instructions. ~3 s per compile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .toolchain import VEC16_BUILDS, build_and_run_check, same_checksum_as_other_builds

HERE = Path(__file__).resolve().parent
VARIANTS = VEC16_BUILDS
CASES = 720   # 10 shapes x 6 windows x 3 sink kinds x 4 histories
CHECKSUMS: dict[str, str] = {}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_windows_and_sinks_group_equals_rows_and_skip_the_past(variant, tmp_path):
    flags_cc, flags_cpu = VARIANTS[variant]
    out = build_and_run_check(HERE / "attention_window_check.cpp", flags_cc, flags_cpu, tmp_path / "check_window",
                              CASES)
    same_checksum_as_other_builds(out, variant, CHECKSUMS)
