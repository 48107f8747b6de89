"""A stop says how far it is while one big history is written, not only between histories: the app ends a stop
that has said nothing for 15 s, and one history of a big model (Qwen3-Coder-30B at 128K tokens: ~12 GiB, ~37 s
at 339 MiB/s) took longer than that to write, so its stop was ended partway with nothing said."""

from __future__ import annotations

import threading
import time

from strata.server.cache.fileio import FileIO

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine

N_TOKENS = 60          # 960 KiB at the simulated engine's 16 KiB a token: 15 pieces of 64 KiB (the real engine's: 16 MiB)
DEADLINE_S = 60.0


def test_the_handover_to_disk_reports_bytes_as_one_history_is_written(make_cache):
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100, conversation_cache_park="ram", conversation_cache_cold_mib=100)
    assert park_history(cache, history(1, N_TOKENS)).destination == "ram"
    size = cache.ram.used_bytes
    assert size >= 10 * PIECE
    calls: list[tuple[int, int, int, int]] = []
    cache.close(progress=lambda *a: calls.append(a))
    assert calls[0] == (0, 1, 0, size) and calls[-1] == (1, 1, size, size)
    within = [c for c in calls if c[0] == 0 and 0 < c[2] < size]
    assert len(within) >= 10, calls          # about one a piece while the one history is written
    assert [c[2] for c in calls] == sorted(c[2] for c in calls)   # never back
    assert len(cache.cascade.levels[-1].entries) == 1


class GatedIO(FileIO):
    """Each write into an image waits until the test lets one more through (a disk slow for real)."""

    def __init__(self) -> None:
        self.gate = threading.Semaphore(0)
        self.waiting = threading.Event()

    def write(self, f, data) -> None:
        if ".img." in f.name and f.name.endswith(".tmp"):   # an image being written, not its sidecar
            self.waiting.set()
            assert self.gate.acquire(timeout=DEADLINE_S), "the test never let this write through"
        super().write(f, data)


def wait_for(what, deadline_s: float = DEADLINE_S) -> None:
    end = time.monotonic() + deadline_s
    while not what():
        assert time.monotonic() < end, "not within the deadline"
        time.sleep(0.01)


def close_gated(cache, io: GatedIO, progress=lambda *a: None) -> list[tuple[int, ...]]:
    """Closes `cache` in a thread with `progress`, whose calls are recorded; once the first is made, every gated write
    is let through. Returns the calls, the close ended."""
    calls: list[tuple[int, ...]] = []

    def recorded(*a: int) -> None:
        calls.append(a)
        progress(*a)

    closing = threading.Thread(target=cache.close, kwargs={"progress": recorded})
    closing.start()
    try:
        wait_for(lambda: len(calls) >= 1)
    finally:
        for _ in range(1000):
            io.gate.release()
        closing.join(DEADLINE_S)
    assert not closing.is_alive()
    return calls


def test_the_spill_writer_s_queue_reports_while_one_history_is_written(make_cache):
    io = GatedIO()
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, conversation_cache_mib=0, conversation_cache_park="disk", conversation_cache_cold_mib=100)
    park_history(cache, history(2, N_TOKENS))          # queued: the writer waits at its first piece
    assert io.waiting.wait(DEADLINE_S)
    calls: list[tuple[int, int, int, int]] = []
    closing = threading.Thread(target=cache.close, kwargs={"progress": lambda *a: calls.append(a)})
    closing.start()
    try:
        wait_for(lambda: len(calls) >= 1)              # said once as the wait begins
        for n in range(1, 4):                          # each piece written is a sign of life
            io.gate.release()
            wait_for(lambda n=n: len(calls) >= 1 + n)
        assert all(c[:2] == (0, 1) for c in calls), calls   # the history is not written yet
    finally:
        for _ in range(100):
            io.gate.release()
        closing.join(DEADLINE_S)
    assert not closing.is_alive()
    assert len(cache.cascade.levels[-1].entries) == 1


def test_the_spill_writer_s_queue_says_all_written_at_its_end(make_cache):
    """A trial's stop with `--conversation-cache-park disk` said "keeping 3 conversations for the next start (0 of
    3 written)" as its last line, then "stopped": the queue's wait told each history before it was written, never
    after the last, so the app's status bar and the log said none was kept while all three were."""
    io = GatedIO()
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, conversation_cache_mib=0,
                       conversation_cache_park="disk", conversation_cache_cold_mib=100)
    park_history(cache, history(2, N_TOKENS))          # queued: the writer waits at its first piece
    park_history(cache, history(3, N_TOKENS))
    assert io.waiting.wait(DEADLINE_S)
    calls = close_gated(cache, io)
    assert len(cache.cascade.levels[-1].entries) == 2
    assert calls[0][:2] == (0, 2) and calls[-1] == (2, 2, -1, -1), calls
