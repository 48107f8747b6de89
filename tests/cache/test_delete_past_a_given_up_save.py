"""A DELETE that waits for a session save whose write hangs, at a stop that gives that save up: the DELETE waited
for the save's lock for ever (the save never frees it), on the event loop's executor, so the process never ended
(the interpreter joins those threads at its exit) after the stop said it gave the save up. Now the DELETE ends with
an OSError (ECANCELED: a 507 that says nothing was done) and the session saved before is still there. Both locks a
DELETE waits for: the cache's `session_writes` (a save from the endpoint) and the session backend's (a rebuilt
session's save, which holds it). Real files, the simulated engine, one write held for real (HangingDiskIO)."""

from __future__ import annotations

import errno
import os
import threading
import types

from strata.server import session_rebuild
from strata.server.cache.fileio import HangingDiskIO
from strata.server.sessions_backend import SessionBackend, _Pending

from tests.cache.conftest import history


def _in_thread(fn) -> tuple[threading.Thread, list]:
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:   # noqa: BLE001 - what it ended with is the point
            out.append(exc)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _saved_then_hung(make_cache, folders, ctx: int):
    io = HangingDiskIO(10**6)
    cache = make_cache(io=io)
    cache.engine.prefill(ctx, history(1, 40))
    cache.save_session("work", ctx)                     # the session saved before
    before = sorted(os.listdir(folders["sessions"]))
    cache.engine.truncate(ctx, 0)
    cache.engine.prefill(ctx, history(2, 60))
    io.hang_after = io.made                             # the next save's first image write hangs
    return io, cache, before


def _gives_up_and_delete_ends(io, cache, folders, before, saving, deleting) -> None:
    assert io.hung.wait(10)
    deleting_t, deleted = deleting
    deleting_t.join(0.5)
    assert deleting_t.is_alive()                        # it waits for the save, as it should while that writes
    cache.close(stall_s=0.5)                            # the stop gives the hung save up
    deleting_t.join(5)
    assert not deleting_t.is_alive(), "the DELETE still waits for a save the stop gave up"
    assert len(deleted) == 1 and isinstance(deleted[0], OSError) and deleted[0].errno == errno.ECANCELED, deleted
    assert "gave it up" in str(deleted[0])
    io.release()                                        # the write returns: the abandoned save writes nothing more
    saving[0].join(10)
    assert sorted(os.listdir(folders["sessions"])) == before   # nothing was deleted: the session saved before is there


def test_a_delete_waiting_for_a_hung_save_ends_when_the_stop_gives_the_save_up(make_cache, folders):
    io, cache, before = _saved_then_hung(make_cache, folders, 1)
    saving = _in_thread(lambda: cache.save_session("work", 1))
    assert io.hung.wait(10)
    deleting = _in_thread(lambda: cache.delete_session("work"))
    _gives_up_and_delete_ends(io, cache, folders, before, saving, deleting)


def test_a_delete_waiting_for_a_rebuilt_sessions_hung_save_ends_too(make_cache, folders):
    io, cache, before = _saved_then_hung(make_cache, folders, 0)
    state = types.SimpleNamespace(cache=cache, scheduler=types.SimpleNamespace(
        table=[types.SimpleNamespace(conversation="")]))
    backend = SessionBackend(state)
    pending = _Pending("work")
    backend._rebuilding.append(pending)
    done = session_rebuild.Rebuilt(60, 0.1)
    saving = _in_thread(lambda: backend._rebuilt(pending, 0, done))   # saves under the backend's lock, as on the worker
    assert io.hung.wait(10)
    deleting = _in_thread(lambda: backend.delete_session("work"))
    _gives_up_and_delete_ends(io, cache, folders, before, saving, deleting)
