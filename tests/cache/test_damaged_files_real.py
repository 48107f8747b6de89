"""Damaged conversation-cache files on the real engine: an image of 600 tokens (a header, then three
KV chunks of 256 / 256 / 88 tokens, each with its CRC) and its sidecar are written by a real cache,
then damaged one way each: cut at every section boundary and at random offsets, bytes flipped in the
header, the token ids, the KV and the checksums, the header rewritten for another model / KV type /
layout with every checksum made to match, files of zero bytes, folders where the files should be, and
sidecars with numbers no integer holds. Each time: the cache opens, the damage is found before any
damaged byte is written into a context (only the whole valid chunks before it, with the restore ladder),
it is counted (skipped at open, or damaged at restore) and logged once, and the continuation is the
fresh read's, bit for bit. Not here: the same on the simulated engine (test_faults.py)."""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.disk import DiskLevel
from strata.server.cache.memory import FixedMemory

from tests.cache.test_engine_equality import Clock, fresh, greedy

engine_mod = pytest.importorskip("strata.engine")
snapshot = pytest.importorskip("strata.engine.snapshot")
PIECE = 64 << 10
N_HISTORY = 600


class Watched:
    """The engine, with every KV write into a context recorded: (tokens, whether the engine took it)."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.writes: list[tuple[int, bool]] = []

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def restorer(self, ctx: int):
        return snapshot.Restorer(self, ctx)

    def kv_write_checked(self, ctx, tokens, data, crc) -> bool:
        ok = self._engine.kv_write_checked(ctx, tokens, data, crc)
        self.writes.append((len(tokens), bool(ok)))
        return ok

    def kv_write(self, ctx, tokens, data) -> None:
        self.writes.append((len(tokens), True))
        self._engine.kv_write(ctx, tokens, data)


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    return engine_mod.Engine(tiny_model_factory(), n_ctx=2048, n_slots=1, n_threads=1)


def open_cache(engine, folder, environ=None, sessions=None) -> ConversationCache:
    values = {"conversation_cache_mib": 0, "conversation_cache_cold_mib": 64, "conversation_cache_cold_dir": str(folder),
              "conversation_cache_min_free_mib": 0, "conversation_cache_park_min_free_mib": 0,
              "conversation_cache_sessions_dir": str(sessions or folder.parent / "sessions")}
    return ConversationCache(CacheConfig.from_values(values, environ or {}), engine, memory=FixedMemory(100_000),
                             clock=Clock(), piece_bytes=PIECE)


HISTORY = [random.Random(5).randrange(3, 500) for _ in range(N_HISTORY)]
PROMPT = HISTORY + [7, 8, 9]


@pytest.fixture(scope="module")
def pristine(engine, tmp_path_factory):
    """(image bytes, sidecar dict, header, file names) of the history parked in a cold level."""
    folder = tmp_path_factory.mktemp("pristine")
    cache = open_cache(engine, folder)
    engine.truncate(1, 0)
    engine.prefill(1, HISTORY)
    assert cache.park(1, "overwrite").destination == "disk"
    cache.flush()
    cache.close(persist=False)
    (img,) = folder.glob("*.img")
    (side,) = folder.glob("*.json")
    data = img.read_bytes()
    header = snapshot.read_header(data)
    assert header.n_chunks == 3 and header.chunk_tokens == 256 and len(data) > 2 * PIECE
    return data, json.loads(side.read_bytes()), header, (img.name, side.name)


def boundaries(header) -> dict[str, int]:
    """Where each section of the image starts (snapshot.py's format)."""
    fixed = struct.calcsize("<8sII32sIIIIQIQ")
    out = {"magic": 0, "version": 8, "header_size": 12, "model_id": 16, "kv_type": 48, "n_layer": 52,
           "kv_dim": 56, "row_bytes": 60, "bytes_per_token": 64, "chunk_tokens": 72, "n_tokens": 76,
           "token_ids": fixed, "header_crc": header.header_size - 4}
    pos = header.header_size
    for i in range(header.n_chunks):
        out[f"chunk{i}_kv"] = pos
        pos += header.chunk_bytes(i)
        out[f"chunk{i}_crc"] = pos - 4
    out["end"] = pos
    return out


def with_checksums(data: bytes, sidecar: dict) -> dict:
    """The sidecar rewritten so that its piece CRCs match `data` (a consistent forgery)."""
    crcs = [zlib.crc32(data[i:i + PIECE]) for i in range(0, len(data), PIECE)]
    return {**sidecar, "piece_crc32": crcs, "image_bytes": len(data)}


def header_rewritten(data: bytes, header, offset: int, fmt: str, value) -> bytes:
    """`data` with one header field changed and the header's own CRC made to match."""
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    struct.pack_into("<I", out, header.header_size - 4, zlib.crc32(bytes(out[: header.header_size - 4])))
    return bytes(out)


def flipped(data: bytes, at: int, n: int = 1) -> bytes:
    out = bytearray(data)
    for i in range(at, at + n):
        out[i] ^= 0xFF
    return bytes(out)


# -- the cases: (name, damage(folder, data, sidecar, header, names), tokens the ladder may restore) ------

def write(folder, names, data=None, sidecar=None):
    if data is not None:
        (folder / names[0]).write_bytes(data)
    if sidecar is not None:
        (folder / names[1]).write_text(json.dumps(sidecar))


def image_cases(pristine) -> list[tuple[str, bytes | None, dict | None, int]]:
    """(name, image bytes, sidecar, tokens the ladder may keep); None keeps the pristine file."""
    data, side, header, _ = pristine
    at = boundaries(header)
    ct = header.chunk_tokens
    cases: list[tuple[str, bytes | None, dict | None, int]] = []
    for section, pos in at.items():                                  # cut at every section boundary
        if pos < len(data):
            cases.append((f"cut at {section}", data[:pos], None, 0))
    rng = random.Random(7)
    for pos in sorted(rng.sample(range(1, len(data)), 6)):           # and at random offsets
        cases.append((f"cut at byte {pos}", data[:pos], None, 0))
    for section in ("magic", "version", "header_size", "model_id", "kv_type", "n_layer", "kv_dim", "row_bytes",
                    "bytes_per_token", "chunk_tokens", "n_tokens", "token_ids", "header_crc"):
        cases.append((f"flip in {section}", flipped(data, at[section]), None, 0))
    for i in range(header.n_chunks):                                 # the ladder keeps the chunks before
        cases.append((f"flip in chunk{i}_kv", flipped(data, at[f"chunk{i}_kv"] + 100, 3), None, i * ct))
        cases.append((f"flip in chunk{i}_crc", flipped(data, at[f"chunk{i}_crc"]), None, i * ct))
    for name, off, fmt, value in (("model id", 16, "<32s", bytes(32)), ("kv type q8_0", 48, "<I", 8),
                                  ("kv type 77", 48, "<I", 77), ("kv_dim", 56, "<I", header.kv_dim * 2),
                                  ("version", 8, "<I", 2)):
        forged = header_rewritten(data, header, off, fmt, value)     # every checksum made to match
        cases.append((f"header says another {name}", forged, with_checksums(forged, side), 0))
    cases.append(("a zero-byte image", b"", None, 0))
    cases.append(("the sidecar's CRC of piece 1 flipped", None,
                  {**side, "piece_crc32": [c ^ 1 if i == 1 else c for i, c in enumerate(side["piece_crc32"])]},
                  N_HISTORY))   # the image itself is whole: the ladder's chunk CRCs all hold
    return cases


def sidecar_cases(pristine) -> list[tuple[str, bytes]]:
    """(name, sidecar bytes) that must be skipped at open, each counted as damaged."""
    _, side, _, _ = pristine
    raw = json.dumps(side).encode()
    rng = random.Random(11)
    cases = [("a zero-byte sidecar", b""), ("JSON nested 5,000 deep", b"[" * 5000 + b"]" * 5000)]
    cases += [(f"sidecar cut at {n}", raw[:n]) for n in sorted(rng.sample(range(1, len(raw)), 5))]
    for field, value in (("tokens", [2**70] * N_HISTORY), ("tokens", [1e999]), ("n_tokens", 1e999),
                         ("image_bytes", 1e999), ("piece_bytes", 1e999), ("piece_bytes", 0), ("tokens", "abc"),
                         ("piece_crc32", [[1]]), ("created_at", {}), ("meta", "abc"), ("key", None),
                         ("created_at", math.nan), ("sealed_at", math.inf)):
        cases.append((f"sidecar {field}={str(value)[:12]}", json.dumps({**side, field: value}).encode()))
    return cases


def restore_prompt(cache, watched):
    """(tokens restored, the restore's result or None on a miss) for PROMPT into context 0."""
    watched.truncate(0, 0)
    hit = cache.lookup(PROMPT)
    if hit is None:
        return 0, None
    res = cache.restore(hit, 0)
    return res.n_tokens, res


def check_continuation(watched, n_restored):
    assert watched.context_tokens(0) == PROMPT[:n_restored]
    got = greedy(watched._engine, 0, PROMPT, 3)
    want = fresh(watched._engine, PROMPT, 3)
    assert got[0] == want[0] and np.array_equal(got[1], want[1])


def warnings_naming(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and name in r.getMessage()]


@pytest.mark.parametrize("ladder", [True, False], ids=["ladder", "no_ladder"])
def test_every_damaged_image_is_found_before_the_engine_takes_it(engine, pristine, tmp_path, caplog, ladder):
    data, side, header, names = pristine
    failures = []
    for i, (name, bad_image, bad_sidecar, may_keep) in enumerate(image_cases(pristine)):
        folder = tmp_path / f"case{i}"
        folder.mkdir()
        write(folder, names, data if bad_image is None else bad_image, side if bad_sidecar is None else bad_sidecar)
        caplog.clear()
        watched = Watched(engine)
        with caplog.at_level(logging.INFO, logger="strata.cache"):
            cache = open_cache(watched, folder, environ={} if ladder else {"STRATA_RESTORE_LADDER": "0"})
            n, res = restore_prompt(cache, watched)
            problems = []
            try:
                check_continuation(watched, n)
            except AssertionError as e:
                problems.append(f"continuation differs from a fresh read: {e}")
            again, _ = restore_prompt(cache, watched)             # the damaged entry is never tried twice
        keep = may_keep if ladder else 0
        cold = cache.cascade.levels[0]
        counted = cold.skipped["damaged"] + cold.skipped["foreign"] + cache.damaged
        taken = sum(t for t, ok in watched.writes if ok)
        if not ladder and not all(ok for _, ok in watched.writes):   # without the ladder nothing unchecked is fed
            problems.append(f"a damaged chunk was handed to the engine: {watched.writes}")
        if n != keep or taken > keep or again != 0:
            problems.append(f"restored {n} (engine took {taken}, then {again}), the valid prefix is {keep}")
        if counted != 1:
            problems.append(f"counted {counted} times (skipped {dict(cold.skipped)}, damaged {cache.damaged})")
        if 'reason="damaged"} 1' not in cache.metrics_text() and "damaged_total 1" not in cache.metrics_text():
            problems.append("not in the metrics")
        logged = warnings_naming(caplog, names[0]) + warnings_naming(caplog, names[1])
        if len(logged) != 1:
            problems.append(f"logged {len(logged)} times: {logged}")
        cache.close(persist=False)
        if problems:
            failures.append(f"{name}: " + "; ".join(problems))
    assert not failures, "\n".join(failures)


def test_every_damaged_sidecar_is_skipped_at_open_and_counted(engine, pristine, tmp_path, caplog):
    data, _, _, names = pristine
    failures = []
    for i, (name, raw) in enumerate(sidecar_cases(pristine)):
        folder = tmp_path / f"case{i}"
        folder.mkdir()
        write(folder, names, data)
        (folder / names[1]).write_bytes(raw)
        caplog.clear()
        try:
            with caplog.at_level(logging.INFO, logger="strata.cache"):
                cache = open_cache(engine, folder)
        except Exception as e:   # the server's load fails with it: no model, no answers
            failures.append(f"{name}: the cache did not open: {type(e).__name__}: {e}")
            continue
        cold = cache.cascade.levels[0]
        if cold.skipped["damaged"] != 1 or cold.entries:
            failures.append(f"{name}: skipped {dict(cold.skipped)}, indexed {len(cold.entries)}")
        if len(warnings_naming(caplog, names[1])) != 1:
            failures.append(f"{name}: not logged once")
        n, _ = restore_prompt(cache, Watched(engine))
        if n:
            failures.append(f"{name}: restored {n} tokens")
        cache.close(persist=False)
        # removed: the image (it has the snapshot magic), and the sidecar when it begins as Strata writes one
        left = [] if raw.startswith(b'{"format": "strata-conv-sidecar"') else [names[1]]
        if sorted(p.name for p in folder.iterdir()) != left:
            failures.append(f"{name}: left {sorted(p.name for p in folder.iterdir())}, expected {left}")
    assert not failures, "\n".join(failures)


def test_folders_where_the_files_should_be_are_skipped(engine, pristine, tmp_path, caplog):
    data, side, _, names = pristine
    for which in (0, 1):
        folder = tmp_path / f"dir{which}"
        folder.mkdir()
        write(folder, names, data, side)
        target = folder / names[which]
        target.unlink()
        target.mkdir()
        (target / "inside").write_bytes(b"x")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="strata.cache"):
            cache = open_cache(engine, folder)
        cold = cache.cascade.levels[0]
        assert not cold.entries and sum(cold.skipped.values()) == 1, dict(cold.skipped)
        assert len(warnings_naming(caplog, names[1])) == 1
        assert restore_prompt(cache, Watched(engine))[0] == 0
        cache.close(persist=False)


