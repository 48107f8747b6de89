"""Sliding-window attention and attention sinks (gpt-oss) in the attention kernels, through the kernel
binding (strata._engine.kernels), against the NumPy reference in attention_reference.py.

Covers every layout: tiled f16 and f32, tiled q8_0 (grouped head sizes and 96, which is not), the
rows layout (head sizes 48 and 80, f16 and f32); windows smaller than, equal to and larger than
n_pos, windows not a multiple of 16, n_pos on and across tile boundaries; sinks near the scores,
dominating (+30 over them) and negligible (-1e4). Also: attention_row_group equals attention_group
row by row bitwise with windows and sinks (consecutive rows as a prefill chunk gives, and rows so far
apart that their windows share no position); window 0 / no sinks equals the call without them, a
window >= n_pos equals no window, and sinks of -inf equal none, bitwise; one long row in parts
(attention_in_parts) equals the whole row bitwise with sinks; a window really skips reading (K and V
bytes before the window's first tile in PROT_NONE pages: any read kills the child process); bad
arguments raise ValueError naming them.

Not here: the same on the AVX2 and scalar builds (test_attention_window_builds.py), the engine's
forward pass over gpt-oss layers.
"""

from __future__ import annotations

import json
import mmap
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .attention_reference import F16, F32, Q8_0, TYPE_NAMES, K, make_kv, reference

HERE = Path(__file__).resolve().parent
SCALE = 0.125
# (kv_type, head_dim): tiled f16 / f32 (grouped f16 at 64 and 128), q8_0 tiled (grouped 64, not 96),
# rows layout (48, 80)
LAYOUTS = [(F16, 64), (F16, 128), (F32, 64), (Q8_0, 64), (Q8_0, 96), (F16, 48), (F32, 80)]
N_POS = [1, 15, 16, 17, 33, 130, 161, 300]
WINDOWS = [1, 7, 16, 33, 128, 200]           # with n_pos above: smaller, equal (16, 33), larger
N_REP = 3


def _id(layout: tuple[int, int]) -> str:
    return f"{TYPE_NAMES[layout[0]]}-hd{layout[1]}"


def assert_close(got: np.ndarray, want: np.ndarray, msg: str = "") -> None:
    """Within float32 rounding of the reference, relative to the output's own size (a dominant sink
    makes the whole output tiny; measured worst 2.3e-6 of the largest element)."""
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()), err_msg=msg)


@pytest.mark.parametrize("layout", LAYOUTS, ids=_id)
def test_windows_and_sinks_match_numpy(layout):
    kv_type, hd = layout
    rng = np.random.default_rng(hd + kv_type)
    case = make_kv(rng, kv_type, 2, hd, max(N_POS))
    sink_kinds = {
        "none": None,
        "near": rng.standard_normal(N_REP).astype(np.float32),
        "dominant": np.full(N_REP, 30.0, np.float32),
        "negligible": np.full(N_REP, -1e4, np.float32),
    }
    n_checked = 0
    for n_pos in N_POS:
        for window in [0, *WINDOWS, n_pos]:
            for kind, sinks in sink_kinds.items():
                g = (n_pos + window) % 2
                q = rng.standard_normal((N_REP, hd)).astype(np.float32)
                got = K.attention_group(*case.layout(), case.k_buf, case.v_buf, q, g, n_pos, SCALE, window, sinks)
                want = reference(case, q, g, n_pos, SCALE, window, sinks)
                assert_close(got, want, f"{_id(layout)} n_pos {n_pos} window {window} sinks {kind}")
                n_checked += 1
    assert n_checked == len(N_POS) * (len(WINDOWS) + 2) * len(sink_kinds)


def test_a_dominant_sink_takes_the_weight_and_a_negligible_one_none():
    rng = np.random.default_rng(5)
    case = make_kv(rng, F16, 1, 64, 200)
    q = rng.standard_normal((N_REP, 64)).astype(np.float32)
    plain = K.attention_group(*case.layout(), case.k_buf, case.v_buf, q, 0, 200, SCALE, 128)
    low = K.attention_group(*case.layout(), case.k_buf, case.v_buf, q, 0, 200, SCALE, 128,
                            np.full(N_REP, -1e4, np.float32))
    high = K.attention_group(*case.layout(), case.k_buf, case.v_buf, q, 0, 200, SCALE, 128,
                             np.full(N_REP, 40.0, np.float32))
    assert np.array_equal(low, plain)                   # exp(-1e4 - max) adds nothing to the sum
    assert np.abs(high).max() < 1e-12 * np.abs(plain).max()   # the sink holds all the weight
    # one head's sink at 0 with every score far below: that head's output shrinks, the others' do not
    mixed = np.array([-np.inf, 0.0, -np.inf], np.float32)
    scaled = K.attention_group(*case.layout(), case.k_buf, case.v_buf, q * 0, 0, 200, SCALE, 128, mixed)
    flat = K.attention_group(*case.layout(), case.k_buf, case.v_buf, q * 0, 0, 200, SCALE, 128)
    # all scores 0: 128 equal weights, plus the sink's exp(0) = 1 in head 1's denominator
    np.testing.assert_allclose(scaled[1], flat[1] * 128 / 129, rtol=1e-6)
    assert np.array_equal(scaled[[0, 2]], flat[[0, 2]])


