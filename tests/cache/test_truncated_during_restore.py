"""An image file truncated by another process while a restore reads it: found as damage, counted, the
entry discarded, the context left holding only checked chunks; never a crash. Until session 20 the image
was memory-mapped, and the pages the truncation took away killed the server with SIGBUS.

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


def test_a_bad_sidecar_checksum_inside_a_long_read_still_restores_every_sound_chunk(tiny_model_factory, tmp_path):
    """The validation pass reads a megabyte at a time and stops at the first sidecar piece that fails; the
    restore ladder then reads the rest of that read itself, and the engine's per-chunk CRCs keep every sound
    chunk (here all of them: only the sidecar's checksum of piece 1 is wrong)."""
    import json as json_mod

    from strata.engine import Engine

    from tests.cache.truncated_restore_child import open_cache

    folder = tmp_path / "cold"
    folder.mkdir()
    engine = Engine(str(tiny_model_factory(**MODEL)), n_ctx=2048, n_slots=1, n_threads=1)
    history = [3 + i % 500 for i in range(N_HISTORY)]
    cache = open_cache(engine, folder)
    engine.prefill(1, history)
    assert cache.park(1, "overwrite").destination == "disk"
    cache.flush()
    cache.close(persist=False)
    (sidecar,) = folder.glob("*.json")
    side = json_mod.loads(sidecar.read_bytes())
    side["piece_crc32"][1] ^= 1
    sidecar.write_text(json_mod.dumps(side))
    cache = open_cache(engine, folder)
    res = cache.restore(cache.lookup(history + [7, 8]), 0)
    assert res.ladder and res.n_tokens == N_HISTORY and cache.damaged == 1, res
    assert engine.context_tokens(0) == history
    cache.close(persist=False)


class FailingRead:
    """The image file, whose reads fail after `good` of them with an error that is not an OSError (a bug
    in the read path, say): the restore must not count what it never checked as checked."""

    def __init__(self, f, good: int) -> None:
        self._f, self.good = f, good

    def __getattr__(self, name):
        return getattr(self._f, name)

    def readinto(self, view) -> int:
        self.good -= 1
        if self.good < 0:
            raise ValueError("the read path failed")
        return self._f.readinto(view)


def test_a_read_path_that_fails_ends_the_restore_as_damage_never_as_checked(tiny_model_factory, tmp_path):
    from strata.engine import Engine, snapshot
    from strata.server.cache.pipeline import restore_file

    from tests.cache.truncated_restore_child import open_cache

    folder = tmp_path / "cold"
    folder.mkdir()
    engine = Engine(str(tiny_model_factory(**MODEL)), n_ctx=2048, n_slots=1, n_threads=1)
    history = [3 + i % 500 for i in range(N_HISTORY)]
    cache = open_cache(engine, folder)
    engine.prefill(1, history)
    assert cache.park(1, "overwrite").destination == "disk"
    cache.flush()
    (entry,) = cache.cascade.levels[0].entries.values()
    for ladder in (False, True):
        with open(entry.image_path, "rb", buffering=0) as f:
            n, v, why = restore_file(engine, 0, FailingRead(f, good=3), entry.tokens, entry.identity.model_id,
                                     entry.image_bytes, entry.piece_bytes, entry.piece_crc32, snapshot, N_HISTORY,
                                     ladder)
        assert not v.complete and "the read path failed" in v.reason, (ladder, n, v, why)
        assert n < N_HISTORY and engine.context_tokens(0) == history[:n], (ladder, n)
    cache.close(persist=False)
