"""The cache's clock: wall time that never goes back.

What this is: `SteadyClock`, the time every seal, age and eviction order is measured in. The wall clock goes
back (an NTP step, a dual-boot machine whose RTC keeps local time, a reset RTC): then the newest history would
be sealed before older ones and evicted first, and an entry sealed "in the future" would never age. While the
wall clock is behind the latest time the cache has seen (its own, and the newest entry it indexed at start-up),
the cache's time goes on from there by the wall time that passes; once the wall clock is ahead of it again
(put right, a suspend) it is the wall time again. What this is not: a monotonic timer for durations
(time.monotonic) or the policy that uses the times (policy.plan_demotions).
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence

log = logging.getLogger("strata.cache")
SAID_AFTER_S = 1.0   # a clock behind by less (another host's skew on a shared folder) is followed, not warned of
FAR_AHEAD_S = 86400.0  # a seal further ahead of the clock than this, among seals that are not, was a wrong clock's


def clock_id(host: str | None = None) -> str:
    """The clock a cache seals its files by, as their sidecars name it (`sealed_by`): this host's (two servers on
    one host share it), a hash of its name, so a shared folder's files do not spell out the hosts writing there.
    A start rewrites the seals of far-ahead files only where they name this clock: on a folder shared with
    another host, which of two clocks a day apart is the wrong one cannot be told from the seals (each sees the
    other's files far ahead), and a server whose clock was behind rewrote the right clock's files a year old."""
    name = socket.gethostname() if host is None else host
    return "host-" + hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def far_ahead_limit(seals: Sequence[float], wall: float, ahead_s: float = FAR_AHEAD_S) -> float | None:
    """The time past which a seal found on disk is not trusted (pure), or None to trust every one. Seals more than
    `ahead_s` ahead of the wall clock while others are not were written by a clock set wrong once: followed, the
    cache's time would stay years ahead and every other entry would be years old, expired by a max age at once.
    When every seal is that far ahead, it is the wall clock that is wrong (a reset RTC): all are trusted."""
    limit = wall + ahead_s
    return limit if any(t <= limit for t in seals) and any(t > limit for t in seals) else None


def steady_now(wall: float, last_wall: float, last_now: float) -> float:
    """The cache's time now (pure): the wall time when it is not behind `last_now`, else `last_now` plus the
    wall time passed since `last_wall` (none when the wall clock went back again)."""
    if wall >= last_now:
        return wall
    return last_now + max(0.0, wall - last_wall)


class SteadyClock:
    """Callable like the wall clock it wraps; thread-safe (the engine thread and the spill writer both ask)."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self.wall = wall
        self._last_wall = float("-inf")
        self._last_now = float("-inf")
        self._behind = False
        self._lock = threading.Lock()

    def seen(self, t: float) -> None:
        """A time found on disk (the newest entry's seal): the cache's time does not go back before it."""
        with self._lock:
            self._last_now = max(self._last_now, t)

    def __call__(self) -> float:
        wall = self.wall()
        with self._lock:
            since = wall if self._last_wall == float("-inf") else self._last_wall   # the first call: none passed yet
            now = steady_now(wall, since, self._last_now)
            behind = now > wall + SAID_AFTER_S if not self._behind else now > wall
            if behind and not self._behind:
                log.warning("conversation cache: the clock is %.0f s behind the newest time the cache has seen (it "
                            "went back, or the cache's files were sealed by a clock ahead of this one); the cache "
                            "counts on from that time until the clock catches up", now - wall)
            elif self._behind and not behind:
                log.info("conversation cache: the clock is past the newest time the cache has seen again")
            self._behind = behind
            self._last_wall, self._last_now = wall, now
        return now


# a folder's file system whose clock is this far from this one's (the time it stamped a file just made): one of the
# two is wrong, and it may be this one, so no other clock's seal is taken over there
FS_CLOCK_SLACK_S = 3600.0


def may_adopt(sealed_by: str, fs_offset_s: float | None, live: set[str] | None,
              slack_s: float = FS_CLOCK_SLACK_S) -> tuple[bool, str]:
    """Whether a start may take over the seal of a file another clock sealed far ahead (pure): reseal it at this
    clock's time and name this clock in its sidecar, and if not, why. `sealed_by`: the file's clock ("" for an
    older Strata's, which named none); `fs_offset_s`: the folder's file system's time minus this clock's, as it
    stamped a file this server made there at its start (None: none could be made); `live`: the clocks with a server on the folder
    now (None: it cannot be told); only a server whose clock is ahead of the file system's keeps one
    (clock_presence). Left alone, such a file counts as sealed now at every start, so it never ages. Taken over
    only where this clock is not the suspect one (the file system's clock agrees with it, so it was the sealer's
    that ran ahead) and no server with a clock ahead uses the folder now, whatever clock the file names: to such a
    server far-ahead files are current, its own among them under other names (its older Strata's, which name none;
    its host's earlier name's, a recreated container), and taken over they would look a day or more old to it
    (aged out, evicted first; aad0950)."""
    if fs_offset_s is None:
        return False, "the folder's file system's clock could not be read (no file can be made there now)"
    if abs(fs_offset_s) > slack_s:
        return False, (f"the folder's file system's clock is {abs(fs_offset_s):.0f} s "
                       f"{'ahead of' if fs_offset_s > 0 else 'behind'} this one (check this machine's date)")
    if live is None:
        return False, "whether a server of that clock uses the folder cannot be told there (no file locks)"
    if sealed_by and sealed_by in live:
        return False, "a server of that clock uses the folder now"
    if live:   # the file may be one it uses, written under another name (review of 7a2f5a6)
        return False, "a server whose clock is ahead of the file system's uses the folder now (the file may be its own)"
    return True, ""
