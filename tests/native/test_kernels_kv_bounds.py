"""The kernels binding's KV and attention calls (strata._engine.kernels: kv_pack, kv_rows, kv_write_rows,
attention_group, attention_row_group, attention_in_parts) refuse positions and capacities so large that
their byte counts overflow, naming the value, instead of writing or reading outside the buffer.

Each call runs in a child interpreter: before the bounds were checked these calls crashed the process
(free(): invalid pointer) or wrote at a wrapped-around offset without a word.
Not here: the kernels' arithmetic (test_attention_window.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SETUP = """
import numpy as np
from strata import _engine
K = _engine.kernels
F32 = 0
buf = np.zeros(128 * 32, np.uint8)          # f32 KV, 1 kv head of 32: 128-byte rows, 32 positions
rows = np.zeros((1, 128), np.uint8)
q = np.zeros((1, 32), np.float32)
"""

BIG = [2**57, 2**61 + 3, 2**63 - 1]   # 2**57 rows of 128 bytes: 2**64 bytes, 0 once wrapped


def run_child(call: str) -> subprocess.CompletedProcess:
    code = SETUP + textwrap.dedent(f"""
    try:
        {call}
        print("NO ERROR")
    except ValueError as e:
        print("ValueError:", e)
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("big", BIG)
@pytest.mark.parametrize("call, message", [
    ("K.kv_write_rows(F32, 1, 32, buf, False, {big}, rows)", "outside the buffer"),
    ("K.kv_write_rows(F32, 1, 32, buf, True, {big}, rows)", "outside the buffer"),
    ("K.kv_rows(F32, 1, 32, buf, False, 0, {big})", "need"),
    ("K.kv_pack(F32, 1, 32, np.zeros((1, 32), np.float32), np.zeros((1, 32), np.float32), {big})", "capacity"),
    ("K.attention_group(F32, 1, 32, buf, buf, q, 0, {big}, 1.0)", "need"),
    ("K.attention_group(F32, 1, 32, buf, buf, q, 0, {big}, 1.0, window=4)", "need"),
    ("K.attention_row_group(F32, 1, 32, buf, buf, q[None], 0, [{big}], 1.0)", "need"),
])
def test_huge_positions_are_refused(call, message, big):
    r = run_child(call.format(big=big))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ValueError:") and message in r.stdout, r.stdout
    assert str(big) in r.stdout


@pytest.mark.parametrize("big", BIG)
def test_a_huge_window_is_the_whole_history(big):
    r = run_child(f"assert np.array_equal(K.attention_group(F32, 1, 32, buf, buf, q + 1, 0, 20, 0.5, window={big}), "
                  "K.attention_group(F32, 1, 32, buf, buf, q + 1, 0, 20, 0.5))")
    assert r.stdout.strip() == "NO ERROR", r.stdout + r.stderr[-2000:]


def test_positions_that_fit_still_work():
    r = run_child("K.kv_write_rows(F32, 1, 32, buf, False, 31, rows); "
                  "assert K.kv_rows(F32, 1, 32, buf, False, 0, 32).shape == (32, 128)")
    assert r.stdout.strip() == "NO ERROR", r.stdout + r.stderr[-2000:]
    r = run_child("K.kv_write_rows(F32, 1, 32, buf, False, 32, rows)")
    assert "outside the buffer" in r.stdout
