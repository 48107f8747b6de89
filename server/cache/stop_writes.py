"""Which of a stop's queued histories the disk levels would let go within the stop (pure).

What this is: the rule `ConversationCache.stop_writes` applies to the spill writer's queue once a clean stop has
parked its contexts' histories: a history the last disk level would take (too large for every level above it) and
then let go again, first-in-first-out, for the ones the stop writes after it there, is not written. Session 37's
soak: the first stop wrote 685 MiB, 476 of them histories cold's 320 MiB dropped within three seconds, most of its
6.52 s. The last level keeps the newest arrivals whose sizes fit its budget together (a FIFO level's content is
always the longest run of newest arrivals that fits), so a history whose size with the sizes certain to arrive
after it exceeds the budget is let go whatever else arrives; everything older in that level goes before it.
What this is not: the writes, the evictions (cache.py, cascade.py), or histories whose level is not certain (one
a warm level may take: its hand-down order is the cascade's to make).
"""

from __future__ import annotations

from collections.abc import Sequence

MIB = 1 << 20


def unkept_at_stop(sizes: Sequence[int], budgets: Sequence[int], free: Sequence[int | None], *,
                   when_full: str) -> dict[int, str]:
    """The indexes of `sizes` (the queued histories' bytes, in write order) the disk levels would let go within the
    stop, each with why. `budgets`: the disk levels' budgets in cascade order, the last one last (0: no budget);
    `free`: the free bytes on each one's volume (None: not known). Nothing is left out where the outcome is not
    certain: no budget on the last level (it keeps all), when-full=reject (it refuses instead of letting go), or a
    volume with less free space than the queue (its room, not the budget, decides then)."""
    if when_full not in ("evict", "reject"):
        raise ValueError(f"when_full must be 'evict' or 'reject', got {when_full!r}")
    if len(free) != len(budgets):
        raise ValueError(f"free must give one value per level ({len(budgets)}), got {len(free)}")
    for what, values in (("sizes", sizes), ("budgets", budgets)):
        bad = [v for v in values if not isinstance(v, int) or isinstance(v, bool) or v < 0]
        if bad:
            raise ValueError(f"{what} must be whole numbers of bytes >= 0, got {bad[0]!r}")
    if not budgets or not budgets[-1] or when_full != "evict":
        return {}
    if any(f is None or f < sum(sizes) for f in free):
        return {}
    last = budgets[-1]
    above = budgets[:-1]
    # certain to go to the last level: every level above refuses it as larger than its whole budget, the last
    # takes it (a larger one is refused everywhere and evicts nothing)
    certain = [all(b and s > b for b in above) and s <= last for s in sizes]
    unkept: dict[int, str] = {}
    after = 0   # bytes certain to arrive in the last level after index i
    for i in range(len(sizes) - 1, -1, -1):
        if not certain[i]:
            continue
        if sizes[i] + after > last:
            unkept[i] = (f"{sizes[i] / MIB:.1f} MiB, with the {after / MIB:.1f} MiB the stop writes after it there, "
                         f"> the last disk level's budget of {last / MIB:.1f} MiB, which lets the oldest go first")
        after += sizes[i]
    return unkept
