"""A clean stop's plan for what it writes to the disk levels below RAM (part of `ConversationCache`).

What this is: the mechanism that applies stop_writes' pure plans: which of the spill queue's histories are written
at their turn, left out, or left to join RAM's hand-down (`_left_to_hand_down`, `_queue_plan`), which of RAM's the
close writes and to which level (`_left_at_hand_down`, `_copies_beside`, `_written_after_all`), room made in the
levels above the last before the writes (`_rooms_for_writes`, `_make_room_for_writes`), and the monitor feed's count of them
(`stop_would_keep`). With RAM on, one plan (stop_writes.stop_plan) covers the queue's and RAM's histories over
every disk level below RAM, the most recently used first, so nothing the stop writes is evicted or moved down by
the stop itself. What this is not: the writes or their lines (cache.py `_close`, parking.py), the rules
(stop_writes.py). A mixin: the state it uses is made by `ConversationCache.__init__`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection

from .disk import DiskLevel
from .memory import MIB
from .parking import replaces, superseded_keys
from .ram import RamEntry, used_at
from .stop_writes import stop_plan, unkept_at_stop

# a context's history the stop would park, as the feed weighs its sidecar: a conversation key's length, a park's meta
log = logging.getLogger("strata.cache")
LIVE_KEY, LIVE_META = "0" * 32, {"reason": "shutdown", "conversation": "x" * 64}


class StopPlanMixin:
    def _hand_down_levels(self) -> list[DiskLevel] | None:
        """The disk levels below RAM a stop plans its writes to (caller locks): RAM on, every level below it a disk
        level writing and removing, no hit held for a restore; where a lower one is failing (read-only, broken),
        those above it (the cascade's order wrote the stop's histories there, each refused for want of room as the
        older ones could not move down: the newest lost, the older kept). None: the cascade's own order decides."""
        below = self.cascade.levels[1:]
        if self.ram is None or not below or not all(isinstance(lvl, DiskLevel) for lvl in below):
            return None
        n = next((j for j, lvl in enumerate(below) if not self._plannable([lvl])), len(below))
        return below[:n] if n and self._plannable(below[:n]) else None

    def _plannable(self, lvls: list[DiskLevel]) -> bool:
        """Whether a stop's plan over `lvls` holds (caller locks): no hit held for a restore, no level failing to
        write or remove (where one is, the writes' own rules decide)."""
        return not self.cascade.held and not any(lvl.name in self.cascade._failing
                                                 or lvl.removes_failing_since is not None for lvl in lvls)

    def _plan(self, lvls: list[DiskLevel], sizes: list[list[int]], used: list[float],
              taken: list[int] | None = None) -> list[int | None] | None:
        """stop_writes.stop_plan over `lvls` (indexes of `lvls`, or None for one left out)."""
        return stop_plan(sizes, used, budgets=[lvl.budget_bytes for lvl in lvls],
                         free=[self.io.free_bytes(lvl.folder) for lvl in lvls], when_full=self.cascade.when_full,
                         taken=taken, volumes=self._volumes(lvls))

    def _volumes(self, lvls: list[DiskLevel]) -> list[int]:
        """Each of `lvls`' volume, as the index of the first of them on it: where a folder is not there yet to
        tell, the one above's (taken as shared: the plan counts the free space the levels above pick off it)."""
        out: list[int] = []
        for i, lvl in enumerate(lvls):
            known = i and os.path.isdir(lvl.folder) and os.path.isdir(lvls[i - 1].folder)
            out.append(next((out[j] for j in range(i) if self.io.same_volume(lvl.folder, lvls[j].folder)), i)
                       if known else (out[i - 1] if i else 0))
        return out

    def _entries_plan(self, lvls: list[DiskLevel], entries: list[RamEntry],
                      taken: list[int] | None = None) -> list[int | None] | None:
        return self._plan(lvls, [[self._bytes_below(lvl, e) for lvl in lvls] for e in entries],
                          [e.last_used for e in entries], taken)

    @staticmethod
    def _bytes_below(lvl: DiskLevel, entry) -> int:
        """What `lvl` counts for RAM's (or the queue's) `entry` once written there (its image and sidecar, at most)."""
        return lvl.bytes_at_most(entry.key, entry.kind, entry.n_tokens, entry.n_bytes, entry.meta)

    # -- the queue's, as the stop begins (ConversationCache.stop_writes) ------------------------

    def _left_to_hand_down(self, keys: list[str]) -> set[str] | None:
        """Where RAM's histories go to the disk levels at the stop: the queued `keys` not written at their turn
        (caller locks), by one plan over them and RAM's (stop_writes.stop_plan, the most recently used first): those
        it leaves out and those it places below the first disk level (written at their turn, to that first level,
        one would be moved down by RAM's written after it). They join RAM's at the close (`_close`), whose plan,
        made beside the queue's written ones, places the same and writes after all those a failed write left room
        for. A shorter copy joins too (written only where its longer one is not); one larger than every whole
        budget is written as before (refused). None: no such plan (the queue's own, `_queue_plan`, then)."""
        lvls = self._hand_down_levels()
        if lvls is None or self._stop is not None or any(k not in self._pending for k in keys):
            return None
        queued = [self._pending[k] for k in keys]
        both = [*queued, *self.ram.entries.values()]
        later = superseded_keys([e for e in both if e.kind == "conversation"])
        first = [e for e in both if e.key not in later]
        where = self._entries_plan(lvls, first)
        if where is None:
            return None
        top = {e.key for e, w in zip(first, where, strict=True) if w == 0}
        return {e.key for e in queued if e.key not in top and self._disk_takes(e.n_bytes)}

    def _queue_plan(self, keys: list[str]) -> dict:
        """stop_writes.unkept_at_stop for the queued `keys`, in queue order: {} where the writes' own rules decide (no
        disk level, a level failing to write or remove, a hit held for a restore, or an earlier stop's plan still
        under way: its held histories are the queue's too)."""
        with self._lock:
            entries = [self._pending[k] for k in keys if k in self._pending]
            if len(entries) != len(keys):
                return {}
        replaced_by = self._replaced_by(entries)
        disk = self._disk_levels_planned()
        if disk is None:
            return {}
        return self._unkept(disk, [e.n_bytes for e in entries], [self._bytes_below(disk[-1], e) for e in entries],
                            replaced_by, [f"conversation {k}" for k in keys])

    @staticmethod
    def _replaced_by(entries: list[RamEntry]) -> list[int | None]:
        """For each queued history, the first later one that supersedes it: a shorter copy of a conversation still
        queued (the writer behind) leaves as its longer one is written."""
        return [next((j for j in range(i + 1, len(entries)) if replaces(entries[j].tokens, e)), None)
                for i, e in enumerate(entries)]

    def _disk_levels_planned(self) -> list[DiskLevel] | None:
        """The disk levels the queue's plan covers; None where the writes' own rules decide (`_queue_plan`)."""
        disk = [lvl for lvl in self.cascade.levels if isinstance(lvl, DiskLevel)]
        with self._lock:
            if not disk or self._stop is not None or not self._plannable(disk):
                return None
        return disk

    def _unkept(self, disk: list[DiskLevel], sizes: list[int], counted: list[int], replaced_by: list[int | None],
                names: list[str]) -> dict:
        return unkept_at_stop(sizes, [lvl.budget_bytes for lvl in disk], [self.io.free_bytes(lvl.folder) for lvl in disk],
                              when_full=self.cascade.when_full, replaced_by=replaced_by, names=names, counted=counted)

    # -- RAM's, at the close ----------------------------------------------------------------------

    def _queue_taken(self, lvls: list[DiskLevel]) -> list[int]:
        """The bytes each of `lvls` holds of the histories the stop's queue wrote there (caller locks): RAM's
        hand-down is planned beside them, not as if the levels were empty (its writes evicted them)."""
        return [sum(e.n_bytes for k in self._stop_queue if (e := lvl.entries.get(k)) is not None) for lvl in lvls]

    def _left_at_hand_down(self, first: list[str], later: set[str]) -> tuple[set[str], dict[str, int] | None]:
        """RAM's histories a stop does not hand down, and where it writes the others (their cascade level's index;
        None where no plan applies: the cascade's hand-downs decide) (caller locks): `first` oldest first, then the
        shorter copies in `later`, only where no history written supersedes them. Those left out would be let go
        within the stop for newer ones (stop_writes.stop_plan, the most recently used first). Held back, not yet let
        go: where a pick is not written after all, they may fit in its room (`_written_after_all`)."""
        lvls = self._hand_down_levels()
        if lvls is None:
            return set(), None
        e = self.ram.entries
        ordered, taken = first[::-1], self._queue_taken(lvls)
        plan = self._entries_plan(lvls, [e[k] for k in ordered], taken)
        if plan is None:
            return set(), None
        where = {k: w for k, w in zip(ordered, plan, strict=True) if w is not None}
        taken = [t + sum(self._bytes_below(lvl, e[k]) for k, w in where.items() if w == i)
                 for i, (t, lvl) in enumerate(zip(taken, lvls, strict=True))]
        rest, copies = self._copies_beside(lvls, list(where), later, taken, e)
        where |= copies
        # one larger than every whole budget is tried as before: refused, it evicts nothing, and is said as lost
        left = {k for k in [*first, *rest] if k not in where and self._disk_takes(e[k].n_bytes)}
        return left, {k: w + 1 for k, w in where.items()}

    def _copies_beside(self, lvls: list[DiskLevel], kept: list[str], later, taken: list[int],
                       entries: dict[str, RamEntry]) -> tuple[list[str], dict[str, int]]:
        """The shorter copies `later` beside the histories `kept` (`taken`: bytes of each of `lvls`) at a stop, each
        of `entries` (RAM's, and for the feed's outlook the queue's too) (caller locks): those no kept history
        supersedes (the newest first: a kept one's write discards the others), and where those of them are written
        (indexes of `lvls`; all, to the first, where the plan cannot tell)."""
        e = entries
        gone = superseded_keys([e[k] for k in later], by=[e[k] for k in kept])
        rest = [k for k in self._by_last_use(later, newest_first=True, entries=e) if k not in gone]
        plan = self._entries_plan(lvls, [e[k] for k in rest], taken)
        return rest, {k: 0 for k in rest} if plan is None else {k: w for k, w in zip(rest, plan, strict=True) if w is not None}

    def _written_after_all(self, left: set[str], written: list[str],
                           barred: dict[str, set[int]] | None = None) -> dict[str, int]:
        """Those of the held back `left` the levels below RAM keep beside the histories the stop `written` there (and
        its queue's), the most recently used first, each with its cascade level's index (caller locks): a pick that
        was not written (a folder standing at its name, a failed write) left its room to them, and letting them go
        all the same lost them for nothing. `barred`: key -> the cascade levels that failed its write ("" -> those
        that failed one not its own alone: every key's); none is placed there (counted past its budget)."""
        lvls, barred = self.cascade.levels[1:], barred or {}
        order = self._by_last_use(left, newest_first=True)

        def bars(k: str) -> set[int]:
            return barred.get(k, set()) | barred.get("", set())
        taken = [t + sum(e.n_bytes for k in written if (e := lvl.entries.get(k)) is not None)
                 for t, lvl in zip(self._queue_taken(lvls), lvls, strict=True)]
        e = self.ram.entries
        sizes = [[lvl.budget_bytes + 1 if i + 1 in bars(k) else self._bytes_below(lvl, e[k])
                  for i, lvl in enumerate(lvls)] for k in order]
        plan = self._plan(lvls, sizes, [e[k].last_used for k in order], taken)
        if plan is None:   # as the cascade writes them: the first level that did not fail them
            first = {k: next((i for i in range(1, len(lvls) + 1) if i not in bars(k)), None) for k in order}
            return {k: w for k, w in first.items() if w is not None}
        return {k: w + 1 for k, w in zip(order, plan, strict=True) if w is not None}

    def _barred_by(self, key: str, level: int, barred: dict[str, set[int]], why: str) -> None:
        """`key`'s planned write to cascade `level` failed (caller locks): barred from it there where a folder
        stands at its own name (blocked_names), else that level barred for every history of this stop (a read-only
        or full volume fails them all)."""
        lvl = self.cascade.levels[level]
        who = key if isinstance(lvl, DiskLevel) and self.cascade.blocked.holds(lvl, key) else ""
        every = barred.get("", set())
        # the cascade does not warn while stopping: without this line the histories planned again elsewhere were
        # said only as left out for the budgets, the failing level never named (with no level left, every one is
        # lost and the stop's WARNING says so)
        if who == "" and level not in every and len(every) + 2 < len(self.cascade.levels):
            log.warning("stopping: conversation %s not written to %s; the stop writes nothing more to the %s "
                        "level: the histories planned there are planned again on the levels left, the most recently "
                        "used first (those that do not fit are not written, each named below)", key, why, lvl.name)
        barred.setdefault(who, set()).add(level)

    def _barred_everywhere(self, key: str, barred: dict[str, set[int]]) -> bool:
        """Whether every level below RAM failed a planned write of `key` or one every history's (`_barred_by`)."""
        bars = barred.get(key, set()) | barred.get("", set())
        return all(i in bars for i in range(1, len(self.cascade.levels)))

    def _let_go_left(self, left: set[str], n_kept: int, barred: Collection[int] = ()) -> None:
        """The held back histories that stay unwritten (caller locks): each said and counted as the queue's left
        out are, its RAM copy freed. `barred`: the cascade levels that failed a write of this stop (`_barred_by`)."""
        # failing ones, before the stop or within it, left out: their budgets are not what kept these out; one that
        # failed within it named (the line named both levels' budgets as what kept them out)
        planned = self._hand_down_levels() or self.cascade.levels[1:]
        lvls = [lvl for lvl in planned if self.cascade.levels.index(lvl) not in barred] or planned
        failed = " and ".join(lvl.name for lvl in planned if lvl not in lvls)
        budgets = " and ".join(f"{lvl.budget_bytes / MIB:.1f}" for lvl in lvls)
        whose = (f"the {lvls[0].name} level's budget of {budgets} MiB keeps" if len(lvls) == 1 and failed else
                 f"its budget of {budgets} MiB keeps" if len(lvls) == 1 else
                 f"the {' and '.join(lvl.name for lvl in lvls)} levels' budgets of {budgets} MiB keep")
        if failed:
            whose = f"the {failed} level failed the stop's writes; {whose}"
        # with a warm and a cold level neither takes it: "the cold level" alone read as if warm had it
        names = " or ".join(lvl.name for lvl in lvls)
        for k in self._by_last_use(left):
            self._let_go(self.ram.entries[k], f"{whose} the {n_kept} histor{'y' if n_kept == 1 else 'ies'} the stop "
                         f"writes there (picked by last use, the most recent first), and this one beside them would "
                         f"push one of them out", levels=names)
            self.ram.forget(k)

    def _rooms_for_writes(self, where: dict[str, int]) -> dict[int, tuple[int, list[str]]]:
        """For each level with one below that the plan `where` writes to (caller locks): the bytes of those writes,
        and the histories it holds that it lets go rather than moves down (`_past_room`). Worked out before the
        writes (they take RAM's copies, by which the writes are counted); made (`_make_room_for_writes`) right before
        the first write there (`_close`: the top level's first, the newest first)."""
        levels, rooms = self.cascade.levels, {}
        for i in range(1, len(levels) - 1):
            need = sum(self._bytes_below(levels[i], self.ram.entries[k]) for k, w in where.items()
                       if w == i and k in self.ram.entries)
            if need:
                rooms[i] = need, self._past_room(i, need, where)
        self._say_failing_below(where, rooms)
        return rooms

    def _make_room_for_writes(self, i: int, need: int, let_go: list[str], seal: float) -> None:
        """Room made at once in level `i` for `need` bytes of the stop's writes there (caller locks): `let_go` deleted,
        what else it sheds moved down sealed at `seal`, older than every write of the stop. Made write by write, each
        one's room moved a history down sealed as that write, newer than the stop's writes to the level below, which
        its arrival then evicted first."""
        levels = self.cascade.levels
        lvl, below = levels[i], levels[i + 1]
        self._let_go_in(i, let_go, failing=below not in (self._hand_down_levels() or []))
        failures = self.cascade.write_failures[below.name]
        ok, why = self.cascade.make_room(i, need, seal)
        if ok or self.cascade.write_failures[below.name] == failures:
            return
        # the level below failed its first write within the stop (it worked, or took none, before): as where it
        # failed before the stop (`_past_room`), the older ones that cannot move down leave for the newer writes;
        # kept, they left the level full and each newer write refused (the newest lost, the older kept)
        stay = self._past_room(i, need, {}, failing=True)
        if not stay:
            return
        log.warning("stopping: the %s level failed a write at %s (%s): the %s level lets go of %d older histor%s it "
                    "held that could not move down, so that the stop's newer ones fit (the newest are kept, not the "
                    "oldest)", below.name, below.folder, why, lvl.name, len(stay), "y" if len(stay) == 1 else "ies")
        self._let_go_in(i, stay, failing=True)
        self.cascade.make_room(i, need, seal)

    def _let_go_in(self, i: int, keys: list[str], failing: bool) -> None:
        """`keys` let go in level `i` for the stop's writes there (caller locks), each said by the cascade's line:
        `failing`, the level below cannot take them; else the stop's writes to the last level leave no room."""
        levels = self.cascade.levels
        why = (f"the {levels[i + 1].name} level cannot take it (its writes are failing), and the stop's newer "
               f"histories take its room" if failing else
               f"the stop's writes to the {levels[-1].name} level leave no room there for it")
        for k in keys:
            if k in levels[i].entries:
                self.cascade._delete(i, k, "shutdown", why)

    def _past_room(self, i: int, need: int, where: dict[str, int], failing: bool | None = None) -> list[str]:
        """Of what level `i` sheds for `need` bytes of the stop's writes, those let go there rather than moved down
        (caller locks): those the last level would let go for the stop's own writes there (copied there, each, a
        warm level's worth on another volume, was evicted again within the same stop), the newest that fit beside
        the planned writes still moving down (none where the last level has no budget); all where the level below
        is left out of the plan, failing (moved down, each failed: the level kept its older ones and refused the
        stop's newer ones; `failing` True: found failing within the stop). Held and stuck ones never."""
        levels, planned = self.cascade.levels, self._hand_down_levels() or []
        lvl, last = levels[i], levels[-1]
        failing = levels[i + 1] not in planned if failing is None else failing
        if not lvl.budget_bytes or (not failing and (i + 1 != len(levels) - 1 or not last.budget_bytes)):
            return []
        room = 0 if failing else last.budget_bytes - self._queue_taken([last])[0] - sum(
            self._bytes_below(last, self.ram.entries[k]) for k, w in where.items() if w == i + 1 and k in self.ram.entries)
        shed, used = [], lvl.used_bytes
        for e in sorted(lvl.entries.values(), key=lambda e: (e.sealed_at, e.key)):   # its oldest leave first
            if used + need <= lvl.budget_bytes:
                break
            shed.append(e)
            used -= e.n_bytes
        stuck = self.cascade.blocked.stuck(levels[i + 1])   # a folder at its name there: it stays, kept
        out = []
        for e in reversed(shed):   # the newest of them keep the room left below
            if not failing and e.n_bytes <= room:
                room -= e.n_bytes
            elif e.key not in self.cascade.held and e.key not in stuck:
                out.append(e.key)
        return out

    def _say_failing_below(self, where: dict[str, int], rooms: dict[int, tuple[int, list[str]]]) -> None:
        """Said once at a stop whose plan leaves out levels failing below the ones it writes (caller locks): the
        newest histories kept above, the older ones there let go for them (each said by the cascade's own line)."""
        planned, below = self._hand_down_levels() or [], self.cascade.levels[1:]
        if not planned or len(planned) == len(below):
            return
        n = len(planned)
        let_go = sum(len(go) for i, (_, go) in rooms.items() if i == n)
        kept = sum(1 for w in where.values() if w <= n)
        gone, at = " and ".join(lvl.name for lvl in below[n:]), ", ".join(lvl.folder for lvl in below[n:])
        # one history is no "1 most recently used histories"; none let go, no "lets go of 0" nor "the newest kept"
        which = "the one history" if kept == 1 else f"the {kept} most recently used histories"
        go = (f", and lets go of {let_go} older one{'' if let_go == 1 else 's'} it held that could not move down "
              f"(the newest are kept, not the oldest)" if let_go else "")
        log.warning("stopping: the %s level%s failing (its writes or removals at %s, since before the stop): the stop "
                    "writes nothing there; the %s level%s %s the stop writes%s", gone,
                    " is" if len(below) - n == 1 else "s are", at, " and ".join(lvl.name for lvl in planned),
                    " keeps" if n == 1 else "s keep", which, go)

    def _by_last_use(self, keys: Collection[str], newest_first: bool = False,
                     entries: dict[str, RamEntry] | None = None) -> list[str]:
        """RAM's `keys` (or `entries`') by their histories' last use (RamEntry.last_used), the least recent first or
        `newest_first`, ties by key (caller locks): the one order a stop seals, picks, writes after all and lets go by."""
        e, sign = self.ram.entries if entries is None else entries, -1 if newest_first else 1
        return sorted(keys, key=lambda k: (sign * e[k].last_used, k))

    def _fit_below_ram(self, n_bytes: int) -> bool:
        """Whether `n_bytes` of RAM's histories (what the level counts for them: `_bytes_below`) fit in the level
        below RAM (its budget, its volume's free space) so that no write at the stop makes room at the expense of
        another written there: then the order they are written in cannot change which stay. Written oldest first
        otherwise, so that each write's room is made from older ones (written newest first, an older one would push
        out a newer one: plan_demotions takes the oldest seals first, and the newer ones are sealed later)."""
        below = self.cascade.levels[1] if len(self.cascade.levels) > 1 else None
        if not isinstance(below, DiskLevel) or (below.budget_bytes and n_bytes > below.budget_bytes):
            return False
        free = self.io.free_bytes(below.folder)
        return free is not None and n_bytes <= free

    # -- the monitor feed -------------------------------------------------------------------------

    def _queue_left_out(self, live: list[tuple[int, float | None]]) -> int:
        """With no RAM level, how many of the queue's histories and the contexts' (`live`, the most recently used
        first: the stop parks them to the queue in the reverse order, least recently used first) the queue's plan
        leaves out (caller locks): the feed counted them all, and said 10 where the stop kept 4. 0 with RAM (its
        own plan, or none) or where the queue's plan would not apply. A context's history superseding a queued copy
        is not known here (the copy counted as staying: the careful side)."""
        disk = None if self.ram is not None else self._disk_levels_planned()
        if disk is None:
            return 0
        queued = list(self._pending.values())
        per_token = self.engine.bytes_per_token
        replaced_by = self._replaced_by(queued) + [None] * len(live)
        sizes = [e.n_bytes for e in queued] + [n * per_token for n, _ in live[::-1]]
        counted = [self._bytes_below(disk[-1], e) for e in queued] + [
            disk[-1].bytes_at_most(LIVE_KEY, "conversation", n, n * per_token, LIVE_META) for n, _ in live[::-1]]
        return len(self._unkept(disk, sizes, counted, replaced_by, [str(i) for i in range(len(sizes))]))

    def stop_would_keep(self, live: list[tuple[int, float | None]]) -> int:
        """How many histories a clean stop now would keep (the monitor feed's `stop.conversations`): `live`, the
        contexts' histories it would park, each (token count, seconds since its last use: slots.idle_s), RAM's and
        the spill writer's queue, less those its plan leaves out: where RAM's go to the disk levels below it, one
        plan over all of them (stop_writes.stop_plan, the most recently used first: a context's history is weighed
        alike whether its park goes to RAM or, past RAM's budget, to the queue), RAM's and the queue's shorter
        copies kept only beside it (`_copies_beside`). Where no plan applies (no RAM level, a level failing), all
        of them: the most it writes."""
        with self._lock:
            lvls = self._hand_down_levels()
            if lvls is None:
                return len(live) + self.unwritten() - self._queue_left_out(live)
            entries = {**self._pending, **self.ram.entries}
            later = superseded_keys([e for e in entries.values() if e.kind == "conversation"])
            first = [e for k, e in entries.items() if k not in later]
            per_token = self.engine.bytes_per_token   # the levels count their sidecars too (_bytes_below)
            now = self.clock()   # a context's last use as its park would keep it (parking.park: now - idle_s)
            sizes = [*([lvl.bytes_at_most(LIVE_KEY, "conversation", n, n * per_token, LIVE_META) for lvl in lvls]
                       for n, _ in live),
                     *([self._bytes_below(lvl, e) for lvl in lvls] for e in first)]
            used = [*(used_at(now, idle) for _, idle in live), *(e.last_used for e in first)]
            plan = self._plan(lvls, sizes, used)
            where = [0] * len(sizes) if plan is None else plan
            placed = [i for i, w in enumerate(where) if w is not None]
            kept = [first[i - len(live)].key for i in placed if i >= len(live)]
            taken = [sum(sizes[i][level] for i in placed if where[i] == level) for level in range(len(lvls))]
            _, copies = self._copies_beside(lvls, kept, later, taken, entries)
        return len(placed) + len(copies)
