"""What the server says while a clean stop writes its conversations to disk: one INFO line at most every
`every_s` seconds, "stopping: keeping N conversations for the next start (X of Y GiB written)". The app
(app/supervisor.py) waits for a stop while these lines come and ends a server that has gone quiet; a big
model's histories take minutes (Qwen3-Coder-30B, five 32K contexts: ~15.7 GB, ~46 s at 339 MiB/s).

Not here: the writing (cache.close calls this after each entry) or the wait (app/restart_policy.wait_for_stop).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strata.server.cache.sessions import SaveUnderWay

PROGRESS_EVERY_S = 2.0   # under the app's stall limit (15 s) with room for one slow entry between lines
PREFIX = "stopping: keeping"   # how a progress line begins (the app shows it in its status bar)


def amount(n_bytes: int, of: int) -> str:
    """'1.2 of 4.7 GiB', or in MiB when the whole is under a GiB."""
    unit, size = ("GiB", 1 << 30) if of >= 1 << 30 else ("MiB", 1 << 20)
    return f"{n_bytes / size:.1f} of {of / size:.1f} {unit}"


def progress_line(n: int, bytes_done: int, n_bytes: int, n_done: int = 0, n_refused: int = 0,
                  n_evicted: int = 0) -> str:
    """Sizes below 0: not known (the spill writer's queue, captures parked to disk): counted in entries, `n_done`
    of those to write (`n` + `n_evicted`). `n_evicted`: histories this stop wrote that a later write of it evicted
    for a disk budget, not among the `n` kept (session 31's soak said "6 of 6 written" and kept 5). `n_refused`:
    histories every disk level refused (lost), not among the `n` kept. Both said apart. No conversation and nothing
    written: the queue writes prompt prefixes alone (the segment tier, the system-prompt cache)."""
    if n == 0 and n_done == 0 and n_bytes <= 0 and not n_evicted and not n_refused:
        return "stopping: writing the prompt prefixes kept for the next start (segment tier, system-prompt cache)"
    what = "1 conversation" if n == 1 else f"{n} conversations"
    done = f"{n_done} of {n + n_evicted}" if n_bytes < 0 else amount(bytes_done, n_bytes)
    evicted = f"; {n_evicted} of them evicted by the disk budget" if n_evicted else ""
    refused = f"; {n_refused} refused by the disk, lost" if n_refused else ""
    return f"{PREFIX} {what} for the next start ({done} written{evicted}{refused})"


class StopProgress:
    """A `progress(n_done, n, bytes_done, n_bytes)` callback for cache.close that logs at most every `every_s`
    (the first call and the last always). It is called only when a write has ended, so a stalled write makes
    no line: the app's sign to end the server."""

    def __init__(self, log: logging.Logger, every_s: float = PROGRESS_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.every_s, self.clock = log, every_s, clock
        self._said_at: float | None = None
        self._said = ""

    def __call__(self, n_done: int, n: int, bytes_done: int, n_bytes: int, n_refused: int = 0,
                 n_evicted: int = 0) -> None:
        # the last line is said at once, but not again within the interval: once the spill writer's queue is all
        # written, each write after it (before the hand-down's first line) tells the same counts (session 32's
        # soak: six identical "... (2 of 2 written; 1 of them evicted ...)" lines in 44 ms)
        now = self.clock()
        line = progress_line(n, bytes_done, n_bytes, n_done, n_refused, n_evicted)
        if self._said_at is not None and now - self._said_at < self.every_s and (n_done < n + n_evicted
                                                                                 or line == self._said):
            return
        self._said_at, self._said = now, line
        self.log.info("%s", line)

    def waiting(self, save: SaveUnderWay, waited_s: float) -> None:
        """cache.close's `waiting`: it waits for a session save still being written (told as more of it is), at
        most a line every `every_s` (the first always)."""
        now = self.clock()
        if self._said_at is not None and now - self._said_at < self.every_s:
            return
        self._said_at = now
        self.log.info("%s", save_wait_line(save, waited_s))


def save_part(save: SaveUnderWay) -> str:
    """How far a session save is: "'work': 1.2 of 4.7 GiB written"."""
    return f"{save.name!r}: {amount(min(save.written, save.n_bytes), save.n_bytes)} written"


def save_wait_line(save: SaveUnderWay, waited_s: float) -> str:
    """The line while the cache's close waits for a session save the stop could not wait for (past CALL_WAIT_S)."""
    return (f"stopping: waiting for the session save under way ({save_part(save)}) before closing the conversation "
            f"cache ({waited_s:.0f} s)")


# the wait at a stop for the engine step under way (a prompt piece: a big model on the CPU reads 2,048 tokens in
# a minute), before the live histories are kept; past it they are left (a stuck call) and the cache closes
STEP_WAIT_SLACK_S = 10.0     # any step: the whole wait before these existed
STEP_WAIT_FACTOR = 3.0       # a piece may take this many times what the measured rate says (a busier machine)
STEP_WAIT_UNKNOWN_S = 120.0  # a piece read before any rate was measured (the first prompt)
CALL_WAIT_S = STEP_WAIT_UNKNOWN_S   # a session save or restore: gigabytes written or read (~37 s for 12 GiB)


# then the wait for the request handlers still writing answers (aiohttp's shutdown_timeout, 60 s by default):
# one whose client stopped reading (a suspended agent) is blocked on a full socket and held the stop that long.
# Every request was ended by the scheduler's stop by then, so a reading client has its last bytes in a moment.
HANDLER_WAIT_S = 5.0
# aiohttp waits its shutdown_timeout for the handlers, then cancels their reads of request bodies and waits it
# again before it cancels them: a handler blocked writing waits both (a stalled reader held a stop 10.0 s with
# shutdown_timeout 5), so the runners are given half of HANDLER_WAIT_S
SHUTDOWN_TIMEOUT_S = HANDLER_WAIT_S / 2


def handler_cut_line(method: str, path: str, unsent_bytes: int) -> str:
    """The warning for a request handler cancelled when the stop's wait for answers ran out: its client's fault
    only where bytes of the answer were still waiting to be sent (`unsent_bytes`, the connection's write buffer);
    else the answer was not made in time (a stuck engine step the stop gave up on)."""
    if unsent_bytes > 0:
        return (f"stopping: the answer to {method} {path} was not read by its client within {HANDLER_WAIT_S:g} s "
                f"({unsent_bytes} bytes unsent); its connection is closed")
    return (f"stopping: the answer to {method} {path} had not ended {HANDLER_WAIT_S:g} s after the engine stopped; "
            f"its connection is closed")


def step_wait_s(tokens: int, rate: float) -> float:
    """How long a stop waits for a step reading `tokens` prompt tokens at `rate` tokens/s (0: none measured);
    a step reading none (a decode step) gets the slack alone."""
    if tokens <= 0:
        return STEP_WAIT_SLACK_S
    if rate <= 0:
        return STEP_WAIT_UNKNOWN_S
    return STEP_WAIT_SLACK_S + STEP_WAIT_FACTOR * tokens / rate


def step_line(tokens: int, waited_s: float, in_call: bool = False, save: SaveUnderWay | None = None) -> str:
    """The line said every PROGRESS_EVERY_S while a stop waits for that step (the app counts it as progress);
    `save`: the session save that call is writing, how far it is."""
    what = (f"the session save under way ({save_part(save)})" if in_call and save is not None
            else "the session save or restore under way" if in_call
            else f"the prompt piece under way ({tokens} tokens)" if tokens > 0 else "the engine step under way")
    return f"stopping: finishing {what} before keeping the conversations ({waited_s:.0f} s)"
