"""folder_holds.held between threads of one process, the races a waiter's message must survive. Session 30's review:
a waiter whose wait ended read holder, since and waiting unlocked, so one that looked while another thread had just
taken the lock but not yet written its name said "held by this server's thread None". Now the hold is its holder's
name, taken and read under one lock. Each race is made to happen with events, no sleep decides an order: a thread's
`clock` (held's only call-out) stops it at the point the race needs."""

from __future__ import annotations

import threading
import time

import pytest
from strata.server.cache.folder_holds import CommitLockHeld, held


class StopsAt:
    """A clock (time.monotonic) whose `n`-th read sets `reached` and then waits for `go` before answering."""

    def __init__(self, n: int) -> None:
        self.n, self.reads = n, 0
        self.reached, self.go = threading.Event(), threading.Event()

    def __call__(self) -> float:
        self.reads += 1
        if self.reads == self.n:
            self.reached.set()
            assert self.go.wait(30), "the test never let this clock go on"
        return time.monotonic()


def test_a_wait_that_ends_while_another_thread_is_taking_the_hold_names_no_thread_none(tmp_path):
    # The taker's second clock read is where the old held() had the lock but had not yet written its name.
    taking, had = StopsAt(2), []

    def take() -> None:
        with held(str(tmp_path), 30.0, clock=taking):
            had.append(threading.current_thread().name)

    taker = threading.Thread(target=take, name="strata-test-taker", daemon=True)
    taker.start()
    assert taking.reached.wait(10)
    try:
        with held(str(tmp_path), 0.05):   # before: CommitLockHeld "... this server's thread None ..."
            had.append(threading.current_thread().name)
    except CommitLockHeld as exc:
        assert "None" not in str(exc) and "strata-test-taker" in str(exc), str(exc)
        raise
    finally:
        taking.go.set()
        taker.join(10)
    # the taker had not taken it: this thread had it, then the taker
    assert had == [threading.current_thread().name, "strata-test-taker"]


def test_a_hold_let_go_as_a_wait_reaches_its_deadline_is_had(tmp_path):
    holding, let_go, gone = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        with held(str(tmp_path), 30.0):
            holding.set()
            assert let_go.wait(30)
        gone.set()

    holder = threading.Thread(target=hold, name="strata-test-holder", daemon=True)
    holder.start()
    assert holding.wait(10)

    def clock() -> float:   # the waiter's look at the clock once its wait ended: the holder lets go right then
        now = time.monotonic()
        if now - began >= 0.05:
            let_go.set()
            assert gone.wait(10)
        return now

    began = time.monotonic()
    with held(str(tmp_path), 0.05, clock=clock) as h:
        assert h.holder == threading.current_thread().name
    holder.join(10)


def test_a_wait_past_a_hold_names_its_thread_and_how_long_it_has_held(tmp_path):
    holding, let_go = threading.Event(), threading.Event()

    def hold() -> None:
        with held(str(tmp_path), 30.0):
            holding.set()
            let_go.wait(30)

    holder = threading.Thread(target=hold, name="strata-test-holder", daemon=True)
    holder.start()
    assert holding.wait(10)
    try:
        with pytest.raises(CommitLockHeld, match=r"held by this server's thread 'strata-test-holder' for \d+\.\d s "
                                                 r"\(waited 0\.\d s"):
            with held(str(tmp_path), 0.05):
                pass
    finally:
        let_go.set()
        holder.join(10)
