"""`ConversationCache`: the façade the scheduler calls (docs/internals.md, "Conversation cache").

What this is: the mechanism that ties the levels (RAM -> warm -> cold), the segment tier, the
system-prompt cache and named sessions to the engine: park a context before it is overwritten
(admission by policy.decide_admission), look a prompt up (longest valid prefix, ties to the fastest
level), restore a hit (placement by policy.place_disk_io, validation pass, apply pass, restore
ladder), and count everything for /metrics, the INFO line and the monitor feed. An asynchronous
spill writer writes disk-bound captures. This module holds the state (made here, in `__init__`), the
set-up, the admission bookkeeping, upkeep and shutdown; the operations are in one module each:
parking.py (park, supersede, prefix saves, spill), restoring.py (lookup, restore), sessions.py
(named sessions). What this is not: policy (policy.py), file formats (disk.py) or HTTP (http.py).
One lock guards the indexes; the spill writer writes files outside it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import math
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection
from functools import partial

from . import policy, report
from .cascade import Cascade
from .clock_presence import announce_once, live_clocks, release_all
from .close_progress import CloseProgress
from .damaged_files import remove_skipped
from .disk import PIECE_BYTES, DiskLevel, Identity, tokens_array
from .fileio import FileIO
from .folder_checks import log_skipped_files, warn_budget_beyond_free_space
from .memory import MIB, MemoryProbe
from .options import CacheConfig
from .parking import ParkingMixin, StopQueue, replaces, superseded_keys
from .ram import RamEntry, RamLevel, used_at
from .restoring import RestoreMixin, common_prefix_len
from .sessions import SaveUnderWay, SessionRemoval, SessionsMixin, SessionStore
from .spill import SpillWriter
from .steady_clock import SteadyClock, clock_id, far_ahead_limit, may_adopt
from .stop_writes import hand_down_picks, one_stop_plan, unkept_at_stop
from .system_prompt import PrefixStore

log = logging.getLogger("strata.cache")
# a context's history the stop would park, as the feed weighs its sidecar: a conversation key's length, a park's meta
LIVE_KEY, LIVE_META = "0" * 32, {"reason": "shutdown", "conversation": "x" * 64}

SAVE_WAIT_POLL_S = 0.1   # how often close looks how far a session save it waits for is (the lines' rate is the caller's)
# A session save that has written no piece for this long when the cache closes is given up (its session not saved):
# a piece is one prompt chunk's KV (a few to ~100 MiB), written in well under a second by a working disk, seconds
# by a slow USB one; an image's closing fsync (gigabytes on a slow disk) also counts here. A write that hung (a
# network folder gone, a dying disk) held a bare `strata serve`'s stop for ever; the app ends one quiet for 15 s.
SAVE_STALL_S = 60.0
SHUTDOWN_SEAL_STEP_S = 1e-3   # between the seal times of histories kept at a stop: their order survives a restart


def kv_layout_of(engine) -> str:
    """The KV layout as one string for sidecars: the engine's `kv_layout()` dict when it has one."""
    if hasattr(engine, "kv_layout"):
        return json.dumps(engine.kv_layout(), sort_keys=True, separators=(",", ":"))
    return f"{engine.kv_type}/L{engine.n_layer}/Hkv{engine.n_head_kv}/B{engine.bytes_per_token}"


