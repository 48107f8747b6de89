"""The conversation cache's rules (seed 002), as pure functions over plain data.

What this is: admission of a capture (RAM, disk or discard under two RAM floors), the one placement
function for every disk read and save, the demotion plan of a level (degrade oldest first, only the
last level deletes), the start-up resolution of `park=auto`, and lookup ranking. What this is not:
mechanism. No I/O, no clock (`now` is passed in), no logging, no engine import; every function
returns a frozen decision with a `reason`.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

# Where a capture goes, and which RAM floor let it through.
RAM, DISK, DISCARD = "ram", "disk", "discard"
FLOOR_PARKING, FLOOR_TRANSIENT, FLOOR_NONE = "parking", "transient", "none"

# Every disk read and save goes through `place_disk_io` with one of these sources.
DISK_IO_SOURCES = ("park", "disk_hit", "segment_hit", "system_prompt_hit", "session_restore", "session_save")

# Lookup ties go to the fastest level: lower rank wins.
LEVEL_SPEED_RANK = {"slot": 0, "ram": 1, "warm": 2, "cold": 3, "segment": 4, "system_prompt": 5}


@dataclass(frozen=True)
class Admission:
    destination: str  # RAM | DISK | DISCARD
    floor: str  # FLOOR_PARKING | FLOOR_TRANSIENT | FLOOR_NONE
    need_mib: float  # snapshot + the floor that admitted it (or the smallest that was asked)
    reason: str


def _check_mib(**values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")


def decide_admission(available_mib: float, snapshot_mib: float, min_free_mib: float,
                     park_min_free_mib: float, target: str, *, ram_on: bool = True,
                     disk_on: bool = True) -> Admission:
    """Where a capture goes (seed 002, "the transistor").

    A capture that stays in RAM needs `available >= snapshot + min_free` (the parking floor); a
    disk-bound capture needs only `available >= snapshot + park_min_free` (the transient floor).
    When the parking floor refuses, the capture spills to disk under the transient floor; only when
    neither holds is it discarded. `target` is the resolved park target, `ram` or `disk`; `disk`
    without a disk level parks in RAM (seed: "stays in RAM with a warning").
    """
    _check_mib(available_mib=available_mib, snapshot_mib=snapshot_mib, min_free_mib=min_free_mib,
               park_min_free_mib=park_min_free_mib)
    if target not in (RAM, DISK):
        raise ValueError(f"target must be 'ram' or 'disk' (resolve 'auto' first), got {target!r}")
    need_big = snapshot_mib + min_free_mib
    need_small = snapshot_mib + park_min_free_mib
    big_holds = available_mib >= need_big
    small_holds = available_mib >= need_small
    if target == DISK and not disk_on:
        target = RAM
        note = "park=disk without a disk level: parking in RAM; "
    else:
        note = ""
    if target == RAM and ram_on and big_holds:
        return Admission(RAM, FLOOR_PARKING, need_big,
                         f"{note}available {available_mib:.0f} MiB >= {need_big:.0f} (snapshot + parking floor)")
    if disk_on and small_holds:
        floor = FLOOR_PARKING if big_holds else FLOOR_TRANSIENT
        why = "park target disk" if target == DISK else (
            "RAM level off" if not ram_on else
            f"parking floor refused ({available_mib:.0f} < {need_big:.0f} MiB)")
        return Admission(DISK, floor, need_small if floor == FLOOR_TRANSIENT else need_big,
                         f"{note}{why}; spill to disk under the {floor} floor "
                         f"(need {snapshot_mib:.0f} plus {park_min_free_mib if floor == FLOOR_TRANSIENT else min_free_mib:.0f} MiB)")
    if not disk_on:
        why = "no disk level and " + ("RAM level off" if not ram_on else
                                      f"available {available_mib:.0f} < {need_big:.0f} MiB")
    else:
        why = f"available {available_mib:.0f} < {need_small:.0f} MiB (snapshot + transient floor)"
    return Admission(DISCARD, FLOOR_NONE, need_small if disk_on else need_big, f"{note}discard: {why}")


def place_disk_io(available_mib: float, image_mib: float, min_free_mib: float, park_min_free_mib: float,
                  source: str) -> Admission:
    """The one placement function for every disk read and save (a disk hit, a segment hit, a
    system-prompt hit, a streamed session restore, an API session save).

    It is the park rule with the destination fixed to disk: admitted under the parking floor when
    it holds, else under the transient floor, refused (DISCARD) only when neither holds. A copy
    already on disk is never ignored for RAM it would not keep.
    """
    if source not in DISK_IO_SOURCES:
        raise ValueError(f"source must be one of {', '.join(DISK_IO_SOURCES)}, got {source!r}")
    adm = decide_admission(available_mib, image_mib, min_free_mib, park_min_free_mib, DISK)
    if adm.destination == DISK:
        return Admission(DISK, adm.floor, adm.need_mib, f"{source} admitted under the {adm.floor} floor "
                         f"(need {image_mib:.0f} plus {min_free_mib if adm.floor == FLOOR_PARKING else park_min_free_mib:.0f} MiB, "
                         f"available {available_mib:.0f})")
    return Admission(DISCARD, FLOOR_NONE, adm.need_mib, f"{source} refused: {adm.reason}")


@dataclass(frozen=True)
class AutoTarget:
    target: str  # RAM | DISK
    reason: str


def resolve_auto_target(free_mib: float, snapshot_mib: float, n_slots: int, floor_mib: float,
                        *, disk_on: bool = True) -> AutoTarget:
    """`park=auto`, decided once at start-up: disk when free RAM cannot hold one snapshot per cache
    slot beside the parking floor, RAM otherwise (and RAM when there is no disk level)."""
    _check_mib(free_mib=free_mib, snapshot_mib=snapshot_mib, floor_mib=floor_mib)
    if n_slots < 0:
        raise ValueError(f"n_slots must be >= 0, got {n_slots!r}")
    need = max(1, n_slots) * snapshot_mib + floor_mib
    if not disk_on:
        return AutoTarget(RAM, "park target auto -> ram (no disk level)")
    if free_mib < need:
        return AutoTarget(DISK, f"park target auto -> disk (free {free_mib:.0f} MiB < {max(1, n_slots)} x "
                                f"{snapshot_mib:.0f} + {floor_mib:.0f})")
    return AutoTarget(RAM, f"park target auto -> ram (free {free_mib:.0f} MiB >= {need:.0f})")


# -- demotion ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LevelEntry:
    key: str
    n_bytes: int
    sealed_at: float  # when it entered this level (re-sealed on every degradation)


@dataclass(frozen=True)
class Demotion:
    key: str
    action: str  # "degrade" (to the next level) | "delete" (the last level only) | "after_hold" (see below)
    cause: str  # "age" | "budget"
    reason: str


def plan_demotions(entries: Sequence[LevelEntry], budget_bytes: int, max_age_s: float, now: float,
                   *, is_last: bool, incoming_bytes: int = 0, held: AbstractSet[str] = frozenset(),
                   stuck: AbstractSet[str] = frozenset()) -> list[Demotion]:
    """Which entries leave a level, in order: first every entry past the age limit, oldest first;
    then the oldest remaining ones until `used + incoming <= budget`. A level with a next level
    degrades; only the last level deletes. Ties in age break on the key, so the order is exact.
    `held` entries (a lookup's hit that a restore is about to read) leave last: never for their age, and for
    the budget only once every other entry has left and it is still short. The last level then does not delete
    one: "after_hold", it leaves as its hold ends, the level over its budget by it meanwhile (a restore's read, a
    fraction of a second). Refusing the newcomer would discard a history; deleting the hit (as before) made its
    restore find `entry gone since lookup` and the request read its whole prompt again.
    `stuck` entries of a level with a next one cannot move there (a folder stands where a file of theirs would go:
    that one conversation's writes fail there, no other's): never planned, the others leave around them. Planned
    as before, the plan stopped at them and the level took nothing new while the folder stood there.
    """
    if budget_bytes < 0 or max_age_s < 0 or incoming_bytes < 0:
        raise ValueError(f"budget_bytes, max_age_s, incoming_bytes must be >= 0, got "
                         f"{budget_bytes!r}, {max_age_s!r}, {incoming_bytes!r}")
    action = "delete" if is_last else "degrade"
    ordered = sorted(entries, key=lambda e: (e.sealed_at, e.key))
    movable = ordered if is_last or not stuck else [e for e in ordered if e.key not in stuck]
    plan: list[Demotion] = []
    leaving: set[str] = set()
    if max_age_s > 0:
        for e in movable:
            if e.key in held:
                continue
            age = now - e.sealed_at
            if age > max_age_s:
                plan.append(Demotion(e.key, action, "age", f"age {age:.0f} s > limit {max_age_s:.0f} s"))
                leaving.add(e.key)
    used = sum(e.n_bytes for e in ordered if e.key not in leaving)
    for e in [*(e for e in movable if e.key not in held), *(e for e in movable if e.key in held)]:
        if used + incoming_bytes <= budget_bytes:
            break
        if e.key in leaving:
            continue
        plan.append(Demotion(e.key, "after_hold" if is_last and e.key in held else action, "budget",
                             f"level holds {used} + {incoming_bytes} incoming > budget {budget_bytes} bytes"))
        leaving.add(e.key)
        used -= e.n_bytes
    return plan


# -- a memory limit ------------------------------------------------------------------------------


def memory_limit_advice(limit_mib: float | None, available_mib: float, min_free_mib: float,
                        park_min_free_mib: float, *, ram_on: bool, disk_on: bool) -> str | None:
    """What a cgroup memory limit leaves the floors at start-up (pure): None when the floors can hold (or there
    is no limit: the machine's own RAM is then the user's to judge), else what follows and the flag to lower."""
    if limit_mib is None or not (ram_on or disk_on):
        return None
    # the available figure is the lesser of the host's and the limit's room: "under", not "the limit leaves"
    left = f"under the memory limit of {limit_mib:.0f} MiB, {available_mib:.0f} MiB are available"
    if available_mib < 1:
        return (f"{left}: every history will be discarded, none parked; raise the limit, or give the model less "
                f"(--ctx, --batch)")
    if available_mib < park_min_free_mib:
        return (f"{left}, less than the transient floor ({park_min_free_mib:.0f} MiB): every history will be "
                f"discarded, none parked; lower --conversation-cache-park-min-free-mib (and "
                f"--conversation-cache-min-free-mib) below {available_mib:.0f}, or raise the limit")
    if ram_on and available_mib < min_free_mib:
        where = "go to disk" if disk_on else "are discarded"
        return (f"{left}, less than the parking floor ({min_free_mib:.0f} MiB): histories {where}, none stays "
                f"in RAM; lower --conversation-cache-min-free-mib below {available_mib:.0f} to keep some in RAM, or "
                f"raise the limit")
    return None


# -- a full volume ------------------------------------------------------------------------------

# Room kept free beside an incoming image on its volume: its sidecar and the file system's own blocks.
VOLUME_SLACK_BYTES = 128 << 10


def volume_budget(used_bytes: int, free_bytes: int | None, incoming_bytes: int,
                  slack_bytes: int = VOLUME_SLACK_BYTES) -> int | None:
    """The budget a disk level's volume holds it to for `incoming_bytes` more: None when the volume's free
    space takes them (or is not known: the level's own budget applies), else its files plus that free space
    less the slack, so its oldest entries make room as a reached budget would have them do."""
    if used_bytes < 0 or incoming_bytes < 0 or slack_bytes < 0 or (free_bytes is not None and free_bytes < 0):
        raise ValueError(f"bytes must be >= 0, got used {used_bytes!r}, free {free_bytes!r}, "
                         f"incoming {incoming_bytes!r}, slack {slack_bytes!r}")
    if free_bytes is None or free_bytes >= incoming_bytes + slack_bytes:
        return None
    return max(0, used_bytes + free_bytes - slack_bytes)


# -- lookup ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    level: str  # a key of LEVEL_SPEED_RANK
    key: str
    n_tokens: int  # usable prefix of the prompt this entry gives


@dataclass(frozen=True)
class LookupChoice:
    candidate: Candidate | None
    reason: str


def rank_candidates(candidates: Sequence[Candidate], min_tokens: int = 1) -> LookupChoice:
    """The longest valid prefix wins; ties go to the fastest level, then the smallest key."""
    usable = [c for c in candidates if c.n_tokens >= min_tokens]
    if not usable:
        return LookupChoice(None, "no cached prefix")
    best = min(usable, key=lambda c: (-c.n_tokens, LEVEL_SPEED_RANK[c.level], c.key))
    return LookupChoice(best, f"{best.level} gives {best.n_tokens} tokens (longest of {len(usable)})")
