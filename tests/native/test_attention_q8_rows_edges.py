"""attention_row_group over q8_0 KV (the AVX2 / VNNI / scalar grouped prompt kernels of attention-q8.cpp)
against attention_group row by row, bitwise, on every vec16 build, at the shapes test_attention_builds /
test_attention_window_builds leave out (attention_q8_rows_edge_check.cpp): head sizes 32 / 64 / 96 / 128 /
256, 1 / 2 / 5 / 8 query heads per kv head, groups of 1 row (a single query vector: the odd-query tail of
the AVX2 scores) to 33, histories ending on and beside the K / V spans' edges up to 1,017 positions, K quants
of -128 / 127 against full-scale queries (the int32 dots' extremes), windows with sinks; K / V buffers
without slack; every case again in one of 3 threads, from the end down (thread_local scratch grown by
other shapes first): the same floats; every build the same checksum.

Checked (session 35) to fail on a copy of attention-q8.cpp whose AVX2 group scores skip the last query
vector when the group has only one (48 of 1140 differ; test_attention_builds passes on it: its groups
have >= 2 rows).
An AddressSanitizer build of the same program (AVX2) ran clean then; not a test here (~4 min on 2 cores).

Skipped without g++ or on a CPU without the variant's instructions. ~10 s per compile; a run ~8 s (AVX2), ~35 s (scalar) at load 8.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .toolchain import VEC16_BUILDS, build_and_run_check, same_checksum_as_other_builds

HERE = Path(__file__).resolve().parent
CASES = 1140   # 5 head sizes x 4 heads per kv head x 4 group sizes x 5 histories x 3 input kinds, less 33 rows at 1,000
CHECKSUMS: dict[str, str] = {}


@pytest.mark.parametrize("variant", list(VEC16_BUILDS))
def test_q8_row_group_edges_equal_rows_bitwise(variant, tmp_path):
    flags_cc, flags_cpu = VEC16_BUILDS[variant]
    out = build_and_run_check(HERE / "attention_q8_rows_edge_check.cpp", flags_cc, flags_cpu,
                              tmp_path / "check_q8_edges", CASES, program_flags=("-pthread",))
    same_checksum_as_other_builds(out, variant, CHECKSUMS)
