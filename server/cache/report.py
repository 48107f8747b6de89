"""What the conversation cache shows: the INFO-line fragment, the monitor feed's `cache` object and
the /metrics lines. Reads counters from a ConversationCache; changes nothing. Runs on the event loop
without the cache lock while the engine thread and the spill writer change the cache: it iterates
copies (list(...), made in one step under the GIL), never a live dict or deque.
"""

from __future__ import annotations

import os

from .disk import DiskLevel
from .memory import MIB

# the state said of a disk level whose folder this process cannot write (a read-only mount, its permissions): its
# entries are read, nothing new is kept there. The level itself stays "on" (its entries restore); the INFO line, the
# stop's line and the monitor said "on" too, and only a start-up warning in the log told a user nothing would be kept
READ_ONLY = "read-only"


def entries_text(n: int) -> str:
    return "1 entry" if n == 1 else f"{n} entries"


def _level_rows(cache) -> list[dict]:
    casc = cache.cascade
    present = {lvl.name: lvl for lvl in casc.levels}
    rows = []
    for lc in cache.level_configs:
        lvl = present.get(lc.name)
        row = {"name": lc.name, "folder": lc.folder if lc.name != "ram" else "",
               "budget_mib": lc.budget_mib, "state": "off"}
        if lvl is not None:
            row.update(state=lvl.state, used_mib=round(lvl.used_bytes / MIB, 1), entries=len(lvl.entries),
                       degradations=casc.degradations[lc.name], evictions=casc.evictions[lc.name],
                       age_evictions=casc.age_evictions[lc.name])
            if isinstance(lvl, DiskLevel):
                row.update(_files_at_start(lvl))
                # looked at each time: it may change. A removed folder is not read-only: the next write makes it again
                if lvl.state == "on" and os.path.isdir(lvl.folder) and not os.access(lvl.folder, os.W_OK):
                    row["state"] = READ_ONLY
        elif lc.on:
            row["state"] = "unavailable"
        rows.append(row)
    return rows


def _files_at_start(lvl: DiskLevel) -> dict:
    """The files a disk level (or store) skipped at start-up, and of them those removed (Strata's own, damaged or
    orphaned: damaged_files.py), each by reason, as /metrics counts them."""
    return {"skipped": dict(lvl.skipped), "removed": dict(lvl.removed)}


def files_text(skipped: dict, removed: dict) -> list[str]:
    """'2 skipped', '1 removed' for the files a disk level or store skipped at start-up (none: nothing said). Of the
    skipped, those removed are said as removed only: each file once, as the monitor counts them."""
    n_removed = sum(removed.values())
    n_kept = sum(skipped.values()) - n_removed
    return [f"{n} {what}" for n, what in ((n_kept, "skipped"), (n_removed, "removed")) if n]


def describe(cache, kept: bool = False) -> str:
    """`kept`: only what outlives the process (the stop line): no park target, no RAM level."""
    auto = cache.config.conversation_cache_park == "auto"
    parts = [] if kept else [cache.park_target_reason if auto else f"park target {cache.park_target}"]
    limit_note = None if kept else cache.memory.limit_note()
    if limit_note:
        parts.append(limit_note)
    for row in _level_rows(cache):
        if kept and row["name"] == "ram":
            continue
        if row["state"] == "off":
            parts.append(f"{row['name']} off")
            continue
        where = f" {row['folder']}" if row["folder"] else ""
        files = files_text(row.get("skipped", {}), row.get("removed", {}))
        parts.append(f"{row['name']}{where} {row['budget_mib']} MiB {row['state']}"
                     f" ({', '.join([entries_text(row.get('entries', 0)), *files])})")
    parts.append(cache.segments.describe())
    parts.append("system-prompt cache " + cache.system_prompts.describe().split(" ", 1)[1])
    if not kept:
        parts.append(sessions_text(cache))
    return "conversation cache: " + "; ".join(parts)


def sessions_text(cache) -> str:
    """'sessions /path 3.2 of 2048 MiB (reject when full)', or '... 3.2 MiB used, no limit': the saved-sessions folder's
    use (every session file in it, as last measured) and its budget."""
    c = cache.config
    used = cache.sessions.used_bytes / MIB
    folder = cache.sessions.level.folder
    if not c.conversation_cache_sessions_mib:
        return f"sessions {folder} {used:.1f} MiB used, no limit"   # "used": the levels before it give budgets
    return (f"sessions {folder} {used:.1f} of {c.conversation_cache_sessions_mib} MiB "
            f"({c.conversation_cache_sessions_when_full} when full)")