def test_a_file_where_the_cold_folder_should_be_turns_the_level_off(engine, tmp_path, caplog):
    not_a_folder = tmp_path / "cold"
    not_a_folder.write_bytes(b"x")
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache = open_cache(engine, not_a_folder)
    assert not [lv for lv in cache.cascade.levels if isinstance(lv, DiskLevel)]
    assert any("the level is off" in r.getMessage() for r in caplog.records)
    engine.truncate(1, 0)
    engine.prefill(1, HISTORY)
    cache.park(1, "overwrite")        # nowhere to keep it: discarded, never an error
    cache.close(persist=False)
    assert not_a_folder.read_bytes() == b"x"
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_folder_put_in_place_of_an_indexed_image_is_a_damaged_restore_left_alone(engine, pristine, tmp_path, caplog):
    """After the index: the restore reads a folder (counted damaged, the prompt read again) and discarding
    the entry leaves the folder (it raised IsADirectoryError out of the restore, and out of a session's
    DELETE as a 500)."""
    data, side, _, names = pristine
    write(tmp_path, names, data, side)
    cache = open_cache(engine, tmp_path)
    image = tmp_path / names[0]
    image.unlink()
    image.mkdir()
    watched = Watched(engine)
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        n, res = restore_prompt(cache, watched)
    assert n == 0 and cache.damaged == 1 and not watched.writes
    assert "Is a directory" in res.reason or "damaged" in res.reason, res
    assert len(warnings_naming(caplog, names[0])) == 1
    assert image.is_dir() and not (tmp_path / names[1]).exists() and cache.lookup(PROMPT) is None
    cache.close(persist=False)


def test_deleting_a_session_whose_image_is_a_folder(engine, tmp_path):
    cache = open_cache(engine, tmp_path / "cold", sessions=tmp_path / "sessions")
    engine.truncate(0, 0)
    engine.prefill(0, HISTORY[:300])
    cache.save_session("s1", 0)
    image = Path(cache.sessions.entry("s1").image_path)
    image.unlink()
    image.mkdir()
    assert cache.delete_session("s1") is True
    assert image.is_dir() and cache.sessions.list() == []
    cache.close(persist=False)
