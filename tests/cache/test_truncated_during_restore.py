"""An image file truncated by another process while a restore reads it: found as damage, counted, the
entry discarded, the context left holding only checked chunks, the cache going on; never a crash. The
image is memory-mapped: until session 20 the pages the truncation took away killed the server with
SIGBUS; now every read of the map is native and guarded (engine_native/src/mapped-read-guard.h).

The truncation comes at a real seam: after the cache opened the file and parsed its header, when it
asks the engine for the restorer (truncated_restore_child.py, in a child process so that a SIGBUS
kills the child, not pytest)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("strata.engine")
HERE = Path(__file__).resolve().parent
N_HISTORY = 1500
CHUNK_TOKENS = 256
# 8 layers x 4 KV heads x 16 dims: 2 KiB of KV a token, so the image (about 3 MiB) is longer than the
# first MiB the restore reads for the header before it asks for the restorer
MODEL = {"n_layer": 8, "n_head_kv": 4}


def run_child(model: Path, folder: Path, cut: int) -> subprocess.CompletedProcess:
    folder.mkdir()
    return subprocess.run([sys.executable, str(HERE / "truncated_restore_child.py"), str(model), str(folder),
                           str(N_HISTORY), str(cut)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("cut", [3 << 19, 4096], ids=["cut_at_1.5MiB", "cut_in_the_header"])
def test_an_image_truncated_while_restored_is_counted_as_damage_not_a_crash(tiny_model_factory, tmp_path, cut):
    run = run_child(tiny_model_factory(**MODEL), tmp_path / "cold", cut)
    assert run.returncode != -signal.SIGBUS, "the server process died of SIGBUS reading a truncated image"
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["truncated"] and got["image_bytes"] > 2 * (1 << 20), got
    assert got["damaged"] == 1 and got["metrics_damaged"], got
    # only whole chunks read before the cut were checked and kept (the restore ladder), and they are the
    # history's; the entry is discarded with its files
    assert got["n_restored"] % CHUNK_TOKENS == 0 and got["n_restored"] < N_HISTORY, got
    assert got["context_is_prefix"], got
    assert got["entries_left"] == 0 and got["files_left"] == [], got
    damage = [w for w in got["warnings"] if "damaged" in w]
    assert len(damage) == 1 and "cut short while read" in damage[0], got["warnings"]
    # the process and the cache go on: the history parked again is restored whole
    assert got["restored_again"] == N_HISTORY and got["again_is_history"], got