def _sessions_folder(cache) -> dict:
    c = cache.config
    lvl = cache.sessions.level
    out = {"folder": lvl.folder, "budget_mib": c.conversation_cache_sessions_mib,
           "when_full": c.conversation_cache_sessions_when_full,
           "used_mib": round(cache.sessions.used_bytes / MIB, 1),
           "evictions": cache.sessions.evictions, "refusals": cache.sessions.refusals}
    if lvl.state == "on":   # indexed once a session call opened it: this model's saves and the files skipped
        out.update(entries=len(lvl.entries), **_files_at_start(lvl))
    return out


def snapshot_for_monitor(cache) -> dict:
    c = cache.config
    sp = cache.system_prompts.level
    out = {
        "park_target": cache.park_target,
        "parks": {k: cache.parks[k] for k in ("ram", "disk", "discard")},
        "hits": {k: cache.hits[k] for k in ("ram", "warm", "cold", "segment", "system_prompt")},
        "admission": {"available_mib": round(cache.memory.available_mib(), 1),
                      "limit_mib": _rounded(cache.memory.limit_mib()),     # a cgroup memory limit; None: none
                      "min_free_mib": c.conversation_cache_min_free_mib,
                      "park_min_free_mib": c.conversation_cache_park_min_free_mib,
                      "last": list(cache.admission_log)},
        "levels": _level_rows(cache),
        "system_prompt_cache": {"folder": sp.folder, "budget_mib": c.conversation_cache_system_prompt_mib},
        "segment_tier": {"folder": cache.segments.level.folder, "budget_mib": c.conversation_cache_segment_mib},
        "sessions_folder": _sessions_folder(cache),
    }
    for key, lvl in (("system_prompt_cache", sp), ("segment_tier", cache.segments.level)):
        if lvl.state == "on":
            out[key].update(used_mib=round(lvl.used_bytes / MIB, 1), entries=len(lvl.entries), **_files_at_start(lvl))
    return out


def _rounded(mib: float | None) -> float | None:
    return None if mib is None else round(mib, 1)


# name -> (type, help) of each strata_cache_* family: /metrics writes each with its HELP and TYPE, its
# lines as one group (the exposition format's rule; promtool and strict parsers hold a scrape to it)
CACHE_FAMILIES: dict[str, tuple[str, str]] = {
    "parks_total": ("counter", "Histories parked, by destination (ram, disk, discard)."),
    "hits_total": ("counter", "Prompts restored from the conversation cache, by level."),
    "admissions_total": ("counter", "Parks, disk reads and session saves decided against the RAM floors, by the floor "
                         "that admitted them (or none: refused) and what asked."),
    "memory_limit_bytes": ("gauge", "The cgroup memory limit admission reads its headroom under (absent without one)."),
    "level_bytes": ("gauge", "Bytes a cache level holds."),
    "level_entries": ("gauge", "Entries a cache level holds."),
    "degradations_total": ("counter", "Entries moved from a level to a later one (it was full, or past its age limit)."),
    "evictions_total": ("counter", "Entries deleted from a level to make room."),
    "age_evictions_total": ("counter", "Entries deleted from a level past its age limit."),
    "write_failures_total": ("counter", "Writes a disk level failed (an I/O error, a full disk), or skipped: a folder "
                             "stands where the conversation's file goes there."),
    "remove_failures_total": ("counter", "Files a disk level could not remove (a read-only folder)."),
    "skipped_files_total": ("counter", "Files found at start-up and left alone, by reason."),
    "removed_files_total": ("counter", "Strata's own files removed at start-up (damaged, orphaned, an older Strata's: stale), by reason."),
    "sessions_folder_bytes": ("gauge", "Bytes of the session files in the saved-sessions folder (every model's, "
                              "damaged ones too), as last measured."),
    "sessions_budget_bytes": ("gauge", "The saved-sessions folder's budget (0: no limit)."),
    "session_evictions_total": ("counter", "Saved sessions deleted to make room for a save (when-full evict)."),
    "session_refusals_total": ("counter", "Session saves refused: the saved-sessions folder's budget was full."),
    "damaged_total": ("counter", "Cache images that failed validation when restored."),
    "ladder_restores_total": ("counter", "Damaged images whose valid prefix was restored."),
    "superseded_total": ("counter", "Entries replaced by a longer history of the same conversation."),
    "spill_failures_total": ("counter", "RAM entries that could not be written to disk."),
    "restore_seconds_last": ("gauge", "Seconds the last restore from a level took."),
    "restore_seconds": ("summary", "Seconds restores from a level took."),
}


