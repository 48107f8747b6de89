"""Parking: a context's history captured before it is overwritten (part of `ConversationCache`).

What this is: `park` (admission by policy.decide_admission: RAM, a disk spill or a counted discard),
superseding the shorter histories a longer one replaces, the segment and system-prompt saves a
park makes, and the spill writer's job (the first disk level that takes a capture, else RAM, else
a counted discard). What this is not: lookup or restore (restoring.py), the levels' files (disk.py)
or the rules (policy.py). A mixin: the state it uses is made by `ConversationCache.__init__`.
"""

from __future__ import annotations

import logging
import math
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import policy
from .disk import conversation_key, tokens_array
from .memory import MIB
from .ram import RamEntry, RamLevel, used_at
from .restoring import common_prefix_len
from .segments import anchor_positions, chain_keys, plan_segment_saves, system_prompt_anchor
from .stop_writes import Unkept, gone_for_good, written_after_all
from .system_prompt import PrefixStore

# How long the spill thread waits for the holds on lookup hits to end before it writes (RestoreMixin.holding: from
# a request's lookup to the end of its restore, a disk read of ~0.1-0.3 s a 200 MiB image here). Written while a
# hit is held, a history that needs the hit's room took it anyway (held entries leave last) and the request read
# its whole prompt again; written after, the hit is in its context and its cache copy may go.
HOLD_WAIT_S = 30.0

log = logging.getLogger("strata.cache")


@dataclass(frozen=True)
class ParkResult:
    destination: str  # "ram" | "disk" | "discard" | "none" (empty or already cached)
    floor: str
    key: str | None
    n_tokens: int
    n_bytes: int
    reason: str


@dataclass(frozen=True)
class Held:
    """A stop's history held unwritten: its RAM copy, and the seal its place in the queue took."""
    entry: RamEntry
    seal: float


@dataclass
class StopQueue:
    """A clean stop's plan for the spill writer's queue (cache.stop_writes), while its writes last."""
    index: dict[str, int]       # the queue's keys -> their place in it
    unkept: dict[int, Unkept]   # stop_writes.unkept_at_stop
    written: set[int] = field(default_factory=set)   # places whose writes succeeded
    gone: set[int] = field(default_factory=set)      # left out and let go: certain, not written, counted
    held: dict[int, Held] = field(default_factory=dict)   # left out, not yet certain to go

    @property
    def last(self) -> int:
        return len(self.index) - 1


