"""Damaged files: truncated, flipped byte (restore ladder on and off), another model's image, a
sidecar without its image and the reverse, a full disk, a process killed during a spill. The right
answer every time, nothing crashes, the damaged entry counted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from strata.server.cache.fileio import FullDiskIO

from tests.cache.conftest import history, park_history
from tests.cache.sim_engine import SimEngine

from .test_park_restore import continue_from_cache, fresh_continuation

COLD = {"conversation_cache_mib": 0, "conversation_cache_cold_mib": 100}


def one_cold_entry(make_cache, h, **kw):
    cache = make_cache(**{**COLD, **kw})
    park_history(cache, h)
    cache.flush()
    cold = cache.cascade.levels[0]
    (entry,) = cold.entries.values()
    return cache, cold, entry


def reopen(make_cache, **kw):
    return make_cache(**{**COLD, **kw})


def stat_all(folder):
    return {n: (os.stat(os.path.join(folder, n)).st_mtime_ns, os.path.getsize(os.path.join(folder, n)))
            for n in sorted(os.listdir(folder))}


def test_truncated_image_is_skipped_at_open_and_counted(make_cache):
    h = history(1, 60)
    cache, cold, entry = one_cold_entry(make_cache, h)
    with open(entry.image_path, "r+b") as f:
        f.truncate(entry.image_bytes // 2)
    before = stat_all(cold.folder)
    again = reopen(make_cache)
    lvl = again.cascade.levels[0]
    assert not lvl.entries and lvl.skipped["damaged"] == 1 and lvl.removed["damaged"] == 1
    assert len(before) == 2 and stat_all(cold.folder) == {}  # the damaged pair Strata wrote is removed on open
    prompt = h + [1, 2]
    hit, res, out, read = continue_from_cache(again, prompt)
    assert hit is None and out == fresh_continuation(prompt) and read == len(prompt)
    assert "(0 entries, 1 removed)" in again.describe()   # skipped, then removed: said once, as removed


def test_flipped_byte_restores_the_longest_valid_prefix(make_cache, caplog):
    h = history(2, 60)
    cache, cold, entry = one_cold_entry(make_cache, h)
    with open(entry.image_path, "r+b") as f:  # damage the KV of token ~40
        f.seek(entry.image_bytes - 20 * 16384)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    again = reopen(make_cache)
    prompt = h + [1, 3]
    with caplog.at_level("WARNING", logger="strata.cache"):
        hit, res, out, read = continue_from_cache(again, prompt)
    assert hit.level == "cold" and res.ladder and 0 < res.n_tokens < 60 and res.n_tokens % 4 == 0
    # the warning names the file and says what happened to the prompt and the entry
    (msg,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert entry.image_path in msg and "fails its checksum" in msg
    assert f"its first {res.n_tokens} tokens restored" in msg and msg.endswith("the entry is deleted")
    assert read == len(prompt) - res.n_tokens  # only the rest is read
    assert out == fresh_continuation(prompt)
    assert again.damaged == 1 and again.ladder_restores == 1
    assert not again.cascade.levels[0].entries  # the damaged image is discarded after use
    assert os.listdir(cold.folder) == []


def test_flipped_byte_without_ladder_reads_everything(make_cache):
    h = history(3, 60)
    cache, cold, entry = one_cold_entry(make_cache, h)
    with open(entry.image_path, "r+b") as f:
        f.seek(entry.image_bytes - 100)
        f.write(b"\x00\x01\x02")
    again = reopen(make_cache, environ={"STRATA_RESTORE_LADDER": "0"})
    prompt = h + [1, 3]
    hit, res, out, read = continue_from_cache(again, prompt)
    assert res.n_tokens == 0 and not res.ladder and read == len(prompt)
    assert out == fresh_continuation(prompt) and again.damaged == 1


def test_damaged_header_is_never_trusted(make_cache):
    h = history(4, 30)
    cache, cold, entry = one_cold_entry(make_cache, h)
    with open(entry.image_path, "r+b") as f:
        f.write(b"XXXXXXXX")
    again = reopen(make_cache)
    prompt = h + [1, 3]
    hit, res, out, read = continue_from_cache(again, prompt)
    assert res.n_tokens == 0 and "header" in res.reason and read == len(prompt)
    assert out == fresh_continuation(prompt)


def test_another_models_files_are_skipped_and_left_alone(make_cache, folders):
    h = history(5, 30)
    other = make_cache(engine=SimEngine(model_id="sim-model-b"), **COLD)
    park_history(other, h)
    other.flush()
    before = stat_all(folders["cold"])
    mine = reopen(make_cache)
    assert not mine.cascade.levels[0].entries and mine.cascade.levels[0].skipped["foreign"] == 1
    assert stat_all(folders["cold"]) == before
    prompt = h + [1]
    hit, res, out, _ = continue_from_cache(mine, prompt)
    assert hit is None and out == fresh_continuation(prompt)


def test_another_models_image_under_our_sidecar_is_not_restored(make_cache, folders):
    h = history(6, 30)
    cache, cold, entry = one_cold_entry(make_cache, h)
    foreign = SimEngine(model_id="sim-model-b")
    foreign.prefill(0, h)
    with open(entry.image_path, "wb") as f:  # same size, another model's bytes
        f.write(foreign.snapshot(0))
    again = reopen(make_cache)
    prompt = h + [1]
    hit, res, out, _ = continue_from_cache(again, prompt)
    assert res.n_tokens == 0 and "another model" in res.reason
    assert out == fresh_continuation(prompt) and again.damaged == 1


def test_sidecar_without_image_and_image_without_sidecar(make_cache, folders):
    h1, h2 = history(7), history(8)
    cache = make_cache(**COLD)
    park_history(cache, h1)
    park_history(cache, h2)
    cache.flush()
    e1, e2 = sorted(cache.cascade.levels[0].entries.values(), key=lambda e: e.key)
    os.remove(e1.image_path)
    os.remove(e2.sidecar_path)
    again = reopen(make_cache)
    lvl = again.cascade.levels[0]
    assert not lvl.entries
    assert lvl.skipped["orphan_sidecar"] == 1 and lvl.skipped["orphan_image"] == 1
    for h in (h1, h2):
        prompt = h + [1]
        hit, res, out, _ = continue_from_cache(again, prompt)
        assert hit is None and out == fresh_continuation(prompt)


def test_full_disk_during_spill_is_counted_and_leaves_nothing(make_cache, folders):
    io = FullDiskIO(capacity=300_000)  # less than one image
    cache = make_cache(io=io, **COLD)
    r = park_history(cache, history(9))
    assert r.destination == "disk"
    cache.flush()
    assert cache.spill_failures == 1 and cache.parks["discard"] == 1
    assert os.listdir(folders["cold"]) == []
    prompt = history(9) + [1]
    hit, res, out, _ = continue_from_cache(cache, prompt)
    assert hit is None and out == fresh_continuation(prompt)
    assert "spill_failures_total 1" in cache.metrics_text()


KILLED_SPILL = textwrap.dedent("""
    import os, sys
    from strata.server.cache import CacheConfig, ConversationCache
    from strata.server.cache.fileio import FileIO
    from strata.server.cache.memory import FixedMemory
    from tests.cache.sim_engine import SimEngine, SimFormat
    from tests.cache.conftest import history

    class DieMidWrite(FileIO):
        images = []
        def write(self, f, data):
            if ".img." in f.name and f.name.endswith(".tmp") and f.name not in self.images:
                self.images.append(f.name)
            if len(self.images) == 2 and f.name == self.images[1] and f.tell() > 0:
                f.flush(); os.fsync(f.fileno())
                os._exit(9)  # killed in the middle of the image
            super().write(f, data)

    cfg = CacheConfig.from_values({"conversation_cache_cold_dir": sys.argv[1], "conversation_cache_cold_mib": 100,
                                   "conversation_cache_mib": 0}, {})
    eng = SimEngine(piece_bytes=100_000)
    cache = ConversationCache(cfg, eng, image_format=SimFormat, memory=FixedMemory(100000), io=DieMidWrite())
    eng.prefill(1, history(1)); cache.park(1); cache.flush()   # written whole
    eng.truncate(1, 0); eng.prefill(1, history(2)); cache.park(1); cache.flush()  # killed here
    print("not reached")
