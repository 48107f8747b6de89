"""`ConversationCache`: the façade the scheduler calls (docs/internals.md, "Conversation cache").

What this is: the mechanism that ties the levels (RAM -> warm -> cold), the segment tier, the
system-prompt cache and named sessions to the engine: park a context before it is overwritten
(admission by policy.decide_admission), look a prompt up (longest valid prefix, ties to the fastest
level), restore a hit (placement by policy.place_disk_io, validation pass, apply pass, restore
ladder), and count everything for /metrics, the INFO line and the monitor feed. An asynchronous
spill writer writes disk-bound captures. What this is not: policy (policy.py), file formats
(disk.py) or HTTP (http.py). One lock guards the indexes; the spill writer writes files outside it.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import policy, report
from .cascade import Cascade
from .disk import PIECE_BYTES, DiskEntry, DiskLevel, Identity, conversation_key, tokens_array
from .fileio import FileIO
from .folder_checks import log_skipped_files, warn_budget_beyond_free_space
from .memory import MIB, MemoryProbe
from .options import CacheConfig
from .pipeline import restore_mapped
from .ram import RamEntry, RamLevel
from .restore import Validation, apply_image
from .segments import anchor_positions, chain_keys, plan_segment_saves, system_prompt_anchor
from .sessions import SessionStore, validate_session_name
from .spill import SpillWriter
from .system_prompt import PrefixStore

log = logging.getLogger("strata.cache")


@dataclass(frozen=True)
class CacheHit:
    level: str  # "ram" | "warm" | "cold" | "segment" | "system_prompt"
    key: str
    n_tokens: int  # usable prefix of the prompt
    entry_tokens: int
    reason: str


@dataclass(frozen=True)
class RestoreResult:
    n_tokens: int
    level: str
    seconds: float
    floor: str  # placement floor for a disk read, "" for RAM
    ladder: bool  # a damaged image restored to its longest valid prefix
    reason: str
    untouched: bool = False  # nothing was tried: the context still holds what it held (entry gone,
    #                          context too small for one chunk, disk read refused by the memory floor)


@dataclass(frozen=True)
class ParkResult:
    destination: str  # "ram" | "disk" | "discard" | "none" (empty or already cached)
    floor: str
    key: str | None
    n_tokens: int
    n_bytes: int
    reason: str


def kv_layout_of(engine) -> str:
    """The KV layout as one string for sidecars: the engine's `kv_layout()` dict when it has one."""
    if hasattr(engine, "kv_layout"):
        return json.dumps(engine.kv_layout(), sort_keys=True, separators=(",", ":"))
    return f"{engine.kv_type}/L{engine.n_layer}/Hkv{engine.n_head_kv}/B{engine.bytes_per_token}"


def _forget_case_twins(lvl: DiskLevel, name: str) -> None:
    """Unindex the sessions whose files are `name`'s under another case: on a case-insensitive file system
    (Windows, macOS) 'Agent' and 'agent' name the same files, so saving one overwrote the other's, which
    stayed listed and then restored as damaged. Its files are left to the write that replaces them."""
    path = lvl.image_path(name)
    for key in [k for k in lvl.entries if k != name and k.casefold() == name.casefold()]:
        try:
            same = os.path.samefile(lvl.image_path(key), path)
        except OSError:                  # either file missing: two files, two sessions
            same = False
        if same:
            lvl.entries.pop(key)


