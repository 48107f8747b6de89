"""Fixtures for the cache tests: a cache over the simulated engine, in temporary folders."""

from __future__ import annotations

import json
import os
import weakref

import pytest
from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.memory import FixedMemory

from tests.cache.sim_engine import SimEngine, SimFormat

PIECE = 64 << 10  # small checksum/stream pieces (64 KiB), so an image spans several


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(autouse=True)
def _no_spill_writer_left_behind(monkeypatch):
    """A test closes every cache it opens: an unclosed one's spill writer lives on for the rest of the run (a daemon
    thread idle in its queue, holding the cache, its engine and its folders), and a later test that looks for a
    writer by its name found that one instead of its own (a7bd7b9). Checked after make_cache's own closes, for the
    caches opened during the test alone (noted as each is made; the real class runs): any writer thread started
    meanwhile was blamed, one of a cache opened before it (a module's shared cache) failing whichever test first
    parked there (tests/cache/test_spill_writer_check_owner.py)."""
    opened: weakref.WeakSet[ConversationCache] = weakref.WeakSet()
    init = ConversationCache.__init__

    def noting(self, *args, **kwargs) -> None:
        opened.add(self)   # before its init: one that raises has its writer checked too
        init(self, *args, **kwargs)
    monkeypatch.setattr(ConversationCache, "__init__", noting)
    yield
    left = [t for c in opened if (spill := getattr(c, "_spill", None)) is not None
            and (t := spill._thread) is not None and t.is_alive()]
    assert not left, f"{len(left)} spill writer(s) left running: close the caches this test opened"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def folders(tmp_path):
    d = {k: tmp_path / k for k in ("warm", "cold", "segments", "system", "sessions")}
    return d


@pytest.fixture
def make_cache(folders, clock):
    made = []

    def make(engine=None, memory=None, io=None, environ=None, **options):
        values = {
            "conversation_cache_cold_dir": str(folders["cold"]),
            "conversation_cache_warm_dir": str(folders["warm"]),
            "conversation_cache_segment_dir": str(folders["segments"]),
            "conversation_cache_system_prompt_dir": str(folders["system"]),
            "conversation_cache_sessions_dir": str(folders["sessions"]),
            "conversation_cache_min_free_mib": 2560,
            "conversation_cache_park_min_free_mib": 512,
        }
        values.update(options)
        cfg = CacheConfig.from_values(values, environ or {})
        cache = ConversationCache(cfg, engine or SimEngine(), image_format=SimFormat,
                                  memory=memory or FixedMemory(100_000), io=io, clock=clock, piece_bytes=PIECE)
        made.append(cache)
        return cache

    yield make
    for c in made:
        c.close(persist=False)


def conversation(seed: int, n_messages: int = 3, words: int = 10, opener: int = 1, system=None) -> list[int]:
    """Tokens shaped like a ChatML history: each message starts with the opener token."""
    toks: list[int] = []
    sys_msg = system if system is not None else [opener, 5, 6, 7, 8]
    toks += sys_msg
    for m in range(n_messages):
        toks.append(opener)
        toks += [100 + (seed * 7919 + m * 31 + i) % 5000 for i in range(words)]
    return toks


def history(seed: int, n_tokens: int = 40, opener: int = 1) -> list[int]:
    """A history of exactly n_tokens: system message [opener,5,6,7,8], then messages of 9 tokens."""
    toks = [opener, 5, 6, 7, 8]
    i = 0
    while len(toks) < n_tokens:
        toks.append(opener if (len(toks) - 5) % 9 == 0 else 100 + (seed * 7919 + i * 31) % 5000)
        i += 1
    return toks


def park_history(cache, tokens, ctx: int = 1):
    """Fill context `ctx` with `tokens` (a fresh read) and park it, as the scheduler would."""
    eng = cache.engine
    eng.truncate(ctx, 0)
    eng.prefill(ctx, tokens)
    return cache.park(ctx, "test")


def save_history(cache, name: str, seed: int, n_tokens: int = 50) -> dict:
    """Fill context 1 with a fresh read of history(seed, n_tokens) and save it as the session `name` (50 tokens of
    the simulated engine: ~0.8 MiB)."""
    cache.engine.truncate(1, 0)
    cache.engine.prefill(1, history(seed, n_tokens))
    return cache.save_session(name, 1)


def conversation_images(folder) -> list[str]:
    """The conversation images in a level's folder, by name."""
    return sorted(p.name for p in folder.glob("strata-conv-*.img"))


def folder_bytes(folder) -> int:
    """What the files directly in `folder` hold."""
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))


def saved_before_models(folder, name: str) -> None:
    """Make the session `name` this version saved in `folder` as a Strata before per-model sessions wrote it: its
    files `strata-session-<name>.json` and `strata-session-<name>@<generation>.img`, the sidecar's key the bare name
    (the differences: the model's mark in the names, session_store.MODEL_MARK, and the model's name in `meta`)."""
    from strata.server.cache.session_store import MODEL_MARK, SESSION_PREFIX
    stem = f"{SESSION_PREFIX}{name}{MODEL_MARK}"
    (sidecar,) = [n for n in os.listdir(folder) if n.startswith(stem) and n.endswith(".json")]
    tag = sidecar[len(stem):-len(".json")]
    d = json.loads((folder / sidecar).read_text())
    assert d["key"] == f"{name}{MODEL_MARK}{tag}", d["key"]
    d["key"], d["image"] = name, d["image"].replace(f"{MODEL_MARK}{tag}@", "@")
    d["meta"] = {}                                  # nor did it record the model's name
    for n in os.listdir(folder):
        if n.startswith(stem) and n.endswith(".img"):
            os.replace(folder / n, folder / n.replace(f"{MODEL_MARK}{tag}@", "@"))
    (folder / f"{SESSION_PREFIX}{name}.json").write_text(json.dumps(d))
    os.remove(folder / sidecar)
