"""What the app's status bar says while it stops a server: what the stop really does, from what the server's monitor
feed says a stop would do (`GET /v1/monitor`'s `stop`: a disk level on, how many conversations it would write) and
whether it had loaded its model.

Pure: the supervisor (mechanism) fetches the feed and hands in its `stop` object and the state. The wording came from
parsing the server's INFO line before, which any rewording of that line (for humans) broke; it said "it parks its
conversations first" for every stop before that, also for a server with no disk level and one stopped during its
load (no conversation served yet; the supervisor ends it at once, restart_policy.wait_for_stop's `loading`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StopOutlook:
    keeps_on_disk: bool     # a warm or cold level is on: the conversations outlive the process
    conversations: int      # how many histories the stop would write, at most (0 without a disk level)


def read_outlook(feed: object) -> StopOutlook:
    """The monitor feed's `stop` object (docs/internals.md, "Monitor feed") as a StopOutlook; ValueError naming the
    bad value for anything else (a feed without it: a server still loading, or an older one)."""
    stop = feed.get("stop") if isinstance(feed, dict) else None
    if not isinstance(stop, dict):
        raise ValueError(f"the monitor feed's 'stop' is not an object: {stop!r}")
    keeps, n = stop.get("keeps_on_disk"), stop.get("conversations")
    if not isinstance(keeps, bool):
        raise ValueError(f"the monitor feed's stop.keeps_on_disk is not true or false: {keeps!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"the monitor feed's stop.conversations is not a whole number >= 0: {n!r}")
    return StopOutlook(keeps, n)


def stopping_detail(loaded: bool, outlook: StopOutlook | None) -> str:
    """The status bar's detail as the stop begins (the server's own "stopping: keeping ..." lines follow it when
    it writes conversations). `loaded`: it had answered /health ok; `outlook`: its feed's, None when not known
    (not asked yet, or the feed did not answer)."""
    if not loaded:
        return "stopping the server while it loads its model (nothing served yet: nothing to keep)"
    if outlook is None:
        return "stopping the server"
    if not outlook.keeps_on_disk:
        return "stopping the server (its conversations are not kept: no disk level is on)"
    n = outlook.conversations
    if n == 0:
        return "stopping the server (no conversation to write: what it keeps is on disk already)"
    what = "1 conversation" if n == 1 else f"up to {n} conversations"
    return f"stopping the server (it writes {what} to disk first, for the next start)"
