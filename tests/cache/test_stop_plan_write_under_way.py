"""A clean stop's plan made while the spill writer is writing one of the queue's histories (session 42's race).
`stop_writes` holds the writer, which stops no write already begun: that history (K) is written to the first disk
level whatever the plan says. The plan counted it as queued and left it out for RAM's newer histories; written
anyway, the close then counted it as the stop's own write taking room (`_queue_taken`) and let go a newer RAM
history for it: the level kept the least recently used one.

Real files, the simulated engine (60 tokens: 0.94 MiB), RAM 100 MiB, cold 2 MiB (two histories and their sidecars):
K queued first (used first), its image write held by a gate; two newer histories parked to RAM; the stop's plan made
while K's write is held, then the gate let through."""

from __future__ import annotations

import logging
import sys

from strata.server.stop_progress import StopProgress

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_stop_progress_within_an_entry import DEADLINE_S, GatedIO, close_gated, wait_for

N_TOKENS = 60


def _k_held_then_two_in_ram(cache, io, clock) -> None:
    """K (seed 1) parked to the queue, the writer taking it and waiting at the gate; then two histories used since
    (seeds 2 and 3, a second apart) parked to RAM."""
    park_history(cache, history(1, N_TOKENS))
    assert io.waiting.wait(DEADLINE_S)
    cache.park_target = "ram"
    for seed in (2, 3):
        clock.t += 1.0
        assert park_history(cache, history(seed, N_TOKENS)).destination == "ram"


def test_a_write_under_way_at_the_plan_does_not_push_out_newer_histories(make_cache, clock, folders, caplog):
    io = GatedIO()
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100, conversation_cache_cold_mib=2)
    cache = make_cache(io=io, conversation_cache_park="disk", **make)
    _k_held_then_two_in_ram(cache, io, clock)             # the plan keeps the two used since K
    outlook = cache.stop_would_keep([])
    with cache.stop_writes():                             # the plan is made with K's write under way
        pass
    # K's image write still waits at the gate (close_gated lets it through): the race's window
    said = StopProgress(logging.getLogger("strata.test_stop"), every_s=0.0)
    with caplog.at_level(logging.INFO):
        calls = close_gated(cache, io, said)
    cold = make_cache(**make).cascade.levels[-1]
    seeds = sorted(e.tokens[6] for e in cold.entries.values())
    assert seeds == sorted(history(s, N_TOKENS)[6] for s in (2, 3)), seeds   # before: K and 3 kept, 2 let go
    assert outlook == 2
    assert calls[-1][:2] == (3, 2) and calls[-1][-1] == 1, calls   # K written, then evicted by the plan's writes
    last = [r.getMessage() for r in caplog.records if r.name == "strata.test_stop"][-1]
    assert last.startswith("stopping: keeping 2 conversations for the next start"), last
    assert "not written to the cold level" not in caplog.text   # no newer history let go for K


def test_a_write_under_way_is_not_left_out_of_the_stop_s_lines(make_cache, clock):
    """K, written whatever the plan says, is not among the keys the lines leave out (SpillWriter.leave_out): the
    queue's lines counted it only once it was written ("0 of 0", then "1 of 1")."""
    io = GatedIO()
    cache = make_cache(io=io, engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100,
                       conversation_cache_park="disk", conversation_cache_cold_mib=2)
    _k_held_then_two_in_ram(cache, io, clock)
    try:
        with cache.stop_writes():
            pass
    finally:
        calls = close_gated(cache, io)
    assert calls[0][:2] == (0, 1), calls   # the queue's first line counts K, still to be written: before (0, 0)
    assert calls[-1][:2] == (3, 2), calls


def test_a_write_under_way_the_plan_places_lower_moves_down_at_the_close(make_cache, clock, folders):
    """With a warm and a cold level the plan places K, the least recently used, in cold, the newest in warm; K's
    write under way goes to warm all the same. Counted as the stop's own write there, warm kept K and the newest
    went to cold; now the close makes warm's room for the newest, and K moves down to cold, where the plan put it."""
    io = GatedIO()
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100, conversation_cache_warm_mib=1,
                conversation_cache_cold_mib=2)
    cache = make_cache(io=io, conversation_cache_park="disk", **make)
    _k_held_then_two_in_ram(cache, io, clock)
    outlook = cache.stop_would_keep([])
    try:
        with cache.stop_writes():
            pass
    finally:
        close_gated(cache, io)
    warm, cold = make_cache(**make).cascade.levels[1:]
    assert [e.tokens[6] for e in warm.entries.values()] == [history(3, N_TOKENS)[6]]   # before: K (seed 1)
    assert sorted(e.tokens[6] for e in cold.entries.values()) == sorted(history(s, N_TOKENS)[6] for s in (1, 2))
    assert outlook == 3


