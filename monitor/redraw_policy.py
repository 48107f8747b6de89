"""When the monitor window redraws: policy only, Qt-free (the window's timer applies it).

Each redraw costs the process ~20-40 ms of CPU (Qt painting four scrolling plots and the tables), taken from
the engine on a machine whose cores generate tokens. So: nothing while the window cannot be seen, and while
the server is busy (a slot reading or generating, a request in flight) at most BUSY_INTERVAL_S apart; an idle
server's rare changes are drawn at the next tick.
"""

from __future__ import annotations

TICK_S = 0.25              # the window's timer: the feed sends at most 4 snapshots a second
BUSY_INTERVAL_S = 0.5      # 2 redraws a second while the server works: values stay current within a second
JITTER_S = 0.1             # a timer tick may come a little early
BUSY_STATES = ("prefill", "decode")


def server_busy(view) -> bool:
    """True when the view shows work under way: a context reading or generating, or a request in flight."""
    in_flight = view.totals.get("in_flight") if view.snapshot else None
    return any(row.state in BUSY_STATES for row in view.slots) or (isinstance(in_flight, int) and in_flight > 0)


def redraw_due(*, new_data: bool, can_be_seen: bool, busy: bool, since_last_draw_s: float) -> bool:
    """Whether a timer tick redraws: only something new, only in a window that can be seen, and while the
    server is busy no sooner than BUSY_INTERVAL_S after the last redraw."""
    if not new_data or not can_be_seen:
        return False
    return not busy or since_last_draw_s >= BUSY_INTERVAL_S - JITTER_S