class ConversationCache(ParkingMixin, RestoreMixin, SessionsMixin):
    def __init__(self, config: CacheConfig, engine, *, image_format=None, memory: MemoryProbe | None = None,
                 io: FileIO | None = None, clock: Callable[[], float] = time.time,
                 piece_bytes: int = PIECE_BYTES, sealed_by: str | None = None) -> None:
        """`sealed_by`: the clock this cache's sidecars name (steady_clock.clock_id: this host's by default)."""
        if sealed_by is not None and (not isinstance(sealed_by, str) or not sealed_by):
            raise ValueError(f"sealed_by must be a non-empty string naming this clock, got {sealed_by!r}")
        self.sealed_by = clock_id() if sealed_by is None else sealed_by
        self.config = config
        self.engine = engine
        self.image_format = image_format or importlib.import_module("strata.engine.snapshot")
        self.memory = memory or MemoryProbe()
        self.clock = SteadyClock(clock)   # never back: a clock put back must not make the newest the oldest
        self.io = io or FileIO()
        self.identity = Identity(str(engine.model_id), kv_layout_of(engine))
        self._lock = threading.RLock()
        self.opener = list(getattr(engine, "message_opener_ids", []) or [])
        self._check_folders()
        self._folder_clocks: dict = {}   # folder -> clock_presence.FolderClock, each announced before it is read
        levels: list = []
        self.level_configs = config.levels
        for lc in self.level_configs:
            if not lc.on:
                continue
            if lc.name == "ram":
                levels.append(RamLevel(lc.budget_bytes, lc.max_age_s))
            else:
                lvl = DiskLevel(lc.name, lc.folder, lc.budget_bytes, lc.max_age_s, self.identity,
                                io=self.io, piece_bytes=piece_bytes, image_magic=self._image_magic(),
                                sealed_by=self.sealed_by)
                announce_once(self._folder_clocks, lvl, self.sealed_by, self.clock.wall)
                lvl.open()
                remove_skipped(lvl)
                log_skipped_files(lvl)
                warn_budget_beyond_free_space(lvl)
                if lvl.state == "on":
                    levels.append(lvl)
                else:
                    log.warning("conversation cache %s level %s: %s; the level is off (nothing is kept there): "
                                "give --conversation-cache-%s-dir a folder this user can write", lc.name, lc.folder,
                                lvl.state, lc.name)
        self._told: CloseProgress | None = None   # a stop's lines: told of what its writes evicted (cascade events)
        self.cascade = Cascade(levels, config.conversation_cache_when_full, on_event=self._on_cascade_event)
        self.ram: RamLevel | None = levels[0] if levels and isinstance(levels[0], RamLevel) else None
        self.first_disk = next((i for i, lv in enumerate(levels) if isinstance(lv, DiskLevel)), None)
        self.segments = self._prefix_store("segment", config.segment_dir, config.conversation_cache_segment_mib,
                                           piece_bytes)
        self.system_prompts = self._prefix_store("system_prompt", config.system_prompt_dir,
                                                 config.conversation_cache_system_prompt_mib, piece_bytes)
        self.sessions = SessionStore(config.sessions_dir, self.identity, io=self.io, piece_bytes=piece_bytes)
        disk = [lvl for lvl in [*levels, self.segments.level, self.system_prompts.level]
                if isinstance(lvl, DiskLevel) and lvl.state == "on"]
        indexed = [lvl for lvl in disk if lvl.entries]
        self._reseal_far_ahead(indexed)
        for lvl in indexed:
            self.clock.seen(max(e.sealed_at for e in lvl.entries.values()))
        # counters (monitor feed, /metrics)
        self.parks: Counter[str] = Counter()
        self.hits: Counter[str] = Counter()
        self.admissions: Counter[tuple[str, str]] = Counter()  # (floor, source)
        self.admission_log: deque[dict] = deque(maxlen=20)
        self.damaged = 0  # entries found damaged at restore time (index-time skips are per level)
        self.ladder_restores = 0
        self.superseded = 0
        self.spill_failures = 0
        # histories a stop's queue held that the disk levels would have let go within the stop: not written
        self.stop_unwritten = 0
        self.stop_unwritten_bytes = 0
        self._stop: StopQueue | None = None   # a stop's plan for the spill writer's queue, while its writes last
        self._stop_queue: list[str] = []   # the keys a stop's queue held at its start: RAM's hand-down plans beside them
        self._for_hand_down: set[str] = set()   # of those, left unwritten to join RAM's hand-down (one_stop_plan)
        self.restore_seconds: deque[tuple[str, float, int]] = deque(maxlen=100)  # (level, s, tokens)
        self.restore_totals: dict[str, tuple[int, float]] = {}  # level -> (restores, seconds)
        self.park_target, self.park_target_reason = self._resolve_park_target()
        self._warn_memory_limit()
        self._pending: dict[str, RamEntry] = {}  # captures queued for the spill writer
        self._prefix_pending: set[str] = set()    # segment / system-prompt saves queued for it
        self._spill = SpillWriter(self._spill_one)
        self._closed = False
        self.closed = False   # close() has ended: a session save it waited for is done or was given up
        self.saving: SaveUnderWay | None = None   # a session save being written (it holds session_writes meanwhile)
        self.session_writes = threading.Lock()   # held by a session save while it writes, and by a DELETE's start
        self.deleting: dict[str, SessionRemoval] = {}   # session name -> the DELETE removing its files (cache's lock)
        self._has_age_limits = any(lc.on and lc.max_age_s > 0 for lc in self.level_configs)

    # -- set-up ---------------------------------------------------------------------------------

    def _check_folders(self) -> None:
        self.config.check_folders()  # also checked when the options are read, before the server listens

    def _reseal_far_ahead(self, levels: list[DiskLevel]) -> None:
        """Entries a wrong clock sealed far ahead (steady_clock.far_ahead_limit) count as sealed now, in their
        order, in the index and, where this clock sealed them, their sidecars: they age from today, and the cache's
        time stays the wall time. Another clock's files (another host's on a shared folder, a recreated container's
        whose host name changed, an older Strata's that name none) are resealed on disk and named this clock's only
        where steady_clock.may_adopt allows (no server whose clock is ahead uses the folder, whatever clock the file
        names, asked under its commit lock, and the folder's file system's clock agrees with this one); else in this run's index only: that clock may
        be the right one and this one behind, and rewritten, its files looked a year old to it (aad0950)."""
        wall = self.clock.wall()
        limit = far_ahead_limit([e.sealed_at for lvl in levels for e in lvl.entries.values()], wall)
        if limit is None:
            return
        ahead = [(e, lvl) for lvl in levels for e in lvl.entries.values() if e.sealed_at > limit]
        log.warning("conversation cache: %s sealed more than a day ahead of this clock (up to %s) among files that "
                    "are not: counted as sealed now (a clock set wrong when %s written)",
                    "1 file" if len(ahead) == 1 else f"{len(ahead)} files",
                    _date(max(e.sealed_at for e, _ in ahead)),
                    "it was" if len(ahead) == 1 else "they were")
        # in their own order, ending at `wall` (all at `wall`, first-in-first-out fell back on the keys among them);
        # written to their sidecars too: a later start that finds only these would take its clock for the wrong one
        # and trust them all, the cache's time years ahead (a right clock's newer files then evicted before them)
        ahead.sort(key=lambda el: (el[0].sealed_at, el[0].key))
        unwritten: list[str] = []
        adopted, left = 0, Counter()   # other clocks' files: taken over; left as they are, by why
        for i, (e, lvl) in enumerate(ahead):
            sealed = wall - (len(ahead) - 1 - i) * SHUTDOWN_SEAL_STEP_S
            why: list[str] = []
            adopt = None
            if e.sealed_by != self.sealed_by:
                adopt = partial(self._may_adopt, lvl, e.sealed_by, why)
            try:
                if lvl.reseal(e, sealed, adopt) and adopt is not None:
                    adopted += 1
                elif why:
                    left[why[0]] += 1
            except OSError as exc:
                unwritten.append(f"{os.path.basename(e.sidecar_path)} ({exc.strerror or exc})")
        if adopted:
            log.warning("conversation cache: %d of those sealed by another clock (another host's, a recreated "
                        "container's, or an older Strata's that named none) taken over: resealed now and named this "
                        "clock's (no server whose clock is ahead uses the folder, and its file system's clock agrees "
                        "with this one)", adopted)
        for why, n in left.items():
            log.warning("conversation cache: %d of those sealed by another host's clock (a folder shared with another "
                        "server, or written before Strata named the clock): counted as sealed now in this run only, "
                        "their files left as they are (%s; that clock may be the right one)", n, why)
        if unwritten:
            log.warning("conversation cache: %d of those cannot be resealed on disk, counted as sealed now in this run "
                        "only: %s", len(unwritten), ", ".join(unwritten[:3]) + (", ..." if len(unwritten) > 3 else ""))

    def _may_adopt(self, lvl: DiskLevel, sealed_by: str, why: list[str]) -> bool:
        """DiskLevel.reseal's `adopt`, asked under the folder's commit lock (a server of that clock starting now
        marks its use under it too); why not, appended to `why`."""
        known = self._folder_clocks.get(lvl.folder)
        offset = None if known is None else known.fs_offset_s
        live = live_clocks(lvl.folder, known.presence) if offset is not None else None
        ok, reason = may_adopt(sealed_by, offset, live)
        if not ok:
            why.append(reason)
        return ok

    def _prefix_store(self, name: str, folder: str, mib: int, piece_bytes: int) -> PrefixStore:
        lvl = DiskLevel(name, folder, mib * MIB, 0.0, self.identity, io=self.io, piece_bytes=piece_bytes,
                        image_magic=self._image_magic(), sealed_by=self.sealed_by)
        if mib > 0:
            announce_once(self._folder_clocks, lvl, self.sealed_by, self.clock.wall)
            lvl.open()
            remove_skipped(lvl)
            log_skipped_files(lvl)
        else:
            lvl.state = "off"
        return PrefixStore(lvl, self.config.conversation_cache_when_full)

    def _image_magic(self) -> bytes | None:
        magic = getattr(self.image_format, "MAGIC", None)
        return bytes(magic) if magic else None

    def _snapshot_mib_per_slot(self) -> float:
        e = self.engine
        cap = max((e.context_capacity(c) for c in range(e.n_contexts)), default=0)
        return cap * e.bytes_per_token / MIB

    def _resolve_park_target(self) -> tuple[str, str]:
        target = self.config.conversation_cache_park
        disk_on = self.first_disk is not None
        if target == "auto":
            auto = policy.resolve_auto_target(self.memory.available_mib(), self._snapshot_mib_per_slot(),
                                              self.engine.n_slots, self.config.conversation_cache_min_free_mib,
                                              disk_on=disk_on)
            log.info("%s", auto.reason)
            return auto.target, auto.reason
        if target == "disk" and not disk_on:
            log.warning("--conversation-cache-park disk without a disk level: parking stays in RAM")
            return "ram", "park=disk without a disk level: parking in RAM"
        return target, f"park target {target}"

    def _warn_memory_limit(self) -> None:
        """In a container whose memory limit leaves less than a floor, say so once at start-up (else each park
        is a discard warning that names no flag)."""
        c = self.config
        limit = self.memory.limit_mib()
        if limit is None:
            return
        advice = policy.memory_limit_advice(limit, self.memory.available_mib(), c.conversation_cache_min_free_mib,
                                            c.conversation_cache_park_min_free_mib, ram_on=self.ram is not None,
                                            disk_on=self.first_disk is not None)
        if advice:
            log.warning("conversation cache: %s", advice)

    # -- admission bookkeeping ------------------------------------------------------------------

    def _admit(self, adm: policy.Admission, source: str, action: str) -> None:
        self.admissions[(adm.floor, source)] += 1
        self.admission_log.append({"time": self.clock(), "action": action, "floor": adm.floor,
                                   "source": source, "need_mib": round(adm.need_mib, 1)})
        level = logging.INFO if adm.floor != policy.FLOOR_PARKING else logging.DEBUG
        log.log(level, "cache %s %s: %s", source, action, adm.reason)

    # -- park -----------------------------------------------------------------------------------

    # -- upkeep and shutdown --------------------------------------------------------------------

    def enforce(self) -> None:
        """Apply age limits (call now and then; budgets are applied on every put)."""
        now = self.clock()
        with self._lock:
            self.cascade.enforce(now)
            for s in (self.segments, self.system_prompts):
                if s.level.state == "on":
                    s.cascade.enforce(now)

    def keeps_across_restarts(self) -> bool:
        """Whether a parked history outlives this process (a disk level is on; close() hands RAM to it)."""
        return self.first_disk is not None

    def unwritten(self) -> int:
        """Histories only this process holds that a clean stop writes to disk: RAM's entries and the spill writer's
        queue (the monitor feed's `stop.conversations` adds the contexts' own)."""
        return (len(self.ram.entries) if self.ram is not None else 0) + len(self._pending)

    def disk_takes(self, ctx: int) -> bool:
        """Whether some disk level's whole budget holds context `ctx`'s history (a larger one's write is refused:
        nothing of it outlives this process; the stop writes a shorter copy of it then, slots.held_by_another)."""
        return self._disk_takes(self.engine.context_bytes(ctx))

    def _disk_takes(self, n_bytes: int) -> bool:
        return any(isinstance(lvl, DiskLevel) and (not lvl.budget_bytes or n_bytes <= lvl.budget_bytes)
                   for lvl in self.cascade.levels)

    def takes_whole(self, n_bytes: int) -> bool:
        """Whether a history of `n_bytes` can be kept: some disk level's whole budget holds it, or, with no disk
        level, the RAM level's (a history only RAM holds is lost at the stop where a disk level would keep a
        shorter one; parking.kept_elsewhere)."""
        if self.first_disk is not None:
            return self._disk_takes(n_bytes)
        return self.ram is not None and (not self.ram.budget_bytes or n_bytes <= self.ram.budget_bytes)

    def keeps_longer(self, tokens) -> bool:
        """Whether a level holds a conversation history that starts with `tokens`, one it can keep (takes_whole):
        a copy of those tokens would only take budget beside it."""
        t = tokens_array(tokens)
        n = int(t.shape[0])
        with self._lock:
            stores = [*(lvl.entries for lvl in self.cascade.levels), self._pending]
            return any(e.kind == "conversation" and e.n_tokens >= n and common_prefix_len(e.tokens, t) == n
                       and self.takes_whole(e.n_bytes) for es in stores for e in es.values())

    @contextlib.contextmanager
    def stop_writes(self):
        """Around a clean stop's parks: the spill writer writes nothing until they are all queued, then the queue's
        histories the disk levels would let go within the stop (stop_writes.unkept_at_stop) are held unwritten
        (ParkingMixin._hold_unwritten) and let go once the writes they were left for have succeeded; where one of the
        stop's writes fails, or the queue ends first, they are written after all. The others are written as before."""
        self._spill.hold()
        with self._lock:   # the stop's lines count its queue from here: the close comes later, the writer on meanwhile
            if self._told is None:
                self._told = CloseProgress(_unsaid)   # told what the stop's writes evict; its lines begin at the close
            told = self._told
        self._spill.mark(told.queue_written)
        try:
            yield
        finally:
            try:
                self._plan_stop_writes()
            finally:
                self._spill.release()

    def _plan_stop_writes(self) -> None:
        with self._lock:
            keys = self._stop_queue = list(self._pending)
            left = self._left_to_hand_down(keys)
            if left is not None:   # one plan with RAM's hand-down (the one disk level below RAM)
                self._for_hand_down = left
        if left is not None:
            self._spill.leave_out(left)
            return
        unkept = self._queue_plan(keys)
        if unkept:
            with self._lock:
                self._stop = StopQueue({k: i for i, k in enumerate(keys)}, unkept)
            self._spill.leave_out([keys[i] for i in unkept])

    def _left_to_hand_down(self, keys: list[str]) -> set[str] | None:
        """Where RAM's histories go to one disk level at the stop: the queued `keys` it does not write at their turn
        (caller locks), by one plan over them and RAM's (stop_writes.one_stop_plan, the most recently used first).
        They join RAM's at the close (`_close`), where the hand-down's plan, made beside the queue's written ones,
        picks the same and writes after all those a failed write left room for. A shorter copy joins too (written only
        where its longer one is not); one larger than the whole budget is written as before (refused). None: no such
        plan (the queue's own, `_queue_plan`, then)."""
        lvl = self._hand_down_level()
        if lvl is None or self._stop is not None or any(k not in self._pending for k in keys):
            return None
        queued = [self._pending[k] for k in keys]
        ram = list(self.ram.entries.values())
        later = superseded_keys([e for e in [*queued, *ram] if e.kind == "conversation"])
        first = [[e for e in group if e.key not in later] for group in (queued, ram)]
        plan = one_stop_plan(*([(self._bytes_below(lvl, e), e.last_used) for e in group] for group in first),
                             budget=lvl.budget_bytes, free=self.io.free_bytes(lvl.folder),
                             when_full=self.cascade.when_full)
        if plan is None:
            return None
        kept = {first[0][i].key for i in plan[0]}
        return {e.key for e in queued if e.key not in kept and e.n_bytes <= lvl.budget_bytes}

    def _queue_plan(self, keys: list[str]) -> dict:
        """stop_writes.unkept_at_stop for the queued `keys`, in queue order: {} where the writes' own rules decide (no
        disk level, a level failing to write or remove, a hit held for a restore, or an earlier stop's plan still
        under way: its held histories are the queue's too)."""
        disk = [lvl for lvl in self.cascade.levels if isinstance(lvl, DiskLevel)]
        with self._lock:
            if (not disk or self.cascade.held or self._stop is not None
                    or any(lvl.name in self.cascade._failing or lvl.removes_failing_since is not None for lvl in disk)):
                return {}
            entries = [self._pending[k] for k in keys if k in self._pending]
            if len(entries) != len(keys):
                return {}
        sizes = [e.n_bytes for e in entries]
        # a shorter copy of a conversation still queued (the writer behind) leaves as its longer one is written
        replaced_by = [next((j for j in range(i + 1, len(entries)) if replaces(entries[j].tokens, e)), None)
                       for i, e in enumerate(entries)]
        free = [self.io.free_bytes(lvl.folder) for lvl in disk]
        return unkept_at_stop(sizes, [lvl.budget_bytes for lvl in disk], free,
                              when_full=self.cascade.when_full, replaced_by=replaced_by,
                              names=[f"conversation {k}" for k in keys],
                              counted=[self._bytes_below(disk[-1], e) for e in entries])

    def stop_would_keep(self, live: list[tuple[int, float | None]]) -> int:
        """How many histories a clean stop now would keep (the monitor feed's `stop.conversations`): `live`, the
        contexts' histories it would park, each (token count, seconds since its last use: slots.idle_s), RAM's and
        the spill writer's queue, less those its plan leaves out: where RAM's go to one disk level, one plan over all
        of them (stop_writes.one_stop_plan, the most recently used first: a context's history is weighed alike
        whether its park goes to RAM or, past RAM's budget, to the queue), RAM's and the queue's shorter copies
        kept only beside it (`_copies_beside`). Where no plan applies (a warm and a cold level, no RAM level), all
        of them: the most it writes."""
        with self._lock:
            lvl = self._hand_down_level()
            if lvl is None:
                return len(live) + self.unwritten()
            entries = {**self._pending, **self.ram.entries}
            later = superseded_keys([e for e in entries.values() if e.kind == "conversation"])
            first = [e for k, e in entries.items() if k not in later]
            per_token = self.engine.bytes_per_token   # the level counts their sidecars too (_bytes_below)
            now = self.clock()   # a context's last use as its park would keep it (parking.park: now - idle_s)
            candidates = [*((lvl.bytes_at_most(LIVE_KEY, "conversation", n, n * per_token, LIVE_META),
                             used_at(now, idle)) for n, idle in live),
                          *((self._bytes_below(lvl, e), e.last_used) for e in first)]
            plan = one_stop_plan(candidates, [], budget=lvl.budget_bytes, free=self.io.free_bytes(lvl.folder),
                                 when_full=self.cascade.when_full)
            picks = range(len(candidates)) if plan is None else plan[0]
            kept = [first[i - len(live)].key for i in picks if i >= len(live)]
            _, copies = self._copies_beside(lvl, kept, later, sum(candidates[i][0] for i in picks), entries)
        return len(picks) + len(copies)

    def close(self, persist: bool = True, progress: Callable[[int, int, int, int], None] | None = None,
              waiting: Callable[[SaveUnderWay, float], None] | None = None, stall_s: float | None = None) -> None:
        """Wait for a session save under way; drain the spill writer; with `persist`, hand RAM entries to the first
        disk level, calling `progress(entries done, entries, bytes done, bytes)` before the first, after each and as
        each write of one is made (the spill writer's queue first, its sizes -1) (the app waits for a stop while
        these come: a big model's histories take minutes to write, one alone longer than the app waits for a silent
        stop). While a save is waited for, `waiting(save, seconds waited)` is called as more of it is written; one that
        has written nothing for `stall_s` (default SAVE_STALL_S) is given up, with a warning naming it."""
        stall_s = SAVE_STALL_S if stall_s is None else stall_s
        if not isinstance(stall_s, (int, float)) or not math.isfinite(stall_s) or stall_s <= 0:
            raise ValueError(f"stall_s must be a number of seconds > 0, got {stall_s!r}")
        if self._closed:
            return
        self._closed = True
        self._wait_for_save(waiting, stall_s)
        with self._lock:
            told = self._told   # a stop's (stop_writes), counting from its queue's start
        if progress is None:
            told = None
            self._spill.unmark()
        elif told is None:
            told = CloseProgress(progress)
        else:
            told.progress = progress
        if told is not None:
            self.io.on_write = told.wrote    # a line while one big history is written, not only between them
        try:
            self._close(persist, told)
        finally:
            self.io.on_write = None
            release_all(self._folder_clocks)   # its files' seals may be taken over now (steady_clock.may_adopt)
            self.closed = True

    def _wait_for_save(self, waiting: Callable[[SaveUnderWay, float], None] | None, stall_s: float) -> None:
        """Until no session save is being written. One holds `session_writes` while it writes (on the worker thread:
        a stop that gave that call up as stuck comes here while it still writes, gigabytes on a slow disk); this wait
        said nothing, and the app ends a stop quiet for 15 s. `waiting` is told each time more of the save is
        written (a write that hangs tells nothing: the app's sign to end the server). A save that has written
        nothing for `stall_s` is given up: marked abandoned (it writes nothing more if its write ever returns; its
        temporary file is never an entry and is removed at the next start), warned of, and the close goes on
        (a bare `strata serve` waited for it for ever)."""
        began, told_at = time.monotonic(), -1
        while not self.session_writes.acquire(timeout=SAVE_WAIT_POLL_S):
            save = self.saving
            if save is None:    # between the lock and the save's start, or its end
                continue
            if waiting is not None and save.written != told_at:
                told_at = save.written
                waiting(save, time.monotonic() - began)
            stalled = time.monotonic() - save.moved_at
            if stalled >= stall_s:
                save.abandoned = True
                log.warning("stopping: the save of session %r has written nothing for %.0f s (%s); given up: session "
                            "%r is not saved (a save of it made before is kept whole; the part written is never "
                            "read and is removed at the next start)", save.name, stalled, _how_far(save), save.name)
                return
        self.session_writes.release()

    def _close(self, persist: bool, told: CloseProgress | None) -> None:
        with self._lock:
            self._told = told
        if told is None:
            self.flush()
        else:   # the queue's sizes are not known: counted in entries
            self._spill.flush(told.queued, written=told.queue_written)
        with self._lock:   # a plan whose queue never reached its end (its writer stopped): its held ones written
            stop, self._stop = self._stop, None
        if stop is not None:
            self._write_held(stop.held, "the stop's queue ended before the writes they were left for")
        with self._lock:   # the queue's left to the hand-down join RAM's (RAM's would be lost too without persist)
            joining = [e for k in sorted(self._for_hand_down) if (e := self._pending.pop(k, None)) is not None]
            self._for_hand_down = set()
            if persist and self.ram is not None:
                for e in joining:
                    self.ram.add(e)
        if told is not None:
            told.handing_down()
        self._spill.stop()
        if persist and self.ram is not None and self.first_disk is not None:
            with self._lock:
                self.cascade.stopping = True
                now = self.cascade.next_seal(self.clock())   # after the spill writer's: these came later
                lost, why = 0, ""
                # by last use: the contexts' histories were parked just now, however long ago they were used
                keys = self._by_last_use(self.ram.entries)
                later = self._superseded_in_ram()   # written only where the longer copy is not
                keys = [k for k in keys if k not in later] + [k for k in keys if k in later]
                # each sealed after the one before (oldest first), whatever order they are written in: all sealed at
                # one `now`, a disk budget's first-in-first-out fell back on the keys and let the newest histories go
                seals = {k: now + i * SHUTDOWN_SEAL_STEP_S for i, k in enumerate(keys)}
                sizes = {k: self.ram.entries[k].n_bytes for k in keys}
                first = [k for k in keys if k not in later]
                left = self._left_at_hand_down(first, later)
                if left:
                    keys = [k for k in keys if k not in left]
                    later = later - left
                    first = [k for k in first if k not in left]
                below = self.cascade.levels[1] if len(self.cascade.levels) > 1 else None
                if isinstance(below, DiskLevel) and self._fit_below_ram(
                        sum(self._bytes_below(below, self.ram.entries[k]) for k in first)):
                    # the newest first: which stay cannot depend on the order then, and a stop cut short (a closed
                    # console window's 5 s, the app's silence rule, a kill) has kept the conversations under way
                    keys = first[::-1] + [k for k in keys if k in later]
                # counted: what is written and still to be; a copy kept instead of its longer one joins, a
                # history lost leaves (the last line's N is what the next start finds)
                n = len(keys) - len(later)
                n_done, bytes_done, n_bytes = 0, 0, sum(sizes[k] for k in keys if k not in later)
                written: list[str] = []
                joins = set(later)   # written only where what they stood back for was not: N grows by each
                todo, i = list(keys), 0
                while i < len(todo) or (lost and left):
                    if i == len(todo):   # all tried and a pick not written: its room is free for those held back
                        after_all = self._written_after_all(left, written)
                        if not after_all:
                            break
                        todo, joins, left = todo + after_all, joins | set(after_all), left - set(after_all)
                    key, i = todo[i], i + 1
                    if key not in self.ram.entries:  # superseded by a longer history written before it
                        continue
                    if key in joins:                 # that longer history was not written: this copy is kept
                        n, n_bytes = n + 1, n_bytes + sizes[key]
                    if told is not None:
                        told.entry(n_done, n, bytes_done, n_bytes, sizes[key])
                    why_lost = self._hand_down(key, seals[key])
                    if why_lost is None:
                        written.append(key)
                        n_done, bytes_done = n_done + 1, bytes_done + sizes[key]
                        if told is not None:
                            told.handed_down(key)
                    else:
                        lost, why = lost + 1, why_lost
                        n, n_bytes = n - 1, n_bytes - sizes[key]
                if left:
                    self._let_go_left(left, len(written) + sum(k in self.cascade.levels[1].entries
                                                               for k in self._stop_queue))
                # a disk budget made room for newer ones (the lines count them: CloseProgress.left)
                let_go = [k for k in written if not self._on_disk(k)]
                if let_go:
                    log.info("stopping: %d of the %d conversations written made room for newer ones within the disk "
                             "levels' budgets (the oldest; --conversation-cache-cold-mib sets the last one's)",
                             len(let_go), len(written))
                if told is not None and keys:
                    told.entry(n_done, n, bytes_done, n_bytes, refused=lost)
                if lost:
                    log.warning("stopping: %d conversation histories could not be written to disk (last: %s); "
                                "they are lost (check the free space, budget and write permission there)", lost, why)
        if self.stop_unwritten:
            log.info("stopping: %d conversation%s (%.1f MiB) not written: the disk levels' budgets would have let "
                     "them go within this stop for the ones written after them (each named above)",
                     self.stop_unwritten, "" if self.stop_unwritten == 1 else "s", self.stop_unwritten_bytes / MIB)
        with self._lock:
            for lvl in self.cascade.levels:
                n = lvl.forget_vanished() if isinstance(lvl, DiskLevel) else 0
                if n:
                    log.info("stopping: %d %s-level entries in %s were removed while the server ran (by hand, or by "
                             "another server on that folder); not counted as kept", n, lvl.name, lvl.folder)

    def _hand_down_level(self) -> DiskLevel | None:
        """The one disk level RAM's histories go to at a stop, where the stop can plan what it keeps
        (stop_writes.hand_down_picks): RAM on, that level alone below it, writing and removing (caller locks). With a
        warm and a cold level the cascade's hand-downs decide (not planned)."""
        levels = self.cascade.levels
        if self.ram is None or len(levels) != 2 or not isinstance(levels[1], DiskLevel):
            return None
        lvl = levels[1]
        if lvl.name in self.cascade._failing or lvl.removes_failing_since is not None or self.cascade.held:
            return None
        return lvl

    def _left_at_hand_down(self, first: list[str], later: set[str]) -> set[str]:
        """RAM's histories a stop does not hand down (caller locks): the level below would let them go within the
        stop for newer ones (stop_writes.hand_down_picks, the most recently used first; `first` oldest first, then the shorter
        copies in `later`, only where no picked history supersedes them). Held back, not yet let go: where a pick
        is not written after all, they may fit in its room (`_written_after_all`)."""
        lvl = self._hand_down_level()
        if lvl is None:
            return set()
        ordered, taken = first[::-1], self._queue_taken(lvl)
        picks = self._hand_down_picks(lvl, ordered, taken)
        if picks is None:
            return set()
        kept = [ordered[i] for i in picks]
        rest, copies = self._copies_beside(lvl, kept, later, taken + sum(self._bytes_below(lvl, self.ram.entries[k])
                                                                         for k in kept), self.ram.entries)
        kept += copies
        # one larger than the whole budget is tried as before: refused, it evicts nothing, and is said as lost
        return {k for k in [*first, *rest] if k not in kept and self.ram.entries[k].n_bytes <= lvl.budget_bytes}

    def _written_after_all(self, left: set[str], written: list[str]) -> list[str]:
        """Those of the held back `left` the level below keeps beside the histories the stop `written` there, the
        most recently used first (caller locks): a pick that was not written (a folder standing at its name, a failed write)
        left its room to them, and letting them go all the same lost them for nothing."""
        lvl = self.cascade.levels[1]
        order = self._by_last_use(left, newest_first=True)
        taken = self._queue_taken(lvl) + sum(e.n_bytes for k in written if (e := lvl.entries.get(k)) is not None)
        picks = self._hand_down_picks(lvl, order, taken) if isinstance(lvl, DiskLevel) else None
        return order if picks is None else [order[i] for i in picks]

    def _let_go_left(self, left: set[str], n_kept: int) -> None:
        """The held back histories that stay unwritten (caller locks): each said and counted as the queue's left
        out are, its RAM copy freed."""
        lvl = self.cascade.levels[1]
        for k in self._by_last_use(left):
            self._let_go(self.ram.entries[k], f"its budget of {lvl.budget_bytes / MIB:.1f} MiB keeps the {n_kept} "
                         f"histor{'y' if n_kept == 1 else 'ies'} the stop writes there (picked by last use, the most "
                         f"recent first), and "
                         f"this one beside them would push one of them out")
            self.ram.forget(k)

    def _copies_beside(self, lvl: DiskLevel, kept: list[str], later, taken: int,
                       entries: dict[str, RamEntry]) -> tuple[list[str], list[str]]:
        """The shorter copies `later` beside the histories `kept` (`taken` bytes of `lvl`) at a stop, each of
        `entries` (RAM's, and the feed's outlook the queue's too) (caller locks): those no kept history supersedes
        (the newest first: a kept one's write discards the others), and those of them `lvl` keeps too
        (hand_down_picks; all where it cannot tell)."""
        e = entries
        gone = superseded_keys([e[k] for k in later], by=[e[k] for k in kept])
        rest = [k for k in self._by_last_use(later, newest_first=True, entries=e) if k not in gone]
        more = self._hand_down_picks(lvl, rest, taken, entries=e)
        return rest, rest if more is None else [rest[i] for i in more]

    def _by_last_use(self, keys: Collection[str], newest_first: bool = False,
                     entries: dict[str, RamEntry] | None = None) -> list[str]:
        """RAM's `keys` (or `entries`') by their histories' last use (RamEntry.last_used), the least recent first or
        `newest_first`, ties by key (caller locks): the one order a stop seals, picks, writes after all and lets go by."""
        e, sign = self.ram.entries if entries is None else entries, -1 if newest_first else 1
        return sorted(keys, key=lambda k: (sign * e[k].last_used, k))

    def _queue_taken(self, lvl: DiskLevel) -> int:
        """The bytes `lvl` holds of the histories the stop's queue wrote there (caller locks): RAM's hand-down is
        planned beside them (stop_writes.one_stop_plan), not as if the level were empty (its writes evicted them)."""
        return sum(e.n_bytes for k in self._stop_queue if (e := lvl.entries.get(k)) is not None)

    def _hand_down_picks(self, lvl: DiskLevel, keys: list[str], taken: int = 0,
                         entries: dict[str, RamEntry] | None = None) -> list[int] | None:
        """stop_writes.hand_down_picks for RAM's `keys` (or `entries`') into `lvl` by their last uses, beside `taken`
        bytes picked already (the queue's the stop wrote there among them); indexes of `keys`."""
        e = self.ram.entries if entries is None else entries
        return hand_down_picks([self._bytes_below(lvl, e[k]) for k in keys], used=[e[k].last_used for k in keys],
                               budget=lvl.budget_bytes,
                               free=self.io.free_bytes(lvl.folder), when_full=self.cascade.when_full, taken=taken)

    @staticmethod
    def _bytes_below(lvl: DiskLevel, entry) -> int:
        """What `lvl` counts for RAM's `entry` once written there (its image and sidecar, at most)."""
        return lvl.bytes_at_most(entry.key, entry.kind, entry.n_tokens, entry.n_bytes, entry.meta)

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

    def _on_disk(self, key: str) -> bool:
        return any(key in lvl.entries for lvl in self.cascade.levels if isinstance(lvl, DiskLevel))

    def _hand_down(self, key: str, now: float) -> str | None:
        """RAM entry `key` to the next level at a stop, else to the first disk level that takes it (caller locks);
        None once written, else why every level refused it."""
        ok, _ = self.cascade.degrade(0, key, now, cause="shutdown")
        if ok:
            return None
        entry = self.ram.entries[key]  # the next level refused it: a later disk level may take it
        written, lvl, refused, _, _ = self._write_down(entry, self.first_disk)
        if written is None:
            return "; ".join(refused)
        lvl.add(written)
        self.ram.forget(key)
        self._supersede(entry.tokens, key)
        return None

    # -- visible --------------------------------------------------------------------------------

    def describe(self, kept: bool = False) -> str:
        """The INFO-line fragment: park target, every level's folder, budget and state, the prefix stores
        (`kept`: the disk levels and prefix stores only, what the next start finds)."""
        return report.describe(self, kept)

    def snapshot_for_monitor(self) -> dict:
        """The monitor feed's `cache` object (docs/internals.md, "Monitor feed")."""
        return report.snapshot_for_monitor(self)

    def metrics_text(self) -> str:
        """Prometheus text lines for /metrics."""
        return report.metrics_text(self)


def _unsaid(*_: int) -> None:
    """A stop's lines before its close: nothing is said until the close gives them a progress to tell."""


def _how_far(save: SaveUnderWay) -> str:
    mib = 1 << 20
    return f"{min(save.written, save.n_bytes) / mib:.1f} of {save.n_bytes / mib:.1f} MiB written"


def _date(t: float) -> str:
    """A seal as a date; as seconds where the platform has no date for it (Windows stops at the year 3000)."""
    try:
        return time.strftime("%Y-%m-%d", time.gmtime(t))
    except (OverflowError, OSError, ValueError):
        return f"{t:.0f} s after 1970"
