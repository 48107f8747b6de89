"""The cascade RAM -> warm -> cold: make room in a level by degrading its oldest entries downward.

What this is: the mechanism that applies `policy.plan_demotions` to a list of levels (only the ones
that are on, in order). Degrade = write to the next level first (RAM -> disk: a file write; disk ->
disk: a rename on one volume, a copy across, re-sealed at `now`), unindex from the first level
after; all or nothing: if the next level cannot take it (budget, when-full=reject, too large, an I/O
error) nothing moves. Only the last level deletes; degradations are counted apart from evictions.
One exception, written down here: the RAM level cannot stay over budget, so a RAM entry the next
level refuses goes to a later disk level that takes it, else it is evicted (counted as an eviction
with that reason). What this is not: admission,
lookup or restore. Callers hold the cache lock.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections import Counter, deque
from collections.abc import Callable

from .blocked_names import BlockedNames
from .disk import DiskLevel
from .policy import LevelEntry, plan_demotions, volume_budget
from .ram import RamEntry, RamLevel

log = logging.getLogger("strata.cache")

Level = RamLevel | DiskLevel
# between the seal times of entries one plan hands down together (cache.SHUTDOWN_SEAL_STEP_S, 1e-3, spaces whole
# hand-downs at a stop: a plan of fewer than 1,000 stays inside one)
DEGRADE_SEAL_STEP_S = 1e-6
FULL_VOLUME = (errno.ENOSPC, errno.EDQUOT)   # a write a full volume (or quota) refused: making room may help


def forget_files(lvl: Level, key: str, why: str, *, if_names: str | None = None) -> bool:
    """`lvl.forget(key)` for the cache's own deletes (an eviction, a supersede, a moved entry's source, a
    damaged image); False, logged, when a file cannot be removed (the folder went read-only): the entry
    then stays as it is, instead of an OSError escaping a park, the spill writer or the stop. Warned at
    the first failure of a run (a read-only full level fails at every park: one line, not one a park),
    counted always (`remove_failures`, /metrics), an INFO line when removing works again. `if_names`: a disk
    level's DiskLevel.forget removes the files only while no other save's sidecar stands there."""
    try:
        lvl.forget(key) if if_names is None else lvl.forget(key, if_names=if_names)
    except OSError as exc:
        if not isinstance(lvl, DiskLevel):
            raise
        if lvl.removes_failing_since is None:
            lvl.removes_failing_since = lvl.remove_failures
            log.warning("conversation cache %s level: cannot remove the files of %s (%s): %s; the level keeps them "
                        "and takes nothing new until files can be removed from %s again", lvl.name, key, why,
                        exc.strerror or exc, lvl.folder)
        lvl.remove_failures += 1
        return False
    if isinstance(lvl, DiskLevel) and lvl.removes_failing_since is not None:
        n = lvl.remove_failures - lvl.removes_failing_since
        lvl.removes_failing_since = None
        log.info("conversation cache %s level: can remove files from %s again (%d removals failed)", lvl.name,
                 lvl.folder, n)
    return True


def budget_flag(level: str) -> str:
    """The flag that sets a level's budget (a refusal names it: a history larger than the budget is never kept).
    Level names are identifiers (`system_prompt`), flags are spelled with dashes."""
    return "--conversation-cache-mib" if level == "ram" else f"--conversation-cache-{level.replace('_', '-')}-mib"


def failed_write_reason(exc: OSError) -> str:
    """Why a write failed, with the path it failed on when the error names one: a name of the level's taken by
    a folder (`Is a directory`) fails that one conversation's writes and no other, and the folder's name alone
    sent the user to check its free space and permissions, all fine."""
    path = getattr(exc, "filename2", None) or getattr(exc, "filename", None)
    reason = exc.strerror or str(exc)
    return f"{reason}: {path}" if path and exc.strerror else reason


class Cascade:
    def __init__(self, levels: list[Level], when_full: str = "evict",
                 on_event: Callable[[tuple], None] | None = None) -> None:
        if when_full not in ("evict", "reject"):
            raise ValueError(f"when_full must be 'evict' or 'reject', got {when_full!r}")
        self.levels = levels
        self.when_full = when_full
        self.degradations: Counter[str] = Counter()
        self.evictions: Counter[str] = Counter()
        self.age_evictions: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()  # a degradation or put the next level could not take
        self.write_failures: Counter[str] = Counter()  # writes a disk level failed (an I/O error), per level
        self._failing: dict[str, int] = {}  # level -> write_failures when its current run of failures began
        self._refusing: set[str] = set()    # levels whose refusal of a spill (full) was said, until one is written
        self.blocked = BlockedNames()       # conversations whose file names in a level a folder stands on
        self.stopping = False  # the clean stop says itself which histories it could not write
        self.events: deque[tuple] = deque(maxlen=1000)  # (action, level, key, detail), exact order
        self._on_event = on_event
        self._last_seal = float("-inf")   # the latest seal a plan gave (next_seal)
        # keys a lookup found and a restore is about to read (RestoreMixin.holding): a plan takes them out last. The
        # park of the history the restore replaces comes in between and used to delete the hit (its level's oldest)
        self.held: Counter[str] = Counter()

    def _event(self, *ev) -> None:
        self.events.append(ev)
        if self._on_event is not None:
            self._on_event(ev)

    def index_of(self, name: str) -> int:
        for i, lvl in enumerate(self.levels):
            if lvl.name == name:
                return i
        raise KeyError(name)

    def find(self, key: str) -> tuple[int, object] | None:
        for i, lvl in enumerate(self.levels):
            e = lvl.entries.get(key)
            if e is not None:
                return i, e
        return None

    # -- making room ----------------------------------------------------------------------------

    def make_room(self, i: int, incoming: int, now: float, volume_cap: int | None = None) -> tuple[bool, str]:
        """Run level i's age and budget plan with `incoming` bytes about to arrive (`volume_cap`: the budget
        its full volume holds it to, when less than its own).

        Returns (room, reason): whether `incoming` now fits in the level's budget.
        """
        lvl = self.levels[i]
        is_last = i == len(self.levels) - 1
        budget = lvl.budget_bytes
        if volume_cap is not None and (not budget or volume_cap < budget):
            if incoming > volume_cap:
                return False, (f"one history of {incoming / 2**20:.1f} MiB > the room on the {lvl.name} level's volume "
                               f"({volume_cap / 2**20:.1f} MiB with its own files): free space at {lvl.folder}")
            budget = max(volume_cap, 1)   # 0 is "no budget"
        if budget and incoming > budget:
            return False, (f"one history of {incoming / 2**20:.1f} MiB > the whole {lvl.name} budget of "
                           f"{budget / 2**20:.1f} MiB: raise {budget_flag(lvl.name)}")
        entries = [LevelEntry(e.key, e.n_bytes, e.sealed_at) for e in lvl.entries.values()]
        below = self.levels[i + 1] if not is_last and isinstance(lvl, DiskLevel) else None
        stuck = self.blocked.stuck(below) if below is not None else frozenset()
        plan = plan_demotions(entries, budget if budget else 1 << 62, lvl.max_age_s, now,
                              is_last=is_last, incoming_bytes=incoming, held=self.held.keys(), stuck=stuck)
        after_hold = 0   # bytes of held entries that leave as their hold ends (plan_demotions)
        for k, d in enumerate(plan):
            if d.key not in lvl.entries:
                continue
            if d.action == "after_hold":
                if self.when_full == "reject":   # its release deletes nothing for the budget: kept over it, for good
                    return False, f"{lvl.name} full (when-full=reject)"
                after_hold += lvl.entries[d.key].n_bytes
                continue
            if d.action == "degrade":
                # sealed there in the plan's order (oldest first): at one `now` their first-in-first-out there
                # would fall back on the keys
                sealed = self.next_seal(now + k * DEGRADE_SEAL_STEP_S)
                ok, why = self.degrade(i, d.key, sealed, cause=d.cause)
                if ok:
                    continue
                if isinstance(lvl, RamLevel):  # a later disk level may take what the next one refused
                    if any(self.degrade(i, d.key, sealed, cause=d.cause, to=j)[0]
                           for j in range(i + 2, len(self.levels))):
                        continue
                    if d.key in self.held:     # as on the last level: it leaves once its restore has read it
                        after_hold += lvl.entries[d.key].n_bytes
                        continue
                    self._delete(i, d.key, d.cause, f"next level refused: {why}")
                    continue
                if below is not None and self.blocked.holds(below, d.key):   # found stuck now: plan again past it
                    return self.make_room(i, incoming, now, volume_cap)
                if d.cause == "budget":
                    return False, f"{lvl.name} full and its oldest cannot degrade: {why}"
                continue  # an aged entry the next level refuses stays where it is
            if d.cause == "budget" and self.when_full == "reject":
                return False, f"{lvl.name} full (when-full=reject)"
            self._delete(i, d.key, d.cause, d.reason)
        if budget and lvl.used_bytes - after_hold + incoming > budget:
            return False, f"{lvl.name} still over budget"
        return True, "fits"

    def hold(self, key: str) -> None:
        """A lookup's hit a restore is about to read: plans take it out last and never delete it (caller locks)."""
        self.held[key] += 1

    def release(self, key: str, now: float) -> None:
        """A hold ends (caller locks); at the last one, the level holding the entry applies its budget again: one
        kept over it for the restore leaves now (plan_demotions, "after_hold")."""
        self.held[key] -= 1
        if self.held[key] > 0:
            return
        del self.held[key]
        found = self.find(key)
        if found is not None and self.levels[found[0]].budget_bytes:
            self.make_room(found[0], 0, now)

    def next_seal(self, at: float) -> float:
        """`at`, or just after the latest seal a plan gave when that is not before it: a plan run inside another's
        hand-down (each entry a full RAM hands to a full warm level makes warm hand some down) starts again at its
        own `now + 0`, so without this its entries tied with, or came before, the ones the previous inner plan had
        just handed to the same level, and that level's first-in-first-out let a newer one go first. The spill
        writer's writes and a stop's hand-down take theirs here too: a clock that reads the same for two writes (a
        coarse one) tied them, and a newer history went first (ParkingMixin._write_down)."""
        seal = max(at, self._last_seal + DEGRADE_SEAL_STEP_S)
        self._last_seal = seal
        return seal

    def room_on_volume(self, i: int, incoming: int, now: float) -> tuple[bool, str]:
        """Where level i's volume has less free space than `incoming` (its budget larger than the disk, other
        programs filling it), its oldest entries make room as a reached budget would have them do (degraded,
        or deleted by the last level); without this every new history was refused while the oldest stayed."""
        lvl = self.levels[i]
        if not isinstance(lvl, DiskLevel):
            return True, "fits"
        cap = volume_budget(lvl.used_bytes, lvl.io.free_bytes(lvl.folder), incoming)
        if cap is None:
            return True, "fits"
        # A later level on the same volume (warm and cold on one disk) first: degrading into it is a rename that
        # frees nothing, so the room comes from the last level there, oldest first.
        for j in reversed(self._same_volume_below(i)):
            later = self.levels[j]
            later_cap = volume_budget(later.used_bytes, later.io.free_bytes(later.folder), incoming)
            if later_cap is None:
                return True, "fits"
            self.make_room(j, incoming, now, volume_cap=later_cap)
            cap = volume_budget(lvl.used_bytes, lvl.io.free_bytes(lvl.folder), incoming)
        return (True, "fits") if cap is None else self.make_room(i, incoming, now, volume_cap=cap)

    def _same_volume_below(self, i: int) -> list[int]:
        """The levels after i whose folders are on level i's volume."""
        lvl = self.levels[i]
        return [j for j in range(i + 1, len(self.levels))
                if isinstance(self.levels[j], DiskLevel) and lvl.io.same_volume(lvl.folder, self.levels[j].folder)]

    def write_into(self, i: int, incoming: int, now: float, write: Callable[[], object], *,
                   lock=None, takes_space: bool = True, key: str | None = None) -> tuple[object | None, str]:
        """Make room in level i (its budget, then its volume when the write `takes_space`: not a rename on one
        volume), then `write()`; a write the full volume refuses is tried once more after making room with the
        volume's real free space. Returns (what `write` returned, "written") or (None, why there is no room);
        raises the write's OSError. `lock`: held while making room, not while writing. `key`: the conversation
        written, when a folder standing on its names there (blocked_names.py) should fail it before room is made."""
        guard = lock if lock is not None else contextlib.nullcontext()
        lvl = self.levels[i]
        for attempt in (1, 2):
            with guard:
                if key is not None and isinstance(lvl, DiskLevel):
                    self.blocked.check(lvl, key)
                room, why = self.make_room(i, incoming, now)
                if room and takes_space:
                    room, why = self.room_on_volume(i, incoming, now)
            if not room:
                return None, why
            try:
                return write(), "written"
            except OSError as exc:
                if attempt == 2 or exc.errno not in FULL_VOLUME or not takes_space or not self._volume_short(i, incoming):
                    raise   # (a volume that says it has room: making room would not help)
        raise AssertionError("unreachable")

    def _volume_short(self, i: int, incoming: int) -> bool:
        lvl = self.levels[i]
        return isinstance(lvl, DiskLevel) and volume_budget(lvl.used_bytes, lvl.io.free_bytes(lvl.folder),
                                                            incoming) is not None

    def enforce(self, now: float) -> None:
        """Apply every level's age and budget limits, top level first."""
        for i in range(len(self.levels)):
            self.make_room(i, 0, now)

    def _delete(self, i: int, key: str, cause: str, reason: str) -> None:
        lvl = self.levels[i]
        entry = lvl.entries.get(key)
        n_bytes = entry.n_bytes if entry is not None else 0
        if not forget_files(lvl, key, f"{cause} eviction"):
            return  # still there: make_room's budget check says the level is full
        (self.age_evictions if cause == "age" else self.evictions)[lvl.name] += 1
        self._event("evict", lvl.name, key, f"{cause}: {reason}")
        # a conversation the cache lets go is read again whole if it comes back: said in the log, which conversation
        # and why, so a slow turn later can be traced to the write that pushed its history out (the /events feed
        # has it too, but nobody may be reading it)
        log.info("conversation cache %s level: conversation %s (%.1f MiB) let go (%s: %s); its next turn reads it "
                 "from the start", lvl.name, key, n_bytes / 2**20, cause, reason)

    # -- a disk level's writes failing and mending: said once each, counted every time --------------

    def write_failed(self, lvl: DiskLevel, exc: OSError, key: str | None = None) -> bool:
        """A write to `lvl` failed: warned at the first failure of a run (a broken disk fails every park;
        one line, not one a park), counted always (/metrics). True when it was `key`'s alone (a folder stands on
        its name there: said once a name by `blocked`, the level not taken as failing)."""
        if key is not None and self.blocked.blocked(lvl, key, exc):
            self.write_failures[lvl.name] += 1
            return True
        if lvl.name not in self._failing and not self.stopping:
            self._failing[lvl.name] = self.write_failures[lvl.name]
            log.warning("conversation cache %s level: cannot write to %s (%s); histories go to a later level that "
                        "takes them, else they are lost, until it can (check that folder, its free space and write "
                        "permission)", lvl.name, lvl.folder, failed_write_reason(exc))
        self.write_failures[lvl.name] += 1
        return False

    def is_failing(self, lvl: DiskLevel) -> bool:
        """Whether `lvl`'s writes are failing and that was warned of (until `write_worked`)."""
        return lvl.name in self._failing

    def refusal_said(self, lvl: DiskLevel, incoming: int) -> bool:
        """Whether a spill `lvl` refused for want of room needs no WARNING of its own: its refusals were said
        since it last took one (a full level refuses every park, a full one that cannot remove its oldest too: one
        line, then counted). A history larger than its whole budget is that history's own: said each time. Marks
        the refusal said (caller locks)."""
        if lvl.budget_bytes and incoming > lvl.budget_bytes:
            return False
        if lvl.name in self._refusing:
            return True
        self._refusing.add(lvl.name)
        return False

    def write_worked(self, lvl: DiskLevel) -> None:
        self._refusing.discard(lvl.name)
        if lvl.name in self._failing:
            n = self.write_failures[lvl.name] - self._failing.pop(lvl.name)
            log.info("conversation cache %s level: can write to %s again (%d writes failed)", lvl.name, lvl.folder, n)

    # -- degrade --------------------------------------------------------------------------------

    def degrade(self, i: int, key: str, now: float, cause: str = "budget", to: int | None = None) -> tuple[bool, str]:
        """Move `key` from level i to level i+1 (or `to`, further down), all or nothing."""
        src = self.levels[i]
        entry = src.entries.get(key)
        if entry is None:
            return False, "gone"
        to = i + 1 if to is None else to
        if to >= len(self.levels):
            return False, "no next level"
        dst = self.levels[to]
        if isinstance(dst, DiskLevel):
            try:  # before make_room: entries whose folder was removed must not be evicted (counted) first
                dst.ensure_folder()
            except OSError as exc:
                return self._refuse_io(dst, key, exc)
        if isinstance(entry, RamEntry):
            def write():
                return dst.write(key, entry.kind, entry.tokens, iter(entry.pieces), now,
                                 created_at=entry.created_at, meta=entry.meta)
            takes_space = True
        else:
            def write():
                return dst.adopt(entry, now)
            takes_space = not dst.io.same_volume(entry.image_path, dst.folder)   # a rename takes none
        try:
            moved, why = self.write_into(to, entry.n_bytes, now, write, takes_space=takes_space, key=key)
        except FileNotFoundError as exc:
            if not isinstance(entry, RamEntry) and not os.path.exists(entry.image_path):
                return self._source_gone(src, key, entry.image_path)
            return self._refuse_io(dst, key, exc)
        except OSError as exc:
            return self._refuse_io(dst, key, exc)
        if moved is None:
            self.refusals[dst.name] += 1
            self._event("refuse", dst.name, key, why)
            return False, why
        self.write_worked(dst)
        dst.add(moved)
        if not forget_files(src, key, f"moved to {dst.name}"):
            src.entries.pop(key, None)  # it lives in dst now; what stayed behind is indexed again at the next start
        self.degradations[src.name] += 1
        self._event("degrade", src.name, key, f"{cause} -> {dst.name}")
        return True, "moved"

    def _source_gone(self, src: DiskLevel, key: str, image_path: str) -> tuple[bool, str]:
        """A move down whose source files another process removed (another server on the folder moved or evicted
        the entry): not the next level failing to write. Unindexed, as a lookup's hit whose files are gone is; its
        room is free, so the caller's plan goes on (True). Taken as the next level's write failure, it was warned
        of and counted as one, and the level, `full and its oldest cannot degrade`, took nothing until a restart."""
        forget_files(src, key, "files gone", if_names=image_path)
        src.entries.pop(key, None)
        log.info("conversation cache %s level: conversation %s's file %s was removed since start-up (another process "
                 "sharing the folder?); unindexed", src.name, key, image_path)
        return True, "gone"

    def _refuse_io(self, dst: DiskLevel, key: str, exc: OSError) -> tuple[bool, str]:
        self.refusals[dst.name] += 1
        self.write_failed(dst, exc, key)
        self._event("refuse", dst.name, key, f"I/O error: {exc}")
        return False, f"I/O error: {exc}"

    def discard(self, key: str, why: str, *, ram_only: bool = False) -> bool:
        """Remove `key` from every level (supersede, compaction, an unreadable image); `ram_only`:
        from the RAM level alone (a history superseded by one that is not on disk yet). True when it
        was removed from a level (not where its files cannot be removed: it stays there)."""
        found = False
        for lvl in self.levels:
            if ram_only and not isinstance(lvl, RamLevel):
                continue
            if key in lvl.entries and forget_files(lvl, key, why):
                self._event("discard", lvl.name, key, why)
                found = True
        return found
