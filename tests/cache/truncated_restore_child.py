"""Run by test_truncated_during_restore.py in a child process (a memory-mapped read of a file cut short
dies with SIGBUS; it must kill this child, not pytest): a cold level holds one history's image; the cache
is opened again (the image indexed whole) and, at the moment the restore has opened the file and asks
the engine for its restorer, another "process" (this hook) truncates the image to `cut` bytes. Prints one
JSON line: what the restore returned, what the cache counted, what the context holds, what it logged.

Usage: python truncated_restore_child.py <model.gguf> <folder> <n history tokens> <cut bytes>
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from strata.engine import Engine, snapshot  # noqa: E402
from strata.server.cache import CacheConfig, ConversationCache  # noqa: E402
from strata.server.cache.memory import FixedMemory  # noqa: E402

PIECE = 64 << 10


class TruncatedWhenRestoring:
    """The engine; when the cache asks it for a restorer (the image file is open by then, not yet read
    past its header), the image is truncated first, as another process sharing the folder could."""

    def __init__(self, engine, image_path: str, cut: int) -> None:
        self._engine = engine
        self.image_path = image_path
        self.cut = cut
        self.truncated = False

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def restorer(self, ctx: int):
        if not self.truncated:  # the first restore only
            os.truncate(self.image_path, self.cut)
            self.truncated = True
        return snapshot.Restorer(self, ctx)


def open_cache(engine, folder: Path) -> ConversationCache:
    values = {"conversation_cache_mib": 0, "conversation_cache_cold_mib": 64, "conversation_cache_cold_dir": str(folder),
              "conversation_cache_min_free_mib": 0, "conversation_cache_park_min_free_mib": 0,
              "conversation_cache_sessions_dir": str(folder.parent / "sessions")}
    return ConversationCache(CacheConfig.from_values(values, {}), engine, memory=FixedMemory(100_000),
                             clock=lambda: 1000.0, piece_bytes=PIECE)


def main(model: str, folder: str, n_history: int, cut: int) -> None:
    folder_path = Path(folder)
    engine = Engine(model, n_ctx=2048, n_slots=1, n_threads=1)
    history = [random.Random(5).randrange(3, 500) for _ in range(n_history)]
    prompt = history + [7, 8, 9]
    cache = open_cache(engine, folder_path)
    engine.prefill(1, history)
    assert cache.park(1, "overwrite").destination == "disk"
    cache.flush()
    cache.close(persist=False)
    (image,) = folder_path.glob("*.img")
    image_bytes = image.stat().st_size

    logged: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: logged.append(record.getMessage())
    logging.getLogger("strata.cache").addHandler(handler)
    hooked = TruncatedWhenRestoring(engine, str(image), cut)
    cache = open_cache(hooked, folder_path)
    assert len(cache.cascade.levels[0].entries) == 1, "the image was indexed whole"
    hit = cache.lookup(prompt)
    res = cache.restore(hit, 0)
    context_is_prefix = engine.context_tokens(0) == prompt[:res.n_tokens]
    entries_left = len(cache.cascade.levels[0].entries)
    files_left = sorted(p.name for p in folder_path.iterdir())
    # and the cache goes on: the history parked again comes back whole from a sound file
    engine.truncate(1, 0)
    engine.prefill(1, history)
    assert cache.park(1, "overwrite").destination == "disk"
    cache.flush()
    again = cache.restore(cache.lookup(prompt), 0)
    print(json.dumps({
        "image_bytes": image_bytes, "truncated": hooked.truncated, "n_restored": res.n_tokens, "ladder": res.ladder,
        "reason": res.reason, "damaged": cache.damaged, "metrics_damaged": "strata_cache_damaged_total 1"
        in cache.metrics_text(), "context_is_prefix": context_is_prefix, "entries_left": entries_left,
        "files_left": files_left, "warnings": logged, "restored_again": again.n_tokens,
        "again_is_history": engine.context_tokens(0) == history[:again.n_tokens]}))
    cache.close(persist=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