def test_without_ram_the_queue_s_n_never_grows_back(make_cache, clock):
    """No RAM level: the queue's plan leaves K out for the writes after it (its level lets it go within the stop),
    but K's write is under way and happens. Left out of the lines and then evicted, K left N twice: "0 of 2",
    "0 of 1", then "3 of 2" (N grew back); now K counts from the start and leaves N once, as it is evicted."""
    io = GatedIO()
    cache = make_cache(io=io, engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=0,
                       conversation_cache_park="disk", conversation_cache_cold_mib=2)
    for seed in (1, 2, 3):
        park_history(cache, history(seed, N_TOKENS))   # K first: the writer waits at its first piece
        clock.t += 1.0
    assert io.waiting.wait(DEADLINE_S)
    try:
        with cache.stop_writes():
            pass
    finally:
        calls = close_gated(cache, io)
    assert len(cache.cascade.levels[-1].entries) == 2
    assert [c[1] for c in calls] == sorted((c[1] for c in calls), reverse=True), calls   # before: 2, 1, then 2
    assert calls[-1] == (3, 2, -1, -1, 0, 1), calls


class PlanWindowIO(GatedIO):
    """GatedIO whose first free-space look once `armed` (the queue's plan, made between its lock sections) runs
    `armed` first: the test lets the writer in there."""

    armed = None

    def free_bytes(self, folder: str) -> int | None:
        hook, self.armed = self.armed, None
        if hook is not None:
            hook()
        return super().free_bytes(folder)


def _writer_at(cache, name: str) -> bool:
    """Whether `cache`'s spill writer thread is in function `name` now (blocked there on the cache's lock). Its own
    thread, not the first by name: an earlier test's writer still alive in the same run was found at times."""
    writer = cache._spill._thread
    frame = None if writer is None else sys._current_frames().get(writer.ident)
    while frame is not None and frame.f_code.co_name != name:
        frame = frame.f_back
    return frame is not None


def test_a_write_begun_while_the_queue_s_plan_is_made_counts_from_the_start(make_cache, clock):
    """No RAM level: the queue's plan is worked out between two holds of the cache's lock (its free-space looks are
    I/O). K, taken by the writer just before the stop's hold and waiting for the lock, begins its write there: the
    plan, made over the queue as it was, leaves K out all the same, and the lines left it out and then counted it
    (N grew back: 2, then 3). Now the plan looks at what the writer has taken as it is applied, under the lock."""
    io = PlanWindowIO()
    cache = make_cache(io=io, engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=0,
                       conversation_cache_park="disk", conversation_cache_cold_mib=2)
    # the race's order, made certain: the writer takes K and waits for the lock this thread holds (the one test
    # reaching into the cache: no public call holds the lock across a park and the stop's start)
    cache._lock.acquire()
    held = True
    try:
        for seed in (1, 2, 3):
            park_history(cache, history(seed, N_TOKENS))   # K (seed 1) first
            clock.t += 1.0
        wait_for(lambda: _writer_at(cache, "_spill_turn"))

        def let_the_writer_in() -> None:   # in the plan's free-space look: this thread's hold ends there
            nonlocal held
            cache._lock.release()
            held = False
            assert io.waiting.wait(DEADLINE_S)   # K's image write begun, the plan not yet applied

        io.armed = let_the_writer_in
        try:
            with cache.stop_writes():
                pass
        finally:
            calls = close_gated(cache, io)
    finally:
        if held:
            cache._lock.release()
    assert io.armed is None   # the plan looked, and let the writer in
    assert len(cache.cascade.levels[-1].entries) == 2
    assert [c[1] for c in calls] == sorted((c[1] for c in calls), reverse=True), calls   # before: 2, then 3
    assert calls[-1] == (3, 2, -1, -1, 0, 1), calls
