"""Which history a session save by conversation saves, and into which context a parked one is read back first.

What this is: pure choices over plain data (no engine, no cache, no I/O). The mechanism (history_save.py) counts,
for each context and each conversation-cache entry, how many tokens of the wanted history it holds from the start,
and applies what these functions pick. What this is not: how the wanted history is named (messages rendered as a
chat request's prompt, or token ids: history_save.py) nor the save itself (cache/sessions.py).

A holder holds the wanted history when it matches at least `min_tokens` of it (the prompt of the request that
answered last: a context another request took has gone another way before that, or holds less); what is saved is
the part it matches, never more: tokens past it are another request's or the next turn's, not this history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# A context is read before the cache (nothing to restore), then the cache's levels fastest first (its RAM level and
# its spill queue are "ram")
SOURCE_ORDER = ("context", "ram", "warm", "cold")


@dataclass(frozen=True)
class Holder:
    """A context or cache entry and how much of the wanted history it holds from its start."""

    source: str          # "context" or a conversation-cache level ("ram", "warm", "cold")
    ref: int | str       # the context id, or the entry's key
    matched: int         # tokens of the wanted history it holds, from the start
    label: str           # for reasons: "context main", "slot 2", "ram entry 3f2a..."


@dataclass(frozen=True)
class HolderChoice:
    holder: Holder | None
    reason: str


def pick_holder(holders: Sequence[Holder], min_tokens: int) -> HolderChoice:
    """The holder matching most of the wanted history, at least `min_tokens` of it; ties to a context, then the
    fastest cache level, then the order given. None (with why) when none holds that much."""
    if min_tokens < 1:
        raise ValueError(f"min_tokens must be >= 1, got {min_tokens!r}")
    ok = [h for h in holders if h.matched >= min_tokens]
    if not ok:
        best = max(holders, key=lambda h: h.matched, default=None)
        closest = f"; the closest, {best.label}, holds its first {best.matched}" if best and best.matched else ""
        return HolderChoice(None, f"no context or cached conversation holds its first {min_tokens} tokens{closest}")
    rank = {s: i for i, s in enumerate(SOURCE_ORDER)}
    chosen = min(enumerate(ok), key=lambda p: (-p[1].matched, rank.get(p[1].source, len(rank)), p[0]))[1]
    return HolderChoice(chosen, f"{chosen.label} holds {chosen.matched} tokens of it (the most; at least "
                                f"{min_tokens} needed)")


@dataclass(frozen=True)
class ContextView:
    """A context as the choice of where to read a parked history back sees it."""

    id: int
    capacity: int        # tokens of the history it can take (whole snapshot chunks of a longer entry: fewer)
    idle: bool           # runs no request or rebuild
    reserved: bool       # a session save or restore waits for it (it runs there next)
    blank: bool          # empty, invalid or a superseded copy: worth nothing
    last_use: float | None
    is_main: bool


@dataclass(frozen=True)
class ContextChoice:
    ctx: int | None
    reason: str


def pick_restore_context(contexts: Sequence[ContextView], n_tokens: int) -> ContextChoice:
    """Where a parked history of `n_tokens` is read back before it is saved: an idle context that fits it and no
    session call waits for. A blank one first (nothing is displaced), then the slot used longest ago (its history
    is parked to the cache first, as a request's displacement parks it), main last (the solo conversation's)."""
    fits = [c for c in contexts if c.idle and not c.reserved and c.capacity >= n_tokens]
    if not fits:
        return ContextChoice(None, f"no idle context holds {n_tokens} tokens (every one that would runs a request "
                                   "or waits for a session call)")
    chosen = min(fits, key=lambda c: (not c.blank, c.is_main, c.last_use if c.last_use is not None else -1.0, c.id))
    what = "blank" if chosen.blank else "idle, used longest ago" if not chosen.is_main else "idle (main: no slot fits)"
    return ContextChoice(chosen.id, f"context {'main' if chosen.is_main else chosen.id} ({what})")


@dataclass(frozen=True)
class KeyedHolder:
    """A context labelled with a conversation key, or a cache entry recorded under it, and the history it holds."""

    source: str          # "context" or a conversation-cache level ("ram", "warm", "cold")
    ref: int | str       # the context id, or the entry's key
    tokens: Sequence[int]
    label: str
    parked_at: float = 0.0   # an entry's: when its history was parked (its created_at), on the cache's clock


@dataclass(frozen=True)
class KeyedChoice:
    holder: KeyedHolder | None
    reason: str
    conflict: bool = False   # contexts labelled with the key went different ways: which one is meant is unknown


def pick_keyed(holders: Sequence[KeyedHolder]) -> KeyedChoice:
    """Which history a save by conversation key saves: the holder holding the most tokens, ties to a context, then
    the fastest level. Contexts labelled with the key must lie on one line (else `conflict`: side requests under
    one key went other ways); while one holds the key, only the entries on that line count (the live one is the
    conversation now: an entry parked before it went another way, a compaction's, is not), and an entry is
    chosen only when it holds more (parked, then its context taken by a shorter request under the key). With no
    context holding it, the entry parked last is the conversation now, and only the entries on its line count: the
    longest of entries that went different ways was saved, the history from before a compaction (or an agent's
    rewind) once the compacted conversation was parked too."""
    contexts = [h for h in holders if h.source == "context"]
    if contexts and not one_line([h.tokens for h in contexts]):
        return KeyedChoice(None, "the contexts labelled with it hold histories that went different ways (side "
                                 "requests under one key)", conflict=True)
    if contexts:
        line = list(max((h.tokens for h in contexts), key=len))
    else:
        line = list(max(holders, key=lambda h: h.parked_at).tokens) if holders else []
    ok = [h for h in holders if h.source == "context" or one_line([line, h.tokens])]
    if not ok:
        return KeyedChoice(None, "no context or parked conversation holds it")
    rank = {s: i for i, s in enumerate(SOURCE_ORDER)}
    chosen = min(enumerate(ok), key=lambda p: (-len(p[1].tokens), rank.get(p[1].source, len(rank)), p[0]))[1]
    return KeyedChoice(chosen, f"{chosen.label} holds it: {len(chosen.tokens)} tokens (the most)")


def one_line(histories: Sequence[Sequence[int]]) -> bool:
    """Whether the histories lie on one line: each a prefix of the longest (contexts labelled with one conversation
    key that side requests did not take another way)."""
    longest = max(histories, key=len, default=[])
    return all(list(h) == list(longest[:len(h)]) for h in histories)