# grouped layouts (the rows share loads) and one that runs row by row
GROUP_LAYOUTS = [(F16, 32), (F16, 64), (F16, 128), (Q8_0, 32), (Q8_0, 64), (Q8_0, 128), (F32, 64), (F16, 48)]
ROW_SETS = {
    "prefill": list(range(290, 298)),          # consecutive rows, windows share most positions
    "start": list(range(1, 9)),                # windows still cover everything
    "spread": [5, 40, 200, 201, 333],          # small windows here share no position
    "tile-edges": [15, 16, 17, 31, 32, 33],
}


@pytest.mark.parametrize("layout", GROUP_LAYOUTS, ids=_id)
def test_row_group_equals_single_rows_bitwise(layout):
    kv_type, hd = layout
    rng = np.random.default_rng(11 * hd + kv_type)
    case = make_kv(rng, kv_type, 2, hd, 340)
    for n_rep in (1, 3, 8):
        sinks = rng.standard_normal(n_rep).astype(np.float32)
        for name, n_pos in ROW_SETS.items():
            q = rng.standard_normal((len(n_pos), n_rep, hd)).astype(np.float32)
            for window in (0, 1, 7, 16, 37, 128, 1000):
                for s in (None, sinks):
                    for g in (0, 1):
                        group = K.attention_row_group(*case.layout(), case.k_buf, case.v_buf, q, g, n_pos, SCALE,
                                                      window, s)
                        for i, p in enumerate(n_pos):
                            one = K.attention_group(*case.layout(), case.k_buf, case.v_buf, q[i], g, p, SCALE,
                                                    window, s)
                            assert np.array_equal(group[i], one), (
                                f"{_id(layout)} rep {n_rep} {name} row {i} window {window} sinks {s is not None}")


@pytest.mark.parametrize("layout", LAYOUTS, ids=_id)
def test_no_window_and_no_sinks_are_the_plain_call(layout):
    kv_type, hd = layout
    rng = np.random.default_rng(3)
    case = make_kv(rng, kv_type, 1, hd, 161)
    no_sinks = np.full(N_REP, -np.inf, np.float32)
    for n_pos in (1, 16, 17, 161):
        q = rng.standard_normal((N_REP, hd)).astype(np.float32)
        plain = K.attention_group(*case.layout(), case.k_buf, case.v_buf, q, 0, n_pos, SCALE)
        assert np.array_equal(plain, K.attention_group(*case.layout(), case.k_buf, case.v_buf, q, 0, n_pos, SCALE,
                                                       0, None))
        for window in (n_pos, n_pos + 1, 10_000):       # a window that covers the whole history
            assert np.array_equal(plain, K.attention_group(*case.layout(), case.k_buf, case.v_buf, q, 0, n_pos,
                                                           SCALE, window))
        assert np.array_equal(plain, K.attention_group(*case.layout(), case.k_buf, case.v_buf, q, 0, n_pos, SCALE,
                                                       0, no_sinks))
        assert_close(plain, reference(case, q, 0, n_pos, SCALE))


@pytest.mark.parametrize("layout", [(F16, 64), (F16, 128), (Q8_0, 64), (Q8_0, 128)], ids=_id)
def test_a_long_row_in_parts_equals_the_whole_row_with_sinks(layout):
    kv_type, hd = layout
    rng = np.random.default_rng(21)
    case = make_kv(rng, kv_type, 2, hd, 1100)
    for n_rep in (1, 3):
        sinks = (rng.standard_normal(n_rep) * 3).astype(np.float32)
        for n_pos in (17, 1100):
            q = rng.standard_normal((n_rep, hd)).astype(np.float32)
            for s in (None, sinks):
                whole = K.attention_group(*case.layout(), case.k_buf, case.v_buf, q, 1, n_pos, SCALE, 0, s)
                for n_parts in (1, 3):
                    parts = K.attention_in_parts(*case.layout(), case.k_buf, case.v_buf, q, 1, n_pos, SCALE, s,
                                                 n_parts)
                    assert np.array_equal(whole, parts), f"{_id(layout)} n_pos {n_pos} parts {n_parts}"