class ParkingMixin:
    def park(self, ctx: int, reason: str = "", conversation: str = "", idle_s: float | None = None) -> ParkResult:
        """Capture context `ctx`'s history before it is overwritten (RAM, disk, or counted discard). `conversation`
        is the key the context's requests ran under (/v1/slots shows it; "" when none): kept in the entry's meta,
        and so in its sidecar on every disk level, so a session save by that key finds the history once parked.
        `idle_s`: how long ago the context was last used (None: not known, its park's time; math.inf: never, the
        least recent); a RAM entry keeps that last use (RamEntry.used_at), which a stop keeps the most recent of,
        not the time it was parked."""
        if idle_s is not None and (not isinstance(idle_s, (int, float)) or isinstance(idle_s, bool)
                                   or math.isnan(idle_s) or idle_s < 0):
            raise ValueError(f"idle_s must be None or a number of seconds >= 0, got {idle_s!r}")
        tokens = tokens_array(self.engine.context_tokens(ctx))
        n = int(tokens.shape[0])
        if n == 0:
            return ParkResult("none", policy.FLOOR_NONE, None, 0, 0, "empty context")
        if self._closed:
            return _after_close(n)
        key = conversation_key(self.identity, tokens)
        with self._lock:
            found = self.cascade.find(key)
            if found is not None or key in self._pending:
                where = self.cascade.levels[found[0]].name if found else "ram"
                return ParkResult("none", policy.FLOOR_NONE, key, n, 0, f"already cached in {where}")
        snapshot_mib = self.engine.context_bytes(ctx) / MIB
        # with every level off each park is a counted discard whatever the memory: not read (a file read on
        # the worker thread for each request that displaces a history)
        available = self.memory.available_mib() if self.ram is not None or self.first_disk is not None else 0.0
        c = self.config
        adm = policy.decide_admission(available, snapshot_mib, c.conversation_cache_min_free_mib,
                                      c.conversation_cache_park_min_free_mib, self.park_target,
                                      ram_on=self.ram is not None, disk_on=self.first_disk is not None)
        self._admit(adm, "park", adm.destination)
        now = self.clock()
        if adm.destination == policy.DISCARD:
            discards = self._count_park("discard")
            # a warning only when a level that could have kept it is on; with every level off
            # (--conversation-cache-mib 0 and no disk) each park is a discard by the user's choice
            level = logging.WARNING if (self.ram is not None or self.first_disk is not None) else logging.DEBUG
            log.log(level, "park discarded (%s); discards=%d", adm.reason, discards)
            self._save_prefixes(ctx, tokens, now)  # each prefix has its own placement
            return ParkResult("discard", adm.floor, key, n, 0, adm.reason)
        entry = RamEntry(key, "conversation", tokens, list(self.engine.snapshot_chunks(ctx)), now, now,
                         {"reason": reason, **({"conversation": conversation} if conversation else {})},
                         used_at(now, idle_s))
        if self._closed:   # during the copy (a stop gave this step up as stuck, then closed the cache)
            return _after_close(n)
        destination, why = adm.destination, adm.reason
        if destination == policy.RAM:
            with self._lock:
                room, room_why = self.cascade.make_room(0, entry.n_bytes, now)
                if room:
                    self.ram.add(entry)
                    self._supersede(tokens, key, durable=False)
            if not room:
                if self.first_disk is not None and available >= snapshot_mib + c.conversation_cache_park_min_free_mib:
                    destination, why = policy.DISK, f"RAM level refused ({room_why}); spill to disk"
                else:
                    self._count_park("discard")
                    return ParkResult("discard", adm.floor, key, n, 0, f"RAM level refused: {room_why}")
        if destination == policy.DISK:
            with self._lock:
                self._pending[key] = entry
            self._spill.submit(key)
        self._count_park(destination)
        self._save_prefixes(ctx, tokens, now)
        if self._has_age_limits:
            self.enforce()
        return ParkResult(destination, adm.floor, key, n, entry.n_bytes, why)

    def _count_park(self, destination: str) -> int:
        """Counts a park by where it went; under the lock, as the spill thread counts its discards (a
        `+=` on the Counter from two threads can lose one)."""
        with self._lock:
            self.parks[destination] += 1
            return self.parks[destination]

    def _supersede(self, tokens: np.ndarray, keep: str, *, durable: bool = True, but_last: bool = False) -> None:
        """Discard conversation entries whose history is a strict prefix of `tokens` (caller locks).

        `durable` = False (the newer history is in RAM only): disk entries are kept, since a crash
        before the newer one reaches disk would otherwise lose the whole history; they are discarded
        when it gets there (a spill, or a degradation out of RAM: `_on_cascade_event`). A newer one no level
        keeps across a stop (takes_whole: larger than every disk level's whole budget) supersedes nothing: the
        shorter ones are all of the conversation the stop can write (it writes them where the longer one fails).
        `but_last`: the last level's copies stay (a stop's history left unwritten: _hold_unwritten)."""
        if not durable and self.ram is not None:
            newer = self.ram.entries.get(keep)
            if newer is not None and not self.takes_whole(newer.n_bytes):
                return
        for lvl in self.cascade.levels[:-1] if but_last else self.cascade.levels:
            if not durable and not isinstance(lvl, RamLevel):
                continue
            for e in list(lvl.entries.values()):
                if e.key != keep and replaces(tokens, e):
                    if self.cascade.discard(e.key, "superseded", ram_only=not durable):
                        self.superseded += 1

    def _superseded_in_ram(self) -> set[str]:
        """The RAM level's conversation entries a longer history there supersedes once it is on disk (caller
        locks): one parked after the longer copy of its conversation (`_supersede` discards shorter ones only
        as a longer one arrives). A stop writes the longer one and these go, unwritten."""
        return superseded_keys([e for e in self.ram.entries.values() if e.kind == "conversation"])

    def _on_cascade_event(self, ev: tuple) -> None:
        """A history degraded out of RAM is on disk now: the disk prefixes it supersedes can go. A stop's lines
        are told of the histories that left a disk level (those it wrote leave its N)."""
        action, level, key = ev[0], ev[1], ev[2]
        if self._told is not None and action in ("evict", "discard") and level != "ram":
            self._told.left(key, evicted=action == "evict")
        if action != "degrade" or level != "ram":
            return
        found = self.cascade.find(key)
        if found is not None and getattr(found[1], "kind", "") == "conversation":
            self._supersede(found[1].tokens, key)

    def _save_prefixes(self, ctx: int, tokens: np.ndarray, now: float) -> None:
        """Segment tier and system-prompt cache: write the anchored prefixes that are missing."""
        stores = [s for s in (self.segments, self.system_prompts) if s.level.state == "on"]
        if not stores or not self.opener:
            return
        anchors = anchor_positions(tokens, self.opener)
        if not anchors:
            return
        keys = chain_keys(self.identity.model_id + "/" + self.identity.kv_layout, tokens, anchors)
        if self.system_prompts.level.state == "on":
            a = system_prompt_anchor(anchors)
            self._save_prefix(self.system_prompts, ctx, tokens, a, keys[0], now, "system_prompt_hit")
        if self.segments.level.state == "on":
            with self._lock:
                present = set(self.segments.level.entries) | self._prefix_pending
            plan = plan_segment_saves(anchors, keys, present)
            for a, k in plan.saves:
                self._save_prefix(self.segments, ctx, tokens, a, k, now, "segment_hit")

    def _save_prefix(self, store: PrefixStore, ctx: int, tokens: np.ndarray, n: int, key: str, now: float,
                     source: str) -> None:
        """Copies the prefix's KV now (the context is about to be overwritten) and leaves the disk write
        to the writer thread, so a park never holds the scheduler for a file write."""
        lvl = store.level
        with self._lock:
            if key in lvl.entries or key in self._prefix_pending:
                return
        est = n * self.engine.bytes_per_token
        adm = policy.place_disk_io(self.memory.available_mib(), est / MIB, self.config.conversation_cache_min_free_mib,
                                   self.config.conversation_cache_park_min_free_mib, "park")
        self._admit(adm, "park", f"save {store.name}")
        if adm.destination != policy.DISK:
            return
        pieces = list(self.engine.snapshot_chunks(ctx, n))
        prefix = tokens[:n].copy()
        with self._lock:
            self._prefix_pending.add(key)
        self._spill.submit_job(lambda: self._write_prefix(store, key, prefix, pieces, est, now))

    def _write_prefix(self, store: PrefixStore, key: str, tokens: np.ndarray, pieces: list, est: int,
                      now: float) -> None:
        """On the writer thread: room, the file, then the index (a lookup meanwhile simply misses it)."""
        lvl = store.level
        try:
            try:
                e, _ = store.cascade.write_into(0, est, now, lambda: lvl.write(key, store.name, tokens, iter(pieces), now),
                                                lock=self._lock)
            except OSError as exc:
                with self._lock:
                    self.spill_failures += 1
                log.warning("%s write failed: %s", store.name, exc)
                return
            if e is None:
                return
            with self._lock:
                lvl.add(e)
                store.cascade.make_room(0, 0, now)
        finally:
            with self._lock:
                self._prefix_pending.discard(key)

    # -- spill (the writer thread is spill.SpillWriter) -----------------------------------------

    def _spill_one(self, key: str) -> int | bool | None:
        """Write a disk-bound capture to the first disk level that takes it (a later one when the first
        refuses: too large for its whole budget, full, an I/O error), else keep it in RAM, else discard. Its bytes:
        written; False: discarded; None: nothing to write, kept in RAM, or held unwritten by a stop (what a stop's
        lines count). A stop's turn is settled after it, whatever the outcome (an error escaping it: a failure)."""
        outcome, failed = None, True
        try:
            outcome, failed = self._spill_turn(key)
        finally:
            with self._lock:
                self._writing = None
            self._settle_stop(key, outcome, failed)
        return outcome

    def _spill_turn(self, key: str) -> tuple[int | bool | None, bool]:
        """`_spill_one`'s outcome, and whether a write failed (held unwritten by the stop's plan: not written)."""
        with self._lock:
            entry = self._pending.get(key)
            if entry is None or key in self._for_hand_down:   # that one joins RAM's hand-down at the close
                return None, False
            stop = self._stop
            at = None if stop is None else stop.index.get(key)
            if at is not None and at in stop.unkept:
                self._hold_unwritten(stop, at, entry)
                return None, False
            self._writing = key   # written from here on, whatever a stop's plan made now says (cache._not_held)
        self._wait_for_holds()
        return self._write_pending(entry)

    def _write_pending(self, entry: RamEntry, seal: float | None = None) -> tuple[int | bool | None, bool]:
        """The write of queued `entry` (`seal`: the one its place in the queue took, for one held and written after
        all): its outcome (as `_spill_one`'s) and whether a write failed: an I/O error at a level, or refused
        everywhere where a disk level's whole budget holds it (one larger than every budget is refused by plan)."""
        key = entry.key
        written, lvl, refused, errors, said = self._write_down(entry, self.first_disk, seal)
        with self._lock:
            self._pending.pop(key, None)  # the RAM copy is freed here, written or not
            if written is None:
                self.spill_failures += 1
                where = "; ".join(refused)
                failed = errors or self._disk_takes(entry.n_bytes)
                # refused only by levels whose failing writes were warned of already (a folder gone read-only
                # fails every park): counted, and a DEBUG line, not the same warning again each park
                level = logging.DEBUG if said else logging.WARNING
                if self._keep_in_ram(entry):
                    log.log(level, "spill of %s refused (%s); kept in RAM instead (check the free space, budget and "
                            "write permission there)", key, where)
                    return None, failed
                self.parks["discard"] += 1
                log.log(level, "spill of %s refused (%s); discards=%d (check the free space, budget and write "
                        "permission there)", key, where, self.parks["discard"])
                return False, failed
            if refused:
                log.info("spill of %s: %s; written to the %s level instead", key, "; ".join(refused), lvl.name)
            lvl.add(written)
            self._supersede(entry.tokens, key)
            self.cascade.make_room(self.cascade.levels.index(lvl), 0, self.clock())
            return entry.n_bytes, errors   # as the hand-down counts its histories (a RAM copy's bytes)

    # -- a stop's histories left unwritten (cache.stop_writes) ----------------------------------

    def _hold_unwritten(self, stop: StopQueue, at: int, entry: RamEntry) -> None:
        """A stop's history the last disk level would take and let go within the stop (caller locks): not written at
        its turn, its RAM copy held (still in the queue's entries: a lookup finds it) until the writes it was left
        for have succeeded (`_settle_stop`); its seal is taken now, so that one written after all keeps its place in
        first-in-first-out. What that level holds is older and would have left before it, but it leaves only as the
        later writes need its room (their make_room, oldest first): deleted here, a stop killed after it (SIGKILL,
        power) or whose later writes failed lost histories the old order still held. So do the shorter copies of it
        there: older than every write of the stop, they push none of those out, and one that stays is what is left
        of its conversation. Those in the levels above go, as on its write (kept, they could push one of the levels'
        oldest down to the last level, a newer arrival there)."""
        stop.held[at] = Held(entry, self.cascade.next_seal(self.clock()))
        self._supersede(entry.tokens, entry.key, but_last=True)

    def _settle_stop(self, key: str, outcome: int | bool | None, failed: bool) -> None:
        """After each turn of the stop's queue: the held histories the writes so far make certain to go are let go
        (stop_writes.gone_for_good); where a write failed, or the queue ends with some still held, those the last
        level would still hold are written after all (the plan's writes did not all happen: the old order kept
        them; `_write_held`), and the rest of the queue is written as before."""
        with self._lock:
            stop = self._stop
            at = None if stop is None else stop.index.get(key)
            if at is None:
                return
            if failed:
                self._stop = None
                why = f"the write of {key} failed"
            else:
                if isinstance(outcome, int) and not isinstance(outcome, bool):
                    stop.written.add(at)
                needs = {i: stop.unkept[i].needs for i in stop.held}
                for i in sorted(gone_for_good(needs, stop.written, stop.gone)):
                    stop.gone.add(i)
                    self._let_go(stop.held.pop(i).entry, stop.unkept[i].why)
                if at < stop.last:
                    return
                self._stop = None
                why = "the stop's queue ended before the writes they were left for"
        self._write_held(stop.held, why)

    def _let_go(self, entry: RamEntry, why: str, levels: str | None = None) -> None:
        """A held history certain to go now (caller locks): its RAM copy freed, counted apart, said. `levels`: the
        levels it was not written to, as the line names them (default the last one's name: the queue's plan)."""
        self._pending.pop(entry.key, None)
        self.stop_unwritten += 1
        self.stop_unwritten_bytes += entry.n_bytes
        log.info("stopping: conversation %s (%.1f MiB) not written to the %s level: %s", entry.key,
                 entry.n_bytes / MIB, self.cascade.levels[-1].name if levels is None else levels, why)

    def _write_held(self, held: dict[int, Held], why: str) -> None:
        """The stop's held histories written after all, in queue order, each with its seal (spill thread, or the
        stopping one once the writer is idle), but those the last level would no longer hold had the old order
        written them (stop_writes.written_after_all: the newer ones fill it; written, one would push out a newer
        one): let go. The spill writer counts each written again by what became of it."""
        with self._lock:
            last = self.cascade.levels[-1]
            order = sorted(held)
            start = written_after_all([(held[i].seal, held[i].entry.n_bytes) for i in order],
                                      [(e.sealed_at, e.n_bytes) for e in last.entries.values()], last.budget_bytes)
            for i in order[:start]:
                self._let_go(held.pop(i).entry, f"{why}, but the histories written after it fill the {last.name} "
                             f"level's budget of {last.budget_bytes / MIB:.1f} MiB: the old order let it go too")
        if not held:
            return
        n_bytes = sum(h.entry.n_bytes for h in held.values())
        log.warning("stopping: %s; the %d conversation%s (%.1f MiB) left unwritten for the writes after %s written "
                    "after all", why, len(held), "" if len(held) == 1 else "s", n_bytes / MIB,
                    "it is" if len(held) == 1 else "them are")
        for i in sorted(held):
            h = held.pop(i)
            self._wait_for_holds()
            try:
                outcome, _ = self._write_pending(h.entry, h.seal)
            except Exception:   # ends this one alone: raised on, it left the ones after it held for ever, uncounted
                log.exception("stopping: the write after all of %s failed; not kept", h.entry.key)
                with self._lock:
                    self._pending.pop(h.entry.key, None)
                    self.spill_failures += 1
                outcome = False
            self._spill.recount(h.entry.key, outcome)

    def _wait_for_holds(self) -> None:
        """Until no request holds a hit in the conversation levels (at most HOLD_WAIT_S; spill thread only: the
        worker thread that holds one must never wait here)."""
        deadline = time.monotonic() + HOLD_WAIT_S
        while time.monotonic() < deadline and not self._closed:
            with self._lock:
                if not self.cascade.held:
                    return
            time.sleep(0.005)

    def _write_down(self, entry: RamEntry, start: int, seal: float | None = None) -> tuple:
        """Write `entry` to the first disk level from index `start` on that takes it: (the written entry
        or None, that level, why each level before it refused, whether a write failed: an I/O error, whether every
        refusal was said already: a failed write at a level warned of as failing, a folder on its name there, a
        full level whose refusals were said: nothing new to say). The caller
        adds it to the level. `seal`: the one it takes (else the next after every seal given)."""
        refused: list[str] = []
        written = lvl = None
        errors = False
        said = True
        for i in range(start, len(self.cascade.levels)):
            lvl = self.cascade.levels[i]
            with self._lock:
                # after every seal given: first-in-first-out is this order
                now = self.cascade.next_seal(self.clock()) if seal is None else seal
                failing = self.cascade.is_failing(lvl)   # before this write: its failures said already
            try:
                with self._lock:
                    lvl.ensure_folder()  # before make_room: a removed folder's entries are not evicted first

                def write(lvl=lvl, now=now):
                    return lvl.write(entry.key, entry.kind, entry.tokens, iter(entry.pieces), now,
                                     created_at=entry.created_at, meta=entry.meta)
                written, why = self.cascade.write_into(i, entry.n_bytes, now, write, lock=self._lock, key=entry.key)
            except OSError as exc:
                written, why, errors = None, f"write failed: {exc}", True
                with self._lock:
                    # a folder on this history's name: said once a name (blocked_names.py), not again here
                    failing = self.cascade.write_failed(lvl, exc, entry.key) or failing
            else:
                with self._lock:   # refused by plan (its budget, a full volume): said once until one is written there
                    failing = written is None and self.cascade.refusal_said(lvl, entry.n_bytes)
            if written is not None:
                with self._lock:
                    self.cascade.write_worked(lvl)
                break
            said = said and failing
            refused.append(f"{lvl.name} {lvl.folder}: {why}")
        return written, lvl, refused, errors, said and bool(refused)

    def _keep_in_ram(self, entry: RamEntry) -> bool:
        """A capture the disk refused goes to the RAM level when the parking floor and its budget allow
        (caller locks): better than discarding a history RAM can hold."""
        if self.ram is None or self._closed:
            return False
        c = self.config
        adm = policy.decide_admission(self.memory.available_mib(), entry.n_bytes / MIB,
                                      c.conversation_cache_min_free_mib, c.conversation_cache_park_min_free_mib,
                                      policy.RAM, ram_on=True, disk_on=False)
        if adm.destination != policy.RAM:
            return False
        room, _ = self.cascade.make_room(0, entry.n_bytes, self.clock())
        if room:
            self.ram.add(entry)
            self._supersede(entry.tokens, entry.key, durable=False)
        return room

    def flush(self, progress: Callable[[int, int, int], None] | None = None) -> None:
        """Wait until every queued spill is written (tests, shutdown; `progress(written, kept, refused)` as each
        is: SpillWriter.flush)."""
        self._spill.flush(progress)


