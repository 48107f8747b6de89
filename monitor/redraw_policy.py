"""When the monitor window redraws: policy only, Qt-free (the window's timer applies it).

Each redraw costs the process ~20-40 ms of CPU (Qt painting four scrolling plots and the tables), taken from
the engine on a machine whose cores generate tokens, or from a laptop's battery while the window stays open on
an idle server all day. So: nothing while the window cannot be seen; while the server is busy (a slot reading or
generating, a request in flight) at most BUSY_INTERVAL_S apart; while it is idle (its plots scroll, its memory
figures move a little) at most IDLE_INTERVAL_S apart, but a change of its headline (the connection, work
starting, the count of requests) at the next tick.
"""

from __future__ import annotations

TICK_S = 0.25              # the window's timer: the feed sends at most 4 snapshots a second
BUSY_INTERVAL_S = 0.5      # 2 redraws a second while the server works: values stay current within a second
IDLE_INTERVAL_S = 1.0      # 1 a second while it is idle (4 before: each snapshot, for plots scrolling zeros)
JITTER_S = 0.1             # a timer tick may come a little early
BUSY_STATES = ("prefill", "decode")


def server_busy(view) -> bool:
    """True when the view shows work under way: a context reading or generating, or a request in flight."""
    return headline(view.connection, view.snapshot)[1]


def headline(connection: str, snapshot: dict | None) -> tuple:
    """What a redraw never waits for (from the model's latest snapshot, without building a view): the
    connection, whether the server works (as server_busy), and its count of requests."""
    snap = snapshot if isinstance(snapshot, dict) else {}
    totals = snap.get("totals") if isinstance(snap.get("totals"), dict) else {}
    slots = snap.get("slots") if isinstance(snap.get("slots"), list) else []
    in_flight = totals.get("in_flight")
    busy = any(isinstance(s, dict) and s.get("state") in BUSY_STATES for s in slots) or (
        isinstance(in_flight, int) and in_flight > 0)
    return connection, busy, totals.get("requests")


def redraw_due(*, new_data: bool, can_be_seen: bool, busy: bool, since_last_draw_s: float,
               headline_changed: bool = False) -> bool:
    """Whether a timer tick redraws: only something new, only in a window that can be seen; while busy (as last
    drawn) no sooner than BUSY_INTERVAL_S after the last redraw (a busy server's headline changes with most
    snapshots: requests end); while idle a changed headline at once, else after IDLE_INTERVAL_S."""
    if not new_data or not can_be_seen:
        return False
    if busy:
        return since_last_draw_s >= BUSY_INTERVAL_S - JITTER_S
    return headline_changed or since_last_draw_s >= IDLE_INTERVAL_S - JITTER_S