def metrics_text(cache) -> str:
    casc = cache.cascade
    samples: dict[str, list[str]] = {name: [] for name in CACHE_FAMILIES}

    def add(name: str, value: float, family: str | None = None, **labels: str) -> None:
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        samples[family or name].append(f"strata_cache_{name}{{{lab}}} {value}" if lab else f"strata_cache_{name} {value}")

    for d in ("ram", "disk", "discard"):
        add("parks_total", cache.parks[d], destination=d)
    for lvl in ("ram", "warm", "cold", "segment", "system_prompt"):
        add("hits_total", cache.hits[lvl], level=lvl)
    for (floor, source), n in sorted(cache.admissions.items()):
        add("admissions_total", n, floor=floor, source=source)
    limit_mib = cache.memory.limit_mib()
    if limit_mib is not None:
        add("memory_limit_bytes", int(limit_mib * MIB))
    stores = list(casc.levels) + [s.level for s in (cache.segments, cache.system_prompts) if s.level.state == "on"]
    for lvl in stores:
        add("level_bytes", lvl.used_bytes, level=lvl.name)
        add("level_entries", len(lvl.entries), level=lvl.name)
    for lvl in casc.levels:
        add("degradations_total", casc.degradations[lvl.name], level=lvl.name)
        add("evictions_total", casc.evictions[lvl.name], level=lvl.name)
        add("age_evictions_total", casc.age_evictions[lvl.name], level=lvl.name)
        if isinstance(lvl, DiskLevel):
            add("write_failures_total", casc.write_failures[lvl.name], level=lvl.name)
    sessions = cache.sessions.level
    opened = [sessions] if sessions.state == "on" else []   # the sessions folder, once a session call opened it
    for lvl in stores + opened:   # the segment and system-prompt stores index, skip and remove files as the levels do
        if isinstance(lvl, DiskLevel) and lvl is not sessions:
            add("remove_failures_total", lvl.remove_failures, level=lvl.name)
        for reason, n in sorted(getattr(lvl, "skipped", {}).items()):
            add("skipped_files_total", n, level=lvl.name, reason=reason)
        for reason, n in sorted(getattr(lvl, "removed", {}).items()):
            add("removed_files_total", n, level=lvl.name, reason=reason)
    add("sessions_folder_bytes", cache.sessions.used_bytes)
    add("sessions_budget_bytes", cache.config.conversation_cache_sessions_mib * MIB)
    add("session_evictions_total", cache.sessions.evictions)
    add("session_refusals_total", cache.sessions.refusals)
    add("damaged_total", cache.damaged)
    add("ladder_restores_total", cache.ladder_restores)
    add("superseded_total", cache.superseded)
    add("spill_failures_total", cache.spill_failures)
    by_level: dict[str, list[float]] = {}
    for level, seconds, _ in list(cache.restore_seconds):   # a copy: the engine thread appends meanwhile
        by_level.setdefault(level, []).append(seconds)
    for level, xs in sorted(by_level.items()):
        add("restore_seconds_last", round(xs[-1], 6), level=level)
    for level, (n, total) in sorted(cache.restore_totals.items()):
        add("restore_seconds_sum", round(total, 6), family="restore_seconds", level=level)
        add("restore_seconds_count", n, family="restore_seconds", level=level)
    lines = []
    for name, (kind, help_text) in CACHE_FAMILIES.items():
        if samples[name]:   # a family with no sample yet (no restore) is left out, as before
            lines += [f"# HELP strata_cache_{name} {help_text}", f"# TYPE strata_cache_{name} {kind}", *samples[name]]
    return "\n".join(lines) + "\n"