@pytest.mark.parametrize("layout", LAYOUTS, ids=_id)
def test_nan_before_the_window_changes_nothing(layout):
    """NaN in every K and V position before the rows' windows (q8_0: the blocks' fp16 scales), also
    inside the window's first tile: the outputs are finite and bitwise those of the finite KV. This
    shows those positions never reach a result (masked ones inside the first tile are read from K and
    given weight 0); that whole tiles before the window are not read at all is
    test_a_window_reads_only_its_positions's."""
    kv_type, hd = layout
    rng = np.random.default_rng(8)
    case = make_kv(rng, kv_type, 2, hd, 300)
    n_pos, window = [250, 251, 252, 253], 37
    first = n_pos[0] - window
    k_nan, v_nan = case.k_buf.copy(), case.v_buf.copy()
    for buf, is_k in ((k_nan, True), (v_nan, False)):
        rows = K.kv_rows(*case.layout(), buf, is_k, 0, first).copy()
        if kv_type == F32:
            rows.view(np.float32)[:] = np.nan
        elif kv_type == F16:
            rows.view(np.float16)[:] = np.nan
        else:                                   # every block's fp16 d
            blocks = rows.reshape(first, -1, 34)
            blocks[:, :, :2] = np.frombuffer(np.float16(np.nan).tobytes(), np.uint8)
        K.kv_write_rows(*case.layout(), buf, is_k, 0, rows)
    assert np.isnan(K.attention_group(*case.layout(), k_nan, v_nan, rng.standard_normal((N_REP, hd)).astype(
        np.float32), 0, n_pos[0], SCALE)).all()     # without the window the NaN shows
    q = rng.standard_normal((len(n_pos), N_REP, hd)).astype(np.float32)
    sinks = rng.standard_normal(N_REP).astype(np.float32)
    for g in (0, 1):
        clean = K.attention_row_group(*case.layout(), case.k_buf, case.v_buf, q, g, n_pos, SCALE, window, sinks)
        poisoned = K.attention_row_group(*case.layout(), k_nan, v_nan, q, g, n_pos, SCALE, window, sinks)
        assert np.isfinite(poisoned).all()
        assert np.array_equal(clean, poisoned)
        for i, p in enumerate(n_pos):
            one = K.attention_group(*case.layout(), k_nan, v_nan, q[i], g, p, SCALE, window, sinks)
            assert np.array_equal(one, clean[i])
            assert_close(one, reference(case, q[i], g, p, SCALE, window, sinks))


@pytest.mark.skipif(not sys.platform.startswith("linux") or mmap.PAGESIZE != 4096, reason="mprotect guard: Linux")
def test_a_window_reads_only_its_positions():
    """K bytes before the window's first tile (rows layout: before its first position) and V bytes
    before its first position, in whole pages, are mapped PROT_NONE: a read of any of them kills the
    child process (SIGSEGV). The outputs must also be bitwise those over ordinary buffers."""
    cases = [   # kv_type, head_dim, n_head_kv, window, n_pos of the rows
        [F16, 64, 2, 128, [700, 701, 702]], [F16, 128, 1, 128, [1000]], [F16, 32, 2, 45, [600, 605]],
        [F32, 64, 1, 128, [900, 901]], [F16, 48, 2, 37, [800, 801]], [F32, 80, 1, 100, [700]],
        [Q8_0, 64, 2, 128, [900, 901, 902]], [Q8_0, 128, 1, 60, [1200, 1201]], [Q8_0, 96, 1, 128, [1000]],
    ]
    run = subprocess.run([sys.executable, str(HERE / "attention_guarded_read.py"), json.dumps(cases)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"rc {run.returncode}: {run.stdout[-2000:]}{run.stderr[-2000:]}"
    assert run.stdout.strip() == f"ok {len(cases)}"


def test_bad_arguments_raise_value_errors():
    rng = np.random.default_rng(1)
    case = make_kv(rng, F16, 1, 64, 40)
    q = np.zeros((N_REP, 64), np.float32)
    call = K.attention_group
    with pytest.raises(ValueError, match="window -1 is negative"):
        call(*case.layout(), case.k_buf, case.v_buf, q, 0, 40, SCALE, -1)
    with pytest.raises(ValueError, match=r"sinks must be \(3,\)"):
        call(*case.layout(), case.k_buf, case.v_buf, q, 0, 40, SCALE, 16, np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="sink logit is NaN"):
        call(*case.layout(), case.k_buf, case.v_buf, q, 0, 40, SCALE, 16, np.full(3, np.nan, np.float32))
    with pytest.raises(ValueError, match=r"positions \[0, 41\) need"):
        call(*case.layout(), case.k_buf, case.v_buf, q, 0, 41, SCALE)
    with pytest.raises(ValueError, match="n_pos 0"):
        call(*case.layout(), case.k_buf, case.v_buf, q, 0, 0, SCALE)
    with pytest.raises(ValueError, match="kv head 1"):
        call(*case.layout(), case.k_buf, case.v_buf, q, 1, 40, SCALE)
    with pytest.raises(ValueError, match="window -3 is negative"):
        K.attention_row_group(*case.layout(), case.k_buf, case.v_buf, q[None], 0, [40], SCALE, -3)
    with pytest.raises(ValueError, match="one n_pos per row"):
        K.attention_row_group(*case.layout(), case.k_buf, case.v_buf, q[None], 0, [40, 39], SCALE)
    with pytest.raises(ValueError, match="not split into parts"):
        rows_case = make_kv(rng, F16, 1, 48, 20)
        K.attention_in_parts(*rows_case.layout(), rows_case.k_buf, rows_case.v_buf, np.zeros((1, 48), np.float32),
                             0, 20, SCALE)
