"""Lookup and restore: the longest cached prefix of a prompt, put back into a context (part of
`ConversationCache`).

What this is: `lookup` (every level's entries ranked by policy.rank_candidates: longest valid prefix,
ties to the fastest level), `restore` (a RAM entry applied directly; a disk one placed by
policy.place_disk_io, validated and applied by pipeline.restore_mapped, down the restore ladder when
damaged), and the restore counters. What this is not: parking (parking.py) or the two passes over an
image (restore.py, pipeline.py). A mixin: the state it uses is made by `ConversationCache.__init__`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from . import policy
from .cascade import forget_files
from .disk import DiskEntry, DiskLevel, tokens_array
from .memory import MIB
from .pipeline import restore_mapped
from .ram import RamEntry
from .restore import Validation, apply_image

log = logging.getLogger("strata.cache")

# entries an arriving prompt is byte-aligned with (alignable_histories): the conversation's own parked history is
# the one sharing the most tokens with its next turn, or close to it (a segment of its start can share as many);
# each is walked within byte_align's bounds, so more only costs the lock's hold for their token lists
ALIGN_ENTRIES = 3


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



def common_prefix_len(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.shape[0], b.shape[0])
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


class RestoreMixin:
    def _all_stores(self) -> list:
        out = [(lvl.name, lvl.entries) for lvl in self.cascade.levels]
        out.append(("ram", self._pending))
        for s in (self.segments, self.system_prompts):
            if s.level.state == "on":
                out.append((s.name, s.level.entries))
        return out

    def lookup(self, tokens) -> CacheHit | None:
        """The longest valid prefix of `tokens` any level holds (leaving at least one token to read)."""
        with self._lock:
            return self._lookup(tokens)

    def alignable_histories(self, tokens, most: int = ALIGN_ENTRIES) -> list[list[int]]:
        """The token lists of the `most` entries sharing the most tokens with `tokens` that go on past that common
        prefix (byte_align walks them, outside the lock, beside the contexts' histories): a conversation whose
        history held the model's own split of an answer and was then parked matches its next, canonically
        tokenized turn only up to that split, however much of the conversation came after it."""
        prompt = tokens_array(tokens)
        with self._lock:
            found = []
            for _, entries in self._all_stores():
                for e in entries.values():
                    n = common_prefix_len(e.tokens, prompt)
                    if 0 < n < e.n_tokens and n < prompt.shape[0]:
                        found.append((n, e))
            found.sort(key=lambda f: -f[0])
            picked = [e.tokens for _, e in found[:most]]
        return [t.tolist() for t in picked]    # outside the lock: an entry's token array is never changed in place

    @contextlib.contextmanager
    def held_lookup(self, tokens) -> Iterator[CacheHit | None]:
        """`lookup`, its hit held (`holding`) until the block ends; found and held under one hold of the lock:
        with a lookup and a `holding` after it, the spill thread (which waits only while a hold exists) could
        evict the hit between the two, and its restore found `entry gone since lookup`."""
        with self._lock:
            hit = self._lookup(tokens)
            if hit is not None:
                self._cascade_of(hit).hold(hit.key)
        try:
            yield hit
        finally:
            if hit is not None:
                with self._lock:
                    self._cascade_of(hit).release(hit.key, self.clock())

    def _lookup(self, tokens) -> CacheHit | None:
        prompt = tokens_array(tokens)
        limit = int(prompt.shape[0]) - 1
        if limit < 1:
            return None
        cands = []
        sizes = {}
        for level_name, entries in self._all_stores():   # (the caller holds the lock)
            for e in entries.values():
                n = min(common_prefix_len(e.tokens, prompt), limit)
                if n > 0:
                    cands.append(policy.Candidate(level_name, e.key, n))
                    sizes[(level_name, e.key)] = e.n_tokens
        choice = policy.rank_candidates(cands)
        c = choice.candidate
        if c is None:
            return None
        return CacheHit(c.level, c.key, c.n_tokens, sizes[(c.level, c.key)], choice.reason)

    @contextlib.contextmanager
    def holding(self, hit: CacheHit) -> Iterator[None]:
        """Keeps `hit`'s entry from being deleted, and handed down only last, until the block ends: a request
        parks the history of its context (which can make every level hand down and the last one delete its
        oldest, the spill thread too) between its lookup and the restore of the hit. A level kept over its budget
        for it makes room as the hold ends (Cascade.release)."""
        with self._lock:
            self._cascade_of(hit).hold(hit.key)
        try:
            yield
        finally:
            with self._lock:
                self._cascade_of(hit).release(hit.key, self.clock())

    def _cascade_of(self, hit: CacheHit):
        store = {"segment": self.segments, "system_prompt": self.system_prompts}.get(hit.level)
        return store.cascade if store is not None else self.cascade

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

    def restore(self, hit: CacheHit, ctx: int, stop: Callable[[], bool] | None = None, *,
                for_save: bool = False) -> RestoreResult:
        """Restore `hit` into context `ctx`; only `hit.n_tokens` are kept. 0 tokens = read it all. `stop`: a
        disk restore ends at the next piece once it is true (the server stopping), the entry kept. `for_save`: a
        session save's read-back (no prompt to read the rest of: a damaged image's warning says so)."""
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
            return self._restore_disk(lvl, entry, ctx, limit, source, t0, stop=stop, for_save=for_save)

    def restorable_tokens(self, entry_tokens: int, wanted: int, ctx: int) -> int:
        """How many of an entry's `wanted` tokens a restore into context `ctx` puts there: all of them, or where the
        entry (of `entry_tokens`) is longer than the context, its whole snapshot chunks that fit (0: not one)."""
        return self._usable_tokens(entry_tokens, wanted, ctx)[0]

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
                      t0: float, *, discard_damaged: bool = True, stop: Callable[[], bool] | None = None,
                      placed: policy.Admission | None = None, for_save: bool = False) -> RestoreResult:
        """`placed`: the placement this restore already recorded (a retry on a newer save of the session): the newer
        image is placed again (its size may differ), recorded only where that decides otherwise."""
        c = self.config
        adm = policy.place_disk_io(self.memory.available_mib(), entry.image_bytes / MIB,
                                   c.conversation_cache_min_free_mib, c.conversation_cache_park_min_free_mib, source)
        if placed is None or (placed.destination, placed.floor) != (adm.destination, adm.floor):
            self._admit(adm, source, "restore")
        if adm.destination != policy.DISK:
            return RestoreResult(0, lvl.name, time.perf_counter() - t0, adm.floor, False, adm.reason,
                                 untouched=True)
        try:
            with lvl.mapped(entry) as view:
                n, v, why = restore_mapped(self.engine, ctx, view, entry.tokens, entry.identity.model_id,
                                           entry.image_bytes, entry.piece_bytes, entry.piece_crc32,
                                           self.image_format, limit, c.restore_ladder, stop)
        except OSError as exc:
            # removed since indexed (another server sharing the folder): a plain miss. On Windows an image whose
            # removal another program's handle left pending cannot be opened (Access is denied), not missing: its
            # sidecar, removed first, tells it was removed, not damaged
            if isinstance(exc, FileNotFoundError) or not os.path.exists(entry.sidecar_path):
                newer = _saved_again(lvl, entry)
                if newer is not None:
                    # a named session another server saved again since this one indexed it: the sidecar is that
                    # save's (forgotten as gone, its new files were deleted, the session lost on both servers)
                    log.info("conversation cache %s level: %s was saved again since indexed (another server sharing "
                             "the folder); restoring that save", lvl.name, entry.key)
                    with self._lock:
                        lvl.entries[entry.key] = newer
                    wanted = newer.n_tokens if limit >= entry.n_tokens else min(limit, newer.n_tokens)
                    return self._restore_disk(lvl, newer, ctx, wanted, source, t0, discard_damaged=discard_damaged,
                                              stop=stop, placed=adm, for_save=for_save)
                with self._lock:
                    # a sidecar that now names another image is another save's (another model's server on the
                    # folder, an older Strata's, one this one cannot read, or a save since _saved_again read it):
                    # unindexed only, its files kept (they were deleted, that save lost)
                    (self.cascade.discard(entry.key, "files gone") if lvl in self.cascade.levels
                     else forget_files(lvl, entry.key, "files gone", if_names=entry.image_path))
                return RestoreResult(0, lvl.name, time.perf_counter() - t0, adm.floor, False,
                                     f"its file {entry.image_path} was removed since start-up (another process "
                                     "sharing the folder?); unindexed", untouched=True)
            if isinstance(exc, PermissionError):
                # made unreadable since the index (chmod, another user's copy put in place): its bytes are whole,
                # so not damage; deleting it lost a history that fixing the permissions brings back. Unindexed here
                # (not tried again), its files kept; the next start skips it as `unreadable` until it can be read
                with self._lock:
                    lvl.entries.pop(entry.key, None)
                log.warning("conversation cache %s level: %s cannot be read (%s); not restored, its files left as "
                            "they are (make them readable to the user the server runs as, and restart, to use it)",
                            lvl.name, entry.image_path, exc.strerror or exc)
                return RestoreResult(0, lvl.name, time.perf_counter() - t0, adm.floor, False,
                                     f"its file {entry.image_path} cannot be read ({exc.strerror or exc}); unindexed",
                                     untouched=True)
            n, v, why = 0, Validation(0, False, f"read failed: {exc}"), f"read failed: {exc}"
        ladder = False
        if not v.complete:
            self.damaged += 1
            ladder = n > 0
            self.ladder_restores += int(ladder)
            if not ladder:
                why = f"damaged, not restored: {v.reason}"
            outcome = ""
            if discard_damaged:
                gone = (self.cascade.discard(entry.key, f"unreadable image: {v.reason}") if lvl in self.cascade.levels
                        else forget_files(lvl, entry.key, f"unreadable image: {v.reason}"))
                # files a read-only folder keeps are still never tried again (each later prompt sharing the
                # prefix re-read the whole image and counted it damaged again); the next start checks them anew
                lvl.entries.pop(entry.key, None)
                outcome = ("; the entry is deleted" if gone else
                           "; its files cannot be deleted (left on disk), the entry is not used again")
            # a named session has no prompt to read the rest of: it stays in its folder, damaged, for its user
            # nor a session save's read-back: the context keeps the prefix, the rest of the history is lost
            done = (f"its first {n} of {entry.n_tokens} tokens restored (its files stay as they are, damaged: save "
                    "the session again to replace them)" if source == "session_restore"
                    else f"its first {n} of {entry.n_tokens} tokens read back for a session save (the context keeps "
                    "them; the rest of that history is lost)" if for_save
                    else f"its first {n} tokens restored, the rest of the prompt read again")
            log.warning("conversation cache %s level: %s damaged (%s); %s%s", lvl.name, entry.image_path, v.reason,
                        done if ladder else "not restored", outcome)
        return self._finish_restore(lvl.name, n, t0, adm.floor, ladder, why)

    def _finish_restore(self, level: str, n: int, t0: float, floor: str, ladder: bool, why: str) -> RestoreResult:
        dt = time.perf_counter() - t0
        if n > 0:
            self.hits[level] += 1
            self.restore_seconds.append((level, dt, n))
            count, total = self.restore_totals.get(level, (0, 0.0))
            self.restore_totals[level] = (count + 1, total + dt)
        return RestoreResult(n, level, dt, floor, ladder, why)


def _saved_again(lvl: DiskLevel, entry: DiskEntry) -> DiskEntry | None:
    """The save whose sidecar now stands where `entry`'s did when it names another image (versioned images: a
    named session saved again by another server since this one indexed it), else None."""
    if not lvl.versioned_images:
        return None
    try:
        newer = lvl.read_sidecar(entry.key)
    except Exception:   # gone, being replaced, damaged, another model's: the files are gone as far as this one goes
        return None
    return newer if newer.image_path != entry.image_path else None