def _after_close(n: int) -> ParkResult:
    """A park asked of a closed cache: by an engine step a stop gave up as stuck, ending after the close. Nothing
    would keep it (its RAM was handed down, its spill writer stopped: a writer started again then wrote files
    while the process exited), so it is not taken, nor counted."""
    return ParkResult("none", policy.FLOOR_NONE, None, n, 0, "the cache is closed: the server stopped")


def superseded_keys(entries, by=None) -> set[str]:
    """The keys of the conversation `entries` whose history is a strict prefix of one in `by` (default: `entries`;
    `replaces`). Sorted by their token ids, the histories that begin with one follow it at once, so each is compared
    with the first after it alone: comparing every pair took 1.1 s with 400 histories sharing a long system prompt,
    under the cache lock, in each GET /v1/monitor (ConversationCache.stop_would_keep). Tokens of 4 bytes each: a
    byte prefix is a token prefix."""
    rows = sorted(_row(e) for e in (entries if by is None else by))
    out = set()
    for e in entries:
        row = _row(e)
        i = bisect_right(rows, row)   # past its own row: the first after it is longer where it begins with it
        if i < len(rows) and rows[i].startswith(row):
            out.add(e.key)
    return out


def _row(e) -> bytes:
    return tokens_array(e.tokens).astype(">u4").tobytes()


def replaces(tokens: np.ndarray, e) -> bool:
    """Whether a history of `tokens` supersedes conversation entry `e`: e's history is a strict prefix of it."""
    return (e.kind == "conversation" and e.n_tokens < tokens.shape[0]
            and common_prefix_len(e.tokens, tokens) == e.n_tokens)
