"""What the app's status bar says while it stops a server: what the stop really does, from what the server said of
itself (its start-up INFO line) and whether it had loaded its model.

Pure: the supervisor (mechanism) hands in the INFO line and the state; it said "it parks its conversations first"
for every stop, also for a server with no disk level (nothing outlives it) and one stopped during its load (no
conversation served yet; the supervisor ends it at once, restart_policy.wait_for_stop's `loading`).
"""

from __future__ import annotations

CACHE_PART = "conversation cache"   # the INFO line's part that names the cache's levels (server/cache/report.describe)
DISK_LEVELS = ("warm", "cold")      # the levels that outlive the process (cache.keeps_across_restarts)


def keeps_on_disk(info_line: str) -> bool | None:
    """Whether the server whose INFO line this is keeps its conversations on disk at its stop (a warm or cold level
    on); None for a line that is not the INFO line (it says nothing of the cache)."""
    parts = [p.strip() for p in info_line.split("|")]
    cache = next((p for p in parts if p.startswith(CACHE_PART)), None)
    if cache is None:
        return None
    if not cache.startswith(CACHE_PART + ":"):      # "conversation cache off"
        return False
    levels = [p.strip() for p in cache.split(":", 1)[1].split(";")]
    return any(p.split(" ", 1)[0] in DISK_LEVELS and p.split(" ", 1)[1:] != ["off"] for p in levels)


def stopping_detail(loaded: bool, on_disk: bool | None) -> str:
    """The status bar's detail as the stop begins (the server's own "stopping: keeping ..." lines follow it when
    it writes conversations). `loaded`: it had answered /health ok; `on_disk`: keeps_on_disk of its INFO line."""
    if not loaded:
        return "stopping the server while it loads its model (nothing served yet: nothing to keep)"
    if on_disk is None:
        return "stopping the server"
    if on_disk:
        return "stopping the server (it writes its conversations to disk first, for the next start)"
    return "stopping the server (its conversations are not kept: no disk level is on)"
