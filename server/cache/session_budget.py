"""The saved-sessions folder's budget: whether a save fits, and which saves make room for it.

What this is: pure policy over plain data (no files, no clock, no locks). The folder's use is every committed
session file in it (this model's saves, another model's, an older Strata's, damaged ones: the disk the budget
bounds), measured by the mechanism (session_store.folder_bytes). A named save is a user's explicit data, so by
default a save past the budget is refused and nothing is deleted; `--conversation-cache-sessions-when-full evict`
lets a save drop this model's least recently used saves (saved or restored longest ago) until it fits. Only this
model's saves can be dropped: another model's and damaged files are not this server's to delete, and when they
alone fill the budget the save is refused. What this is not: the save (sessions.py) or the measuring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WHEN_FULL = ("reject", "evict")


@dataclass(frozen=True)
class SavedSession:
    """One of this model's saves as the budget sees it: its files' bytes and when it was last saved or restored."""

    key: str
    n_bytes: int
    used_at: float


@dataclass(frozen=True)
class RoomDecision:
    fits: bool
    drop: tuple[str, ...]   # keys of the saves to delete first, least recently used first (evict only)
    after_bytes: int        # the folder's bytes once the save is in and `drop` gone (when it fits)
    reason: str


def plan_session_room(folder_bytes: int, need_bytes: int, replaced_bytes: int, budget_bytes: int, when_full: str,
                      own: Sequence[SavedSession]) -> RoomDecision:
    """Whether a save of `need_bytes` fits a folder holding `folder_bytes` under `budget_bytes` (0: no limit), the
    save it replaces (the same name's, `replaced_bytes`) counted as gone; with `when_full` "evict", the saves of
    `own` (never the replaced one) to drop first, oldest `used_at` first (ties by key)."""
    for what, value in (("folder_bytes", folder_bytes), ("need_bytes", need_bytes),
                        ("replaced_bytes", replaced_bytes), ("budget_bytes", budget_bytes)):
        if value < 0:
            raise ValueError(f"{what} must be >= 0, got {value!r}")
    if when_full not in WHEN_FULL:
        raise ValueError(f"when_full must be one of {', '.join(WHEN_FULL)}, got {when_full!r}")
    after = max(0, folder_bytes - replaced_bytes) + need_bytes
    if budget_bytes == 0:
        return RoomDecision(True, (), after, "no budget")
    if after <= budget_bytes:
        return RoomDecision(True, (), after, "fits the budget")
    if need_bytes > budget_bytes:
        return RoomDecision(False, (), after, "the save alone is larger than the whole budget")
    if when_full == "reject":
        return RoomDecision(False, (), after, "the budget is full and saves are never deleted to make room "
                                              "(when-full reject)")
    drop: list[str] = []
    for s in sorted(own, key=lambda s: (s.used_at, s.key)):
        if after <= budget_bytes:
            break
        drop.append(s.key)
        after -= s.n_bytes
    if after > budget_bytes:
        return RoomDecision(False, (), after + sum(s.n_bytes for s in own if s.key in drop),
                            "even with every other save of this model dropped it would not fit (files that are "
                            "not this model's sessions hold the rest)")
    return RoomDecision(True, tuple(drop), after, f"{len(drop)} least recently used save(s) dropped to make room")
