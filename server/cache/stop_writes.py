"""Which of a stop's queued histories the disk levels would let go within the stop (pure).

What this is: the rule `ConversationCache.stop_writes` applies to the spill writer's queue once a clean stop has
parked its contexts' histories: a history the last disk level would take (too large for every level above it) and
then let go again, first-in-first-out, for the ones the stop writes after it there, is not written. Session 37's
soak: the first stop wrote 685 MiB, 476 of them histories cold's 320 MiB dropped within three seconds, most of its
6.52 s. The last level makes room for each arrival before writing it, oldest first, and a shorter copy leaves only
once its longer history is written; so a history that, at some arrival certain to come after it, is over the
budget with the ones after it still there and that arrival, is let go whatever else arrives (more arrivals only
push out more); everything older in that level goes before it. Played over the queue, the supersedes counted.
That is certain only once the writes it was left for have happened: `gone_for_good` says which of those left out
are, as the writes succeed; where a write fails or the queue ends first, `written_after_all` says which of the rest
the old order would still hold (those are written after all).
`hand_down_picks` is the same rule for the RAM level's histories a stop hands down to the one disk level below it:
written oldest first past that level's budget, each arrival evicted an earlier one the stop had just written (a
soak's probe: "4 of the 6 conversations written made room for newer ones", the first "keeping 6" line counting
them); now only those the budget keeps are written, the most recently used first.
`stop_plan` makes that one plan over both of a stop's writes, the queue's and RAM's (planned apart, RAM's were picked
as if the queue's written first were not there, and their writes evicted those), over every disk level below RAM,
the top one first (a warm and a cold level: the cascade's hand-downs wrote all, oldest first, and evicted some).
What this is not: the writes, the evictions (cache.py, stop_planning.py, cascade.py), or the queue's histories
whose level is not certain without RAM (one a warm level may take: its way down is the cascade's to make).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from itertools import pairwise
from typing import NamedTuple

MIB = 1 << 20


class Unkept(NamedTuple):
    """A history the last level would let go within the stop: why, and the indexes of the histories whose writes
    make it go (those after it in that level then, and the arrival it leaves for, last)."""
    why: str
    needs: tuple[int, ...]


def unkept_at_stop(sizes: Sequence[int], budgets: Sequence[int], free: Sequence[int | None], *,
                   when_full: str, replaced_by: Sequence[int | None] | None = None,
                   names: Sequence[str] | None = None, counted: Sequence[int] | None = None) -> dict[int, Unkept]:
    """The indexes of `sizes` (the queued histories' bytes, in write order) the disk levels would let go within the
    stop, each with why and the writes it leaves for (`Unkept`). `budgets`: the disk levels' budgets in cascade order, the last one last (0: no budget);
    `free`: the free bytes on each one's volume (None: not known); `replaced_by`: for each history, the index of
    the first later one that supersedes it (a longer history of its conversation: the shorter copy leaves once that
    one is written), else None; `names`: how each history is named in the whys (default: its place in the queue);
    `counted`: what the last level counts for each once written, image and sidecar (DiskLevel.bytes_at_most;
    default `sizes`): its budget is kept in those, while a level refuses a history larger than its budget by its
    image (`sizes`). Played on the images alone, a plan let one more history in than the level keeps, and its write
    was evicted within the same stop.
    Nothing is left out where the outcome is not certain: no budget on the last level
    (it keeps all), when-full=reject (it refuses instead of letting go), or a volume with less free space than the
    queue (its room, not the budget, decides then)."""
    if when_full not in ("evict", "reject"):
        raise ValueError(f"when_full must be 'evict' or 'reject', got {when_full!r}")
    if len(free) != len(budgets):
        raise ValueError(f"free must give one value per level ({len(budgets)}), got {len(free)}")
    if counted is None:
        counted = sizes
    if len(counted) != len(sizes):
        raise ValueError(f"counted must give one value per history ({len(sizes)}), got {len(counted)}")
    for what, values in (("sizes", sizes), ("budgets", budgets), ("counted", counted)):
        bad = [v for v in values if not isinstance(v, int) or isinstance(v, bool) or v < 0]
        if bad:
            raise ValueError(f"{what} must be whole numbers of bytes >= 0, got {bad[0]!r}")
    if replaced_by is None:
        replaced_by = [None] * len(sizes)
    if len(replaced_by) != len(sizes):
        raise ValueError(f"replaced_by must give one value per history ({len(sizes)}), got {len(replaced_by)}")
    if names is None:
        names = [f"history {i} of the queue" for i in range(len(sizes))]
    if len(names) != len(sizes):
        raise ValueError(f"names must give one per history ({len(sizes)}), got {len(names)}")
    for i, j in enumerate(replaced_by):
        if j is not None and (not isinstance(j, int) or isinstance(j, bool) or not i < j < len(sizes)):
            raise ValueError(f"replaced_by[{i}] must be None or the index of a later history, got {j!r}")
    if not budgets or not budgets[-1] or when_full != "evict":
        return {}
    if any(f is None or f < sum(sizes) for f in free):
        return {}
    last = budgets[-1]
    above = budgets[:-1]
    # certain to go to the last level: every level above refuses it as larger than its whole budget, the last
    # takes it (a larger one is refused everywhere and evicts nothing)
    certain = [all(b and s > b for b in above) and s <= last for s in sizes]
    # the last level's first-in-first-out played over the queue: room is made for each arrival (oldest first)
    # before it is written, then the copies it supersedes leave. What it held before the stop is older than all of
    # these and leaves first, so it never decides; a supersede assumed where the write may not come keeps more
    unkept: dict[int, Unkept] = {}
    there: deque[int] = deque()   # the queue's histories in the last level, oldest first
    used = 0
    for k in range(len(sizes)):
        if certain[k]:
            while there and used + counted[k] > last:
                i = there.popleft()
                used -= counted[i]
                unkept[i] = Unkept("", (*there, k))
            there.append(k)
            used += counted[k]
        for i in [i for i in there if replaced_by[i] == k]:
            there.remove(i)
            used -= counted[i]
    # said once the plan is whole: a history it pushes out may itself be left out for later ones
    return {i: Unkept(pushed_out_by(i, u.needs, counted, names, unkept, last), u.needs) for i, u in unkept.items()}


def pushed_out_by(i: int, needs: Sequence[int], sizes: Sequence[int], names: Sequence[str],
                  unkept: Collection[int], budget: int) -> str:
    """Why history `i` is not written, naming the later histories whose writes push it out (`needs`: those after
    it in the last level then, the arrival last; `unkept`: those the plan leaves out, said as such: each goes in
    turn for later ones, so no write of it happens either)."""
    later = [f"{names[j]} ({sizes[j] / MIB:.1f} MiB{', itself not written: it goes in turn for later ones' if j in unkept else ''})"
             for j in needs]
    listed = later[0] if len(later) == 1 else ", ".join(later[:-1]) + " and then " + later[-1]
    total = sizes[i] + sum(sizes[j] for j in needs)
    return (f"the last disk level's budget of {budget / MIB:.1f} MiB, which lets the oldest go first, would let it go "
            f"for the histories the stop queues there after it: with {listed} it comes to {total / MIB:.1f} MiB")


def gone_for_good(needs: Mapping[int, Collection[int]], written: Collection[int],
                  gone: Collection[int] = ()) -> set[int]:
    """Of the histories left out (`needs`: index -> the histories whose writes make it go, Unkept.needs), those now
    certain to go: each of those is written (`written`: the indexes whose writes succeeded) or is itself certain to
    go (`gone`, or found here). One not written (its write failed, or its turn has not come) leaves its room free,
    and the history might have stayed."""
    for i, later in needs.items():
        bad = [j for j in later if not isinstance(j, int) or isinstance(j, bool) or j <= i]
        if bad or not later:
            raise ValueError(f"needs[{i}] must be indexes of later histories, got {tuple(later)!r}")
    certain = set(gone)
    found: set[int] = set()
    for i in sorted(needs, reverse=True):   # each needs only later ones: settled first
        if i not in certain and all(j in written or j in certain for j in needs[i]):
            certain.add(i)
            found.add(i)
    return found


def written_after_all(held: Sequence[tuple[float, int]], level: Sequence[tuple[float, int]], budget: int) -> int:
    """Where the stop's writes did not all happen: from which of the histories still held (`held`: (seal, bytes) in
    queue order, each sealed at its turn) on the last level would hold them now, had they been written at their
    turns; those before it are let go. `level`: (seal, bytes) of what that level holds; `budget`: its (0: none).
    First-in-first-out keeps the newest that fit: walked from the newest, a held history fits beside what is
    newer than it, else it and every older one went for the newer ones (written after all, it would push out one
    the old order kept)."""
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise ValueError(f"budget must be a whole number of bytes >= 0, got {budget!r}")
    for what, pairs in (("held", held), ("level", level)):
        bad = [p for p in pairs if not (isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], int)
                                        and not isinstance(p[1], bool) and p[1] >= 0)]
        if bad:
            raise ValueError(f"{what} must be (seal, whole number of bytes >= 0) pairs, got {bad[0]!r}")
    if any(a[0] >= b[0] for a, b in pairwise(held)):
        raise ValueError(f"held must be in queue order, each sealed after the one before, got {list(held)!r}")
    if not budget:
        return 0
    newest_first = sorted(level, reverse=True)
    used, k = 0, 0
    for j in range(len(held) - 1, -1, -1):
        seal, size = held[j]
        while k < len(newest_first) and newest_first[k][0] > seal:
            used += newest_first[k][1]
            k += 1
        if used + size > budget:
            return j + 1
        used += size
    return 0


def hand_down_picks(sizes: Sequence[int], *, used: Sequence[float], budget: int, free: int | None, when_full: str,
                    taken: int = 0) -> list[int] | None:
    """Which of `sizes` (histories handed down at a stop to one disk level) that level keeps whole, written alone,
    the most recently used first (`used`: each one's last use, on one clock; among equal last uses the smaller first,
    so the count kept does not hang on the order given: the feed's outlook gives the contexts' in slot order, the
    stop its RAM entries by key, and every context never used is -inf; then in `sizes`' order): each in turn
    where it fits in the budget beside those picked before it and `taken` (bytes picked already); one that does not
    fit is skipped, a smaller one after it may fit. Returned in that order. By last use, not by the time each was
    parked: a stop parks the contexts' histories last, and an idle slot's hour-old history pushed out one RAM held
    from a minute ago. Nothing picked is evicted by another's write (they fit together); what the level
    held before the stop is older and leaves first. None where the outcome is not certain, all are written then as
    before: no budget (it keeps all), when-full=reject (it refuses, evicting nothing), or a volume whose free space
    (`free`; None: not known) is less than the picks (its room, not the budget, decides)."""
    if when_full not in ("evict", "reject"):
        raise ValueError(f"when_full must be 'evict' or 'reject', got {when_full!r}")
    for what, values in (("sizes", sizes), ("budget", [budget]), ("taken", [taken])):
        bad = [v for v in values if not isinstance(v, int) or isinstance(v, bool) or v < 0]
        if bad:
            raise ValueError(f"{what} must be whole numbers of bytes >= 0, got {bad[0]!r}")
    if len(used) != len(sizes):
        raise ValueError(f"used must give one last use per history ({len(sizes)}), got {len(used)}")
    bad = [u for u in used if not isinstance(u, (int, float)) or isinstance(u, bool) or math.isnan(u)]
    if bad:
        raise ValueError(f"used must be times (numbers, not NaN), got {bad[0]!r}")
    if free is not None and (not isinstance(free, int) or isinstance(free, bool) or free < 0):
        raise ValueError(f"free must be None or a whole number of bytes >= 0, got {free!r}")
    if not budget or when_full != "evict":
        return None
    picks, filled = [], taken
    for i in sorted(range(len(sizes)), key=lambda i: (-used[i], sizes[i], i)):
        if filled + sizes[i] <= budget:
            picks.append(i)
            filled += sizes[i]
    if free is None or free < filled - taken:
        return None
    return picks



def stop_plan(sizes: Sequence[Sequence[int]], used: Sequence[float], *, budgets: Sequence[int],
              free: Sequence[int | None], when_full: str, taken: Sequence[int] | None = None,
              volumes: Sequence[int] | None = None) -> list[int | None] | None:
    """A clean stop's one plan for its histories (the spill queue's and RAM's hand-downs alike) over the disk levels
    below RAM (`budgets`, the top one first): the level each is written to (its index), or None (left out).
    `sizes[i]`: what each level counts for history i once written (image and sidecar); `used`: last uses;
    `taken`: bytes each level holds already of the stop's own writes; `free`: each level's volume's free space.
    Level by level, the top one first, `hand_down_picks` among those not placed above: the most recently used fill
    the top level, the next ones the level below, so none written is evicted or moved down by another write of the
    stop (written oldest first through the cascade, each arrival pushed the oldest down and out: a warm 1 MiB and
    cold 2 MiB below RAM, ten 0.5 MiB histories, all ten written and four evicted). `volumes`: each level's
    volume (equal numbers: one volume; default every level on one): a level's free space is what the levels above
    on its volume picked leave of it (counted off another volume's too, a cold disk with room for its picks was
    taken as full by warm's, and the stop fell back on writing all). None where a level's outcome is
    not certain (hand_down_picks' None): all are written as before. Planned apart, the queue's were written first
    and RAM's picked as if the level were empty: their writes evicted the queue's."""
    if when_full not in ("evict", "reject"):
        raise ValueError(f"when_full must be 'evict' or 'reject', got {when_full!r}")
    taken = [0] * len(budgets) if taken is None else taken
    volumes = [0] * len(budgets) if volumes is None else volumes
    for what, values in (("free", free), ("taken", taken), ("volumes", volumes)):
        if len(values) != len(budgets):
            raise ValueError(f"{what} must give one value per level ({len(budgets)}), got {len(values)}")
    if len(used) != len(sizes):
        raise ValueError(f"used must give one last use per history ({len(sizes)}), got {len(used)}")
    bad = [s for s in sizes if not isinstance(s, Sequence) or len(s) != len(budgets)]
    if bad:
        raise ValueError(f"sizes must give each history one size per level ({len(budgets)}), got {bad[0]!r}")
    where: list[int | None] = [None] * len(sizes)
    spent: dict[int, int] = {}   # volume -> bytes the levels above on it picked
    for level, budget in enumerate(budgets):
        rest = [i for i, w in enumerate(where) if w is None]
        room, vol = free[level], volumes[level]
        picks = hand_down_picks([sizes[i][level] for i in rest], used=[used[i] for i in rest], budget=budget,
                                free=None if room is None else max(room - spent.get(vol, 0), 0),
                                when_full=when_full, taken=taken[level])
        if picks is None:
            return None
        for p in picks:
            where[rest[p]] = level
            spent[vol] = spent.get(vol, 0) + sizes[rest[p]][level]
    return where