def _prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.shape[0], b.shape[0])
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class ConversationCache:
    def __init__(self, config: CacheConfig, engine, *, image_format=None, memory: MemoryProbe | None = None,
                 io: FileIO | None = None, clock: Callable[[], float] = time.time,
                 piece_bytes: int = PIECE_BYTES) -> None:
        self.config = config
        self.engine = engine
        self.image_format = image_format or importlib.import_module("strata.engine.snapshot")
        self.memory = memory or MemoryProbe()
        self.clock = clock
        self.io = io or FileIO()
        self.identity = Identity(str(engine.model_id), kv_layout_of(engine))
        self._lock = threading.RLock()
        self.opener = list(getattr(engine, "message_opener_ids", []) or [])
        self._check_folders()
        levels: list = []
        self.level_configs = config.levels
        for lc in self.level_configs:
            if not lc.on:
                continue
            if lc.name == "ram":
                levels.append(RamLevel(lc.budget_bytes, lc.max_age_s))
            else:
                lvl = DiskLevel(lc.name, lc.folder, lc.budget_bytes, lc.max_age_s, self.identity,
                                io=self.io, piece_bytes=piece_bytes)
                lvl.open()
                log_skipped_files(lvl)
                warn_budget_beyond_free_space(lvl)
                if lvl.state == "on":
                    levels.append(lvl)
                else:
                    log.warning("conversation cache %s level %s: %s; the level is off (nothing is kept there): "
                                "give --conversation-cache-%s-dir a folder this user can write", lc.name, lc.folder,
                                lvl.state, lc.name)
        self.cascade = Cascade(levels, config.conversation_cache_when_full, on_event=self._on_cascade_event)
        self.ram: RamLevel | None = levels[0] if levels and isinstance(levels[0], RamLevel) else None
        self.first_disk = next((i for i, lv in enumerate(levels) if isinstance(lv, DiskLevel)), None)
        self.segments = self._prefix_store("segment", config.segment_dir, config.conversation_cache_segment_mib,
                                           piece_bytes)
        self.system_prompts = self._prefix_store("system_prompt", config.system_prompt_dir,
                                                 config.conversation_cache_system_prompt_mib, piece_bytes)
        self.sessions = SessionStore(config.sessions_dir, self.identity, io=self.io, piece_bytes=piece_bytes)
        # counters (monitor feed, /metrics)
        self.parks: Counter[str] = Counter()
        self.hits: Counter[str] = Counter()
        self.admissions: Counter[tuple[str, str]] = Counter()  # (floor, source)
        self.admission_log: deque[dict] = deque(maxlen=20)
        self.damaged = 0  # entries found damaged at restore time (index-time skips are per level)
        self.ladder_restores = 0
        self.superseded = 0
        self.spill_failures = 0
        self.restore_seconds: deque[tuple[str, float, int]] = deque(maxlen=100)  # (level, s, tokens)
        self.restore_totals: dict[str, tuple[int, float]] = {}  # level -> (restores, seconds)
        self.park_target, self.park_target_reason = self._resolve_park_target()
        self._pending: dict[str, RamEntry] = {}  # captures queued for the spill writer
        self._prefix_pending: set[str] = set()    # segment / system-prompt saves queued for it
        self._spill = SpillWriter(self._spill_one)
        self._closed = False
        self._has_age_limits = any(lc.on and lc.max_age_s > 0 for lc in self.level_configs)

    # -- set-up ---------------------------------------------------------------------------------

    def _check_folders(self) -> None:
        self.config.check_folders()  # also checked when the options are read, before the server listens

    def _prefix_store(self, name: str, folder: str, mib: int, piece_bytes: int) -> PrefixStore:
        lvl = DiskLevel(name, folder, mib * MIB, 0.0, self.identity, io=self.io, piece_bytes=piece_bytes)
        if mib > 0:
            lvl.open()
            log_skipped_files(lvl)
        else:
            lvl.state = "off"
        return PrefixStore(lvl, self.config.conversation_cache_when_full)

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

    # -- admission bookkeeping ------------------------------------------------------------------

    def _admit(self, adm: policy.Admission, source: str, action: str) -> None:
        self.admissions[(adm.floor, source)] += 1
        self.admission_log.append({"time": self.clock(), "action": action, "floor": adm.floor,
                                   "source": source, "need_mib": round(adm.need_mib, 1)})
        level = logging.INFO if adm.floor != policy.FLOOR_PARKING else logging.DEBUG
        log.log(level, "cache %s %s: %s", source, action, adm.reason)

    # -- park -----------------------------------------------------------------------------------

    def park(self, ctx: int, reason: str = "") -> ParkResult:
        """Capture context `ctx`'s history before it is overwritten (RAM, disk, or counted discard)."""
        tokens = tokens_array(self.engine.context_tokens(ctx))
        n = int(tokens.shape[0])
        if n == 0:
            return ParkResult("none", policy.FLOOR_NONE, None, 0, 0, "empty context")
        key = conversation_key(self.identity, tokens)
        with self._lock:
            found = self.cascade.find(key)
            if found is not None or key in self._pending:
                where = self.cascade.levels[found[0]].name if found else "ram"
                return ParkResult("none", policy.FLOOR_NONE, key, n, 0, f"already cached in {where}")
        snapshot_mib = self.engine.context_bytes(ctx) / MIB
        available = self.memory.available_mib()
        c = self.config
        adm = policy.decide_admission(available, snapshot_mib, c.conversation_cache_min_free_mib,
                                      c.conversation_cache_park_min_free_mib, self.park_target,
                                      ram_on=self.ram is not None, disk_on=self.first_disk is not None)
        self._admit(adm, "park", adm.destination)
        now = self.clock()
        if adm.destination == policy.DISCARD:
            self.parks["discard"] += 1
            # a warning only when a level that could have kept it is on; with every level off
            # (--conversation-cache-mib 0 and no disk) each park is a discard by the user's choice
            level = logging.WARNING if (self.ram is not None or self.first_disk is not None) else logging.DEBUG
            log.log(level, "park discarded (%s); discards=%d", adm.reason, self.parks["discard"])
            self._save_prefixes(ctx, tokens, now)  # each prefix has its own placement
            return ParkResult("discard", adm.floor, key, n, 0, adm.reason)
        entry = RamEntry(key, "conversation", tokens, list(self.engine.snapshot_chunks(ctx)), now, now,
                         {"reason": reason})
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
                    self.parks["discard"] += 1
                    return ParkResult("discard", adm.floor, key, n, 0, f"RAM level refused: {room_why}")
        if destination == policy.DISK:
            with self._lock:
                self._pending[key] = entry
            self._spill.submit(key)
        self.parks[destination] += 1
        self._save_prefixes(ctx, tokens, now)
        if self._has_age_limits:
            self.enforce()
        return ParkResult(destination, adm.floor, key, n, entry.n_bytes, why)

    def _supersede(self, tokens: np.ndarray, keep: str, *, durable: bool = True) -> None:
        """Discard conversation entries whose history is a strict prefix of `tokens` (caller locks).

        `durable` = False (the newer history is in RAM only): disk entries are kept, since a crash
        before the newer one reaches disk would otherwise lose the whole history; they are discarded
        when it gets there (a spill, or a degradation out of RAM: `_on_cascade_event`)."""
        for lvl in self.cascade.levels:
            if not durable and not isinstance(lvl, RamLevel):
                continue
            for e in list(lvl.entries.values()):
                if (e.key != keep and e.kind == "conversation" and e.n_tokens < tokens.shape[0]
                        and _prefix_len(e.tokens, tokens) == e.n_tokens):
                    self.cascade.discard(e.key, "superseded", ram_only=not durable)
                    self.superseded += 1

    def _on_cascade_event(self, ev: tuple) -> None:
        """A history degraded out of RAM is on disk now: the disk prefixes it supersedes can go."""
        action, level, key = ev[0], ev[1], ev[2]
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
            with self._lock:
                room, _ = store.cascade.make_room(0, est, now)
            if not room:
                return
            try:
                e = lvl.write(key, store.name, tokens, iter(pieces), now)
            except OSError as exc:
                with self._lock:
                    self.spill_failures += 1
                log.warning("%s write failed: %s", store.name, exc)
                return
            with self._lock:
                lvl.add(e)
                store.cascade.make_room(0, 0, now)
        finally:
            with self._lock:
                self._prefix_pending.discard(key)

    # -- spill (the writer thread is spill.SpillWriter) -----------------------------------------

    def _spill_one(self, key: str) -> None:
        """Write a disk-bound capture to the first disk level that takes it (a later one when the first
        refuses: too large for its whole budget, full, an I/O error), else keep it in RAM, else discard."""
        with self._lock:
            entry = self._pending.get(key)
            if entry is None:
                return
        written, lvl, refused = self._write_down(entry, self.first_disk)
        with self._lock:
            self._pending.pop(key, None)  # the RAM copy is freed here, written or not
            if written is None:
                self.spill_failures += 1
                where = "; ".join(refused)
                if self._keep_in_ram(entry):
                    log.warning("spill of %s refused (%s); kept in RAM instead (check the free space, budget and "
                                "write permission there)", key, where)
                    return
                self.parks["discard"] += 1
                log.warning("spill of %s refused (%s); discards=%d (check the free space, budget and write "
                            "permission there)", key, where, self.parks["discard"])
                return
            if refused:
                log.info("spill of %s: %s; written to the %s level instead", key, "; ".join(refused), lvl.name)
            lvl.add(written)
            self._supersede(entry.tokens, key)
            self.cascade.make_room(self.cascade.levels.index(lvl), 0, self.clock())

    def _write_down(self, entry: RamEntry, start: int) -> tuple:
        """Write `entry` to the first disk level from index `start` on that takes it: (the written entry
        or None, that level, why each level before it refused). The caller adds it to the level."""
        refused: list[str] = []
        written = lvl = None
        for i in range(start, len(self.cascade.levels)):
            lvl = self.cascade.levels[i]
            with self._lock:
                now = self.clock()
                room, why = self.cascade.make_room(i, entry.n_bytes, now)
            if room:
                try:
                    written = lvl.write(entry.key, entry.kind, entry.tokens, iter(entry.pieces), now,
                                        created_at=entry.created_at, meta=entry.meta)
                    break
                except OSError as exc:
                    why = f"write failed: {exc}"
            refused.append(f"{lvl.name} {lvl.folder}: {why}")
        return written, lvl, refused

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

    def flush(self) -> None:
        """Wait until every queued spill is written (tests, shutdown)."""
        self._spill.flush()

    # -- lookup and restore ---------------------------------------------------------------------

    def _all_stores(self) -> list:
        out = [(lvl.name, lvl.entries) for lvl in self.cascade.levels]
        out.append(("ram", self._pending))
        for s in (self.segments, self.system_prompts):
            if s.level.state == "on":
                out.append((s.name, s.level.entries))
        return out

    def lookup(self, tokens) -> CacheHit | None:
        """The longest valid prefix of `tokens` any level holds (leaving at least one token to read)."""
        prompt = tokens_array(tokens)
        limit = int(prompt.shape[0]) - 1
        if limit < 1:
            return None
        cands = []
        sizes = {}
        with self._lock:
            for level_name, entries in self._all_stores():
                for e in entries.values():
                    n = min(_prefix_len(e.tokens, prompt), limit)
                    if n > 0:
                        cands.append(policy.Candidate(level_name, e.key, n))
                        sizes[(level_name, e.key)] = e.n_tokens
        choice = policy.rank_candidates(cands)
        c = choice.candidate
        if c is None:
            return None
        return CacheHit(c.level, c.key, c.n_tokens, sizes[(c.level, c.key)], choice.reason)

    def _locate(self, hit: CacheHit):
        """(level object, entry) for a hit, wherever the entry is now."""
        if hit.level in ("segment", "system_prompt"):
            store = self.segments if hit.level == "segment" else self.system_prompts
            e = store.level.entries.get(hit.key)
            return (store.level, e) if e is not None else (None, None)
        if hit.key in self._pending:
            return self.ram, self._pending[hit.key]
        found = self.cascade.find(hit.key)
        if found is None:
            return None, None
        return self.cascade.levels[found[0]], found[1]

    def restore(self, hit: CacheHit, ctx: int) -> RestoreResult:
        """Restore `hit` into context `ctx`; only `hit.n_tokens` are kept. 0 tokens = read it all."""
        t0 = time.perf_counter()
        with self._lock:
            lvl, entry = self._locate(hit)
            if entry is None:
                return RestoreResult(0, hit.level, 0.0, "", False, "entry gone since lookup", untouched=True)
            level_name = lvl.name if lvl is not None else "ram"
            limit, refused = self._usable_tokens(entry.n_tokens, hit.n_tokens, ctx)
            if refused:  # a plain miss: the entry is sound, this context is too small for any of it
                return RestoreResult(0, level_name, 0.0, "", False, refused, untouched=True)
            if isinstance(entry, RamEntry):
                n, why = apply_image(self.engine, ctx, entry.pieces, entry.tokens, limit)
                return self._finish_restore(level_name, n, t0, "", False, why)
            source = {"segment": "segment_hit", "system_prompt": "system_prompt_hit"}.get(level_name, "disk_hit")
            return self._restore_disk(lvl, entry, ctx, limit, source, t0)

    def _usable_tokens(self, entry_tokens: int, wanted: int, ctx: int) -> tuple[int, str]:
        """(tokens to restore, "" or why none): an entry longer than the context restores its longest
        prefix of whole snapshot chunks that fits (as the engine's restorer does); none when not even
        one chunk fits, or when the image format does not say its chunk size."""
        capacity = self.engine.context_capacity(ctx)
        if entry_tokens <= capacity:
            return wanted, ""
        chunk_tokens_for = getattr(self.image_format, "chunk_tokens_for", None)
        chunk = int(chunk_tokens_for(self.engine.bytes_per_token)) if chunk_tokens_for else 0
        fit = capacity // chunk * chunk if chunk > 0 else 0
        if fit == 0:
            return 0, (f"entry holds {entry_tokens} tokens, context {ctx} holds at most {capacity}, "
                       f"less than one snapshot chunk ({chunk or 'unknown'} tokens)")
        return min(wanted, fit), ""

    def _restore_disk(self, lvl: DiskLevel, entry: DiskEntry, ctx: int, limit: int, source: str,
                      t0: float, *, discard_damaged: bool = True) -> RestoreResult:
        c = self.config
        adm = policy.place_disk_io(self.memory.available_mib(), entry.image_bytes / MIB,
                                   c.conversation_cache_min_free_mib, c.conversation_cache_park_min_free_mib, source)
        self._admit(adm, source, "restore")
        if adm.destination != policy.DISK:
            return RestoreResult(0, lvl.name, time.perf_counter() - t0, adm.floor, False, adm.reason,
                                 untouched=True)
        try:
            with lvl.mapped(entry) as view:
                n, v, why = restore_mapped(self.engine, ctx, view, entry.tokens, entry.identity.model_id,
                                           entry.image_bytes, entry.piece_bytes, entry.piece_crc32,
                                           self.image_format, limit, c.restore_ladder)
        except FileNotFoundError:  # removed since indexed (another server sharing the folder): a plain miss
            with self._lock:
                (self.cascade.discard(entry.key, "files gone") if lvl in self.cascade.levels
                 else lvl.forget(entry.key))
            return RestoreResult(0, lvl.name, time.perf_counter() - t0, adm.floor, False,
                                 f"its file {entry.image_path} was removed since start-up (another process "
                                 "sharing the folder?); unindexed", untouched=True)
        except OSError as exc:
            n, v, why = 0, Validation(0, False, f"read failed: {exc}"), f"read failed: {exc}"
        ladder = False
        if not v.complete:
            self.damaged += 1
            ladder = n > 0
            log.warning("conversation cache %s level: %s damaged (%s); %s%s", lvl.name, entry.image_path, v.reason,
                        f"its first {n} tokens restored, the rest of the prompt read again" if ladder
                        else "not restored, the prompt read again", "; the entry is deleted" if discard_damaged else "")
            self.ladder_restores += int(ladder)
            if not ladder:
                why = f"damaged, not restored: {v.reason}"
            if discard_damaged:
                if lvl in self.cascade.levels:
                    self.cascade.discard(entry.key, f"unreadable image: {v.reason}")
                else:
                    lvl.forget(entry.key)
        return self._finish_restore(lvl.name, n, t0, adm.floor, ladder, why)

    def _finish_restore(self, level: str, n: int, t0: float, floor: str, ladder: bool, why: str) -> RestoreResult:
        dt = time.perf_counter() - t0
        if n > 0:
            self.hits[level] += 1
            self.restore_seconds.append((level, dt, n))
            count, total = self.restore_totals.get(level, (0, 0.0))
            self.restore_totals[level] = (count + 1, total + dt)
        return RestoreResult(n, level, dt, floor, ladder, why)

    # -- sessions -------------------------------------------------------------------------------

    def save_session(self, name: str, ctx: int) -> dict:
        name = validate_session_name(name)
        tokens = tokens_array(self.engine.context_tokens(ctx))
        if tokens.shape[0] == 0:
            raise ValueError(f"context {ctx} is empty: nothing to save")
        c = self.config
        adm = policy.place_disk_io(self.memory.available_mib(), self.engine.context_bytes(ctx) / MIB,
                                   c.conversation_cache_min_free_mib, c.conversation_cache_park_min_free_mib,
                                   "session_save")
        self._admit(adm, "session_save", "save")
        if adm.destination != policy.DISK:
            raise MemoryError(adm.reason)
        lvl = self.sessions.ensure_open()
        with self._lock:
            _forget_case_twins(lvl, name)
            e = lvl.write(name, "session", tokens, self.engine.snapshot_chunks(ctx), self.clock())
            lvl.add(e)
        return {"name": name, "n_tokens": e.n_tokens, "bytes": e.image_bytes, "floor": adm.floor}

    def restore_session(self, name: str, ctx: int) -> RestoreResult:
        name = validate_session_name(name)
        lvl = self.sessions.ensure_open()
        with self._lock:
            entry = lvl.entries.get(name)
            if entry is None:
                raise KeyError(f"no session named {name!r}")
            return self._restore_disk(lvl, entry, ctx, entry.n_tokens, "session_restore", time.perf_counter(),
                                      discard_damaged=False)

    def delete_session(self, name: str) -> bool:
        name = validate_session_name(name)
        lvl = self.sessions.ensure_open()
        with self._lock:
            existed = name in lvl.entries
            lvl.forget(name)
        return existed

    def list_sessions(self) -> list[dict]:
        with self._lock:
            return self.sessions.list()

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

    def close(self, persist: bool = True) -> None:
        """Drain the spill writer; with `persist`, hand RAM entries to the first disk level."""
        if self._closed:
            return
        self._closed = True
        self.flush()
        self._spill.stop()
        if persist and self.ram is not None and self.first_disk is not None:
            with self._lock:
                now = self.clock()
                lost, why = 0, ""
                for key in sorted(self.ram.entries, key=lambda k: self.ram.entries[k].sealed_at):
                    ok, _ = self.cascade.degrade(0, key, now, cause="shutdown")
                    if ok:
                        continue
                    entry = self.ram.entries[key]  # the next level refused it: a later disk level may take it
                    written, lvl, refused = self._write_down(entry, self.first_disk)
                    if written is None:
                        lost, why = lost + 1, "; ".join(refused)
                        continue
                    lvl.add(written)
                    self.ram.forget(key)
                    self._supersede(entry.tokens, key)
                if lost:
                    log.warning("stopping: %d conversation histories could not be written to disk (last: %s); "
                                "they are lost (check the free space, budget and write permission there)", lost, why)

    # -- visible --------------------------------------------------------------------------------

    def describe(self) -> str:
        """The INFO-line fragment: park target, every level's folder, budget and state, the prefix stores."""
        return report.describe(self)

    def snapshot_for_monitor(self) -> dict:
        """The monitor feed's `cache` object (docs/internals.md, "Monitor feed")."""
        return report.snapshot_for_monitor(self)

    def metrics_text(self) -> str:
        """Prometheus text lines for /metrics."""
        return report.metrics_text(self)
