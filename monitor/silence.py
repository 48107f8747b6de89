"""When the monitor says its server is not answering: policy only, Qt-free and clock-free (the model applies it
with the times the feed client gives it).

A frozen server (SIGSTOP, a machine too busy to answer) keeps its socket: the feed's stream stays open with nothing
on it, then the client's reconnections time out, and the header said "connecting", as if it had never connected.
Once a snapshot has come, silence past `silent_after_s`, or a connection the server took without answering,
reads "not answering" (with for how long and since when: widgets/header.py), and "connected" again at the next one.
"""

from __future__ import annotations

import math

# the feed asks for 4 snapshots a second (client.EVENT_INTERVAL_S) and a server behind on it skips some
# (server/monitor_feed._client_behind): 3 s without one is a dozen missed, not a slow tick
SILENT_AFTER_S = 3.0
# a feed asked for one snapshot every S seconds is silent only past this many S (the server sends one per S: a
# monitor asking every 4 s called each wait a silence, and past READ_TIMEOUT_S its reads timed out between them)
SILENT_INTERVALS = 3
NOT_ANSWERING = "not answering"


def _seconds(name: str, seconds: float) -> float:
    """`seconds` when it is a usable duration (above 0, finite); ValueError naming `name` and it otherwise."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (0 < seconds < math.inf):
        raise ValueError(f"{name} must be a number of seconds above 0, got {seconds!r}")
    return float(seconds)


def check_silent_after(seconds: float) -> float:
    return _seconds("silent_after_s", seconds)


def check_interval(seconds: float) -> float:
    """A feed's interval (FeedClient's interval_s, the `?interval=` it asks)."""
    return _seconds("interval", seconds)


def feed_patience(interval_s: float, least_s: float) -> float:
    """How long a feed asked for a snapshot every `interval_s` may say nothing before it is taken as silent:
    `least_s`, or SILENT_INTERVALS intervals where longer (both the header's bound and the client's read timeout)."""
    return max(least_s, SILENT_INTERVALS * interval_s)


def shown_connection(connection: str, silent_s: float | None, silent_after_s: float = SILENT_AFTER_S) -> str:
    """The state the monitor says: the client's `connection`, except that a feed still "connected" whose last
    snapshot is `silent_s` >= `silent_after_s` old reads "not answering" (`silent_s` None: no snapshot yet, or no
    clock told since it came)."""
    if connection == "connected" and silent_s is not None and silent_s >= silent_after_s:
        return NOT_ANSWERING
    return connection
