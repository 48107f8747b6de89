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
from collections.abc import Callable
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
from .parking import ParkingMixin, StopQueue
from .ram import RamEntry, RamLevel
from .restoring import RestoreMixin, common_prefix_len
from .sessions import SaveUnderWay, SessionRemoval, SessionsMixin, SessionStore
from .spill import SpillWriter
from .steady_clock import SteadyClock, clock_id, far_ahead_limit, may_adopt
from .stop_planning import StopPlanMixin
from .system_prompt import PrefixStore

log = logging.getLogger("strata.cache")

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


class ConversationCache(ParkingMixin, RestoreMixin, SessionsMixin, StopPlanMixin):
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
        # disk levels given (folder and budget) that could not be used, by name: why (the stop's line says it)
        self.unavailable: dict[str, str] = {}
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
                    self.unavailable[lc.name] = lvl.state.removeprefix("unavailable: ")
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
        self._for_hand_down: set[str] = set()   # of those, left unwritten to join RAM's hand-down (stop_plan)
        # the queued key the spill writer has taken and is writing (past its turn's checks): a stop's plan cannot
        # hold it back, so it is written where its write goes whatever the plan says (`_plan_stop_writes`)
        self._writing: str | None = None
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
            busy = self._writing if self._writing in self._pending else None
            left = self._left_to_hand_down(keys)
            if left is not None:   # one plan with RAM's hand-down (the one disk level below RAM)
                if busy in left:
                    self._not_held(busy)
                    left.discard(busy)
                self._for_hand_down = left
        if left is not None:
            self._spill.leave_out(left)
            return
        unkept = self._queue_plan(keys)   # its free-space looks are I/O, made without the lock
        with self._lock:
            # looked at as the plan is applied: a key the writer had taken (past the hold) but not begun at the
            # first look can have begun meanwhile (left out all the same, N grew back as it was written)
            for i in [i for i in unkept if keys[i] == self._writing or keys[i] not in self._pending]:
                del unkept[i]
                self._not_held(keys[i])
            if unkept:
                self._stop = StopQueue({k: i for i, k in enumerate(keys)}, unkept)
        if unkept:
            self._spill.leave_out([keys[i] for i in unkept])

    def _not_held(self, key: str) -> None:
        """Queued `key`, whose write was under way (or done) as the stop's plan was applied, is one the plan leaves out
        or places below the first disk level (caller locks): written there all the same (hold stops no write begun), it
        is no write of the stop's: not counted as taking the levels' room (`_queue_taken`: RAM's most recently used
        would be left out for it, the least recent; the close's writes let it go, oldest first, as the plan says) nor
        left out of the lines (`SpillWriter.leave_out`: counted before that call, it stayed there, N off by one)."""
        self._stop_queue.remove(key)

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
                # (`now` itself: what the levels above the last held before, moved down to make room for them)
                seals = {k: now + (i + 1) * SHUTDOWN_SEAL_STEP_S for i, k in enumerate(keys)}
                sizes = {k: self.ram.entries[k].n_bytes for k in keys}
                first = [k for k in keys if k not in later]
                left, where = self._left_at_hand_down(first, later)
                if left:
                    keys = [k for k in keys if k not in left]
                    later = later - left
                    first = [k for k in first if k not in left]
                below = self.cascade.levels[1] if len(self.cascade.levels) > 1 else None
                rooms: dict[int, tuple[int, list[str]]] = {}   # made before a level's first write: `_rooms_for_writes`
                if where is not None:
                    # planned: none pushes out or down another, so the newest first (a stop cut short has kept the
                    # conversations under way), the top level first, even where it lets go for them what it held
                    # (older, lost at the stop's end anyway): a stop cut short keeps the newest, not those older ones
                    rooms, e = self._rooms_for_writes(where), self.ram.entries
                    keys = sorted(first, key=lambda k: (where.get(k, len(self.cascade.levels)), -e[k].last_used, k))
                    keys += [k for k in self._by_last_use(later, newest_first=True)]
                elif isinstance(below, DiskLevel) and self._fit_below_ram(
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
                barred: dict[str, set[int]] = {}   # the levels that failed a planned write (`_barred_by`)
                while i < len(todo) or (lost and left):
                    if i == len(todo):   # all tried and a pick not written: its room is free for those held back
                        after_all = self._written_after_all(left, written, barred)
                        if not after_all:
                            break
                        todo, joins, left = todo + list(after_all), joins | set(after_all), left - set(after_all)
                        where = (where or {}) | after_all
                    key, i = todo[i], i + 1
                    if key not in self.ram.entries:  # superseded by a longer history written before it
                        continue
                    if key in joins:                 # that longer history was not written: this copy is kept
                        n, n_bytes = n + 1, n_bytes + sizes[key]
                    if told is not None:
                        told.entry(n_done, n, bytes_done, n_bytes, sizes[key])
                    to = None if where is None else where.get(key)
                    if to in rooms:
                        self._make_room_for_writes(to, *rooms.pop(to), now)
                    why_lost = self._hand_down(key, seals[key], to)
                    if why_lost is None:
                        written.append(key)
                        n_done, bytes_done = n_done + 1, bytes_done + sizes[key]
                        if told is not None:
                            told.handed_down(key)
                        continue
                    n, n_bytes = n - 1, n_bytes - sizes[key]
                    if to is None:
                        lost, why = lost + 1, why_lost
                        continue
                    # a planned write failed: the plan made beside it no longer holds, so it and those not written
                    # yet are planned again beside the written ones, none at a level that failed it
                    self._barred_by(key, to, barred, why_lost)
                    ahead = todo[i:]
                    rest = {k for k in ahead if k in self.ram.entries and k not in later} | left | {key}
                    again: dict[str, int | None] = dict(self._written_after_all(rest, written, barred))
                    if key not in again and self._barred_everywhere(key, barred):
                        lost, why = lost + 1, why_lost   # every level failed it: lost, said in the WARNING
                        rest.discard(key)
                    # those every level failed too are tried as the cascade writes them (to None: lost if it fails)
                    again |= dict.fromkeys(k for k in rest if k not in again and self._barred_everywhere(k, barred))
                    for k in ahead:   # dropped from the writes: counted off now (those in joins were not counted)
                        if k in rest and k not in again and k not in joins:
                            n, n_bytes = n - 1, n_bytes - sizes[k]
                    # counted at their turn: those not counted yet (held back, joins, or the one that failed)
                    joins = (joins - rest) | {k for k in again if k in joins or k not in ahead}
                    e, last = self.ram.entries, len(self.cascade.levels)
                    todo = todo[:i] + sorted(again, key=lambda k: (again[k] or last, -e[k].last_used, k)) + [
                        k for k in ahead if k not in rest]
                    left = {k for k in rest if k not in again and self._disk_takes(e[k].n_bytes)}
                    where = where | again
                if left:
                    self._let_go_left(left, len(written) + sum(k in lvl.entries for lvl in self.cascade.levels[1:]
                                                               for k in self._stop_queue), barred.get("", set()))
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

    def _on_disk(self, key: str) -> bool:
        return any(key in lvl.entries for lvl in self.cascade.levels if isinstance(lvl, DiskLevel))

    def _hand_down(self, key: str, now: float, to: int | None = None) -> str | None:
        """RAM entry `key` to the next level at a stop, else to the first disk level that takes it (caller locks);
        or to level `to` alone, where the stop's plan places it (the close plans again if it fails: written at
        another level here, sealed as the newest, the older picks written after it there evicted it). None once
        written, else why every level (or `to`) refused it."""
        ok, why = self.cascade.degrade(0, key, now, cause="shutdown", to=to)
        if ok:
            return None
        if to is not None:
            return f"{self.cascade.levels[to].name} {self.cascade.levels[to].folder}: {why}"
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
