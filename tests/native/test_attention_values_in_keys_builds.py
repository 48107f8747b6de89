"""A KV whose values are its keys (kv_layout::v_in_k: deepseek2's latent row) on every vec16 build:
the attention sources compiled with AVX-512 + VNNI, AVX-512, AVX2 + FMA + F16C and no SIMD flags, each with the
check program attention_latent_check.cpp over f16 / f32 KV, tiled (64, 576) and rows (40, 48) head sizes,
3 and 20 query heads, windows 0 and 7, histories on and across tile boundaries. Per build: the values read
from K (each tile's positions turned into rows, or K's rows) equal a separate V buffer's of the same rows
bitwise, whole and in parts; and every build prints the same checksum (the same floats everywhere). The
values against NumPy are test_attention_values_in_keys.py's.

Skipped without g++ or on a CPU without the variant's instructions. ~3 s per compile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .toolchain import VEC16_BUILDS, build_and_run_check, same_checksum_as_other_builds

HERE = Path(__file__).resolve().parent
CASES = 96   # 6 shapes x 2 head counts x 2 windows x 4 histories
CHECKSUMS: dict[str, str] = {}


@pytest.mark.parametrize("variant", list(VEC16_BUILDS))
def test_values_in_keys_equal_a_separate_v_on_every_build(variant, tmp_path):
    flags_cc, flags_cpu = VEC16_BUILDS[variant]
    out = build_and_run_check(HERE / "attention_latent_check.cpp", flags_cc, flags_cpu, tmp_path / "check_latent",
                              CASES)
    same_checksum_as_other_builds(out, variant, CHECKSUMS)