""")


def test_process_killed_during_spill_then_restarted(make_cache, folders):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # first process: writes history(1) whole, is killed while writing history(2)
    p = subprocess.run([sys.executable, "-c", KILLED_SPILL, str(folders["cold"])], cwd=root,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 9, p.stderr
    names = os.listdir(folders["cold"])
    assert any(".img." in n and n.endswith(".tmp") for n in names)
    again = reopen(make_cache)
    lvl = again.cascade.levels[0]
    # the killed writer's temporary file is removed at start-up (its pid is not running), not counted
    assert len(lvl.entries) == 1 and not lvl.skipped and len(lvl.swept) == 1
    assert not [n for n in os.listdir(folders["cold"]) if n.endswith(".tmp")]
    for seed, reused in ((1, 40), (2, 6)):  # history(2) only shares the system message with history(1)
        prompt = history(seed) + [1, 5]
        hit, res, out, _ = continue_from_cache(again, prompt)
        assert hit.level == "cold" and res.n_tokens == reused
        assert out == fresh_continuation(prompt)
    # a later spill of the same history is written whole
    park_history(again, history(2))
    again.flush()
    assert len(lvl.entries) == 2
    assert not [n for n in os.listdir(folders["cold"]) if n.endswith(".tmp")]
    shutil.rmtree(folders["cold"])


def test_header_longer_than_a_checksum_piece(make_cache):
    eng = SimEngine(bytes_per_token=64, capacity=20_000)
    cache = make_cache(engine=eng, **COLD)
    h = [1] + [100 + i % 5000 for i in range(15_000)]  # a header of ~90 KB, pieces of 64 KiB
    park_history(cache, h)
    cache.flush()
    prompt = h + [1, 2]
    hit, res, out, read = continue_from_cache(cache, prompt)
    assert hit.level == "cold" and res.n_tokens == len(h) and read == 2
    fresh = SimEngine(bytes_per_token=64, capacity=20_000).continue_greedy(0, prompt, 5)
    assert out == fresh and cache.damaged == 0


def test_skipped_files_are_named_in_the_log_with_why(make_cache, folders, caplog):
    h1, h2 = history(11, 60), history(12, 60)
    cache = make_cache(**COLD)
    park_history(cache, h1)
    park_history(cache, h2)
    cache.flush()
    e1, e2 = sorted(cache.cascade.levels[0].entries.values(), key=lambda e: e.key)
    with open(e1.image_path, "r+b") as f:
        f.truncate(1000)
    os.remove(e2.image_path)
    other = make_cache(engine=SimEngine(model_id="sim-model-b"), **COLD)
    park_history(other, history(13, 30))
    other.flush()
    caplog.clear()
    with caplog.at_level("INFO", logger="strata.cache"):
        reopen(make_cache)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2, warnings
    truncated = next(w for w in warnings if os.path.basename(e1.sidecar_path) in w)
    assert "damaged" in truncated and f"is 1000 bytes, the sidecar says {e1.image_bytes}" in truncated
    assert str(folders["cold"]) in truncated
    orphan = next(w for w in warnings if os.path.basename(e2.sidecar_path) in w)
    assert "orphan_sidecar" in orphan and "without its image" in orphan
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert any("1 file(s) of another model" in m for m in infos), infos


def test_entry_removed_by_another_process_is_a_plain_miss(make_cache):
    """Two servers sharing a folder: one removes a file the other indexed at start-up. The docs
    promise a plain miss (not damage, not a restore fallback); it was counted damaged (new-user trial)."""
    h = history(14, 60)
    _, cold, entry = one_cold_entry(make_cache, h)
    other = reopen(make_cache)  # the second server indexes the same folder
    os.remove(entry.image_path)  # the first server evicts or supersedes it
    os.remove(entry.sidecar_path)
    prompt = h + [1, 3]
    hit = other.lookup(prompt)
    res = other.restore(hit, 2)
    assert res.untouched and res.n_tokens == 0 and "removed since start-up" in res.reason
    assert other.damaged == 0 and not other.cascade.levels[0].entries
    assert other.lookup(prompt) is None


def test_image_truncated_while_running_is_named_truncated(make_cache, caplog):
    """A file cut short after start-up (a disk full mid-copy by another tool, a user's truncate): the
    warning said only 'piece 1 fails its checksum' (a trial), though the size check had seen it."""
    h = history(15, 60)
    cache, cold, entry = one_cold_entry(make_cache, h)
    with open(entry.image_path, "r+b") as f:
        f.truncate(entry.image_bytes // 2)
    prompt = h + [1, 3]
    with caplog.at_level("WARNING", logger="strata.cache"):
        hit, res, out, read = continue_from_cache(cache, prompt)
    assert hit.level == "cold" and res.ladder and res.n_tokens < 60
    assert out == fresh_continuation(prompt) and read == len(prompt) - res.n_tokens
    (msg,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (f"damaged (image is {entry.image_bytes // 2} bytes, the sidecar says {entry.image_bytes}: truncated "
            "or grown; piece ") in msg, msg
    assert cache.damaged == 1
