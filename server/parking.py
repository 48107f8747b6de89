"""Parking: a history is kept before a request overwrites it. The solo conversation in main moves into a
slot (seed 000, groups) or goes to the conversation cache; any context's history goes to the cache, once.

Mechanism on the scheduler's worker thread, over its state (engine, slot table, placer, cache, metrics):
the placer decides where main's history goes (placement.py, `plan_park`), this applies the decision.
Not here: the decision's rules (slot_policy.py), the cache's levels (server/cache), when a context is
about to be overwritten (scheduler.py and the start of a request ask).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from strata.server import byte_align
from strata.server.jobs import Job
from strata.server.slots import MAIN, ContextState, common_prefix, held_by_another, idle_s

if TYPE_CHECKING:
    from strata.server.scheduler import Scheduler

log = logging.getLogger("strata.server.scheduler")   # the scheduler's lines, named as before this module


def displace_main(sched: Scheduler, job: Job) -> None:
    """Before a request overwrites main's history: park it into a slot (seed 000, groups) or the cache."""
    main = sched.table.main
    if not main.tokens or not main.valid:
        return
    held = common_prefix(main.tokens, job.prompt)
    if held >= len(main.tokens) - 1 or goes_on_as_text(sched.engine, main.tokens, job.prompt, held):
        return  # the same conversation goes on: nothing is lost
    if job.completion and main.completion:
        return  # the editor's next keystroke over its last one: it goes on from it (--cache-reuse moves the rest)
    # held until the request has started (Scheduler.start_holds): its restore of the hit comes after this park
    sched.start_holds.enter_context(holding_hit(sched, job.prompt))
    _displace(sched, job)


def goes_on_as_text(engine: Any, history: list[int], prompt: list[int], held: int) -> bool:
    """Whether `prompt`, which shares `held` tokens of `history`, goes on with the rest of it as the same bytes:
    the client sent the context's last answer back and it was tokenized otherwise (its first characters joined
    the prompt's last token, `assistant\\n` + `\\n<read_file>` reading `\\n\\n`, or the model split a word
    otherwise than the tokenizer does). Nothing the history holds past `held` is then worth parking: a request
    that sends that text gets the tokens this one reads. A Cline trial (SmolLM2, --batch 4) parted so on 9 of
    14 turns, and each parked the whole history (14-25K tokens) into a slot to keep a few answer tokens.
    Since session 35 an arriving prompt takes the history's own tokens for those bytes (byte_align.py), so this
    is left for a history that ends inside one of the prompt's tokens; the same walk (`covered`), bounded."""
    tokenizer = getattr(engine, "tokenizer", None)
    token_bytes = getattr(tokenizer, "token_bytes", None)
    atoms = getattr(tokenizer, "parsed_ids", None)
    if held >= len(history) or token_bytes is None or atoms is None:
        return False
    return byte_align.walk(history, prompt, held, token_bytes, atoms).covered


@contextlib.contextmanager
def holding_hit(sched: Scheduler, prompt: list[int]) -> Iterator[None]:
    """Keeps the conversation cache's best entry for `prompt` from being deleted while the block parks histories
    (RestoreMixin.held_lookup): the park of the history a request displaces can make the levels hand down and
    the last one delete its oldest, and that was often the entry the request was about to restore."""
    with contextlib.ExitStack() as holds:
        if sched.cache is not None:
            try:
                holds.enter_context(sched.cache.held_lookup(prompt))
            except Exception:
                log.exception("cache lookup failed")
        yield


def _displace(sched: Scheduler, job: Job) -> None:
    decision = sched.placer.plan_park(time.monotonic(), job.id)
    if decision is not None and decision.slot is not None:
        if park_into_slot(sched, decision.slot, decision.last_use):
            return
    elif decision is not None:
        sched.metrics.add_park("skip")
        if decision.park_skip == "kept_share":   # a slot already keeps it
            return
    park_to_cache(sched, MAIN, "displaced from main")


def park_into_slot(sched: Scheduler, slot: int, last_use: float) -> bool:
    """Copies main's history into `slot` (its own history to the cache first); False, with the slot
    left blank, where the copy fails: the conversation cache takes main's history instead."""
    table = sched.table
    main = table.main
    n = len(main.tokens)
    park_to_cache(sched, slot, "overwritten by a park")
    try:
        sched.engine.copy(MAIN, slot, n)
    except Exception:
        log.exception("parking main's %d tokens into context %s failed; the conversation cache takes them",
                      n, slot)
        table.invalidate(slot)
        sched.placer.ledger.release(slot, n, last_use)   # plan_park moved main's history there: not held
        sched.metrics.add_park("failed")
        return False
    dst = table[slot]
    table.set_tokens(slot, main.tokens[:n])
    dst.conversation = main.conversation
    dst.completion, dst.scored = main.completion, main.scored
    dst.approx_from = main.approx_from    # a completion's moved KV (--cache-reuse) stays one in the copy
    dst.last_use = last_use
    # kept: the slot holds all of it, and is parked to the cache itself before anything overwrites it. Main's
    # history was also snapshotted into the RAM level when the request that displaced it started there: at every
    # side request of a growing conversation (SmolLM2, 6,500 tokens: 150 MB, 80-560 ms before its first token)
    main.parked = True
    sched.metrics.add_park("slot")
    return True


def parkable(c: ContextState) -> bool:
    """Whether a park hands this context's history to the cache: it holds one, its KV is trusted, it is not parked
    unchanged already, and it is not a code completion's or a scored prompt's (the monitor feed's `stop` counts them
    too)."""
    return bool(c.tokens) and c.valid and not c.parked and not c.completion and not c.scored


def park_to_cache(sched: Scheduler, ctx: int, reason: str) -> None:
    """Hands the history `ctx` holds to the conversation cache before it is overwritten (worker thread),
    once: a history parked and unchanged since (main displaced, then overwritten) is not parked again."""
    c = sched.table[ctx]
    # a superseded copy is parked too unless the request that superseded it held it whole (`covered`) and that
    # history is kept (kept_elsewhere); a code completion's history never is (ContextState.completion)
    if sched.cache is None or not parkable(c):
        return
    if c.covered and kept_elsewhere(sched, ctx):
        c.parked = True
        return
    try:
        result = sched.cache.park(ctx, reason, conversation=c.conversation, idle_s=idle_s(c, time.monotonic()))
        c.parked = True
        sched.metrics.add_park(f"cache_{getattr(result, 'destination', 'done')}")
    except Exception:
        log.exception("cache park of context %s failed", ctx)


def kept_elsewhere(sched: Scheduler, ctx: int) -> bool:
    """Whether the history of `ctx` (a copy a request that went on held whole) is kept without it: another
    context holds it whole and the cache can keep that one, or the cache keeps a longer history of it already.
    A holder larger than every level's whole budget keeps nothing once it is parked (its write is refused): the
    copy, which fits, was then dropped too, and the conversation was gone from every level. "Whole" as `covered`
    counts it (SlotTable.supersede_copies): all but at most the copy's last token, which the request that went on
    may have read otherwise (an answer's last tokens re-rendered from its text); asked for that token too, such a
    copy was parked at every overwrite and stop, a second copy beside the history that holds it."""
    contexts = sched.table.contexts
    unkept = {i for i, o in enumerate(contexts) if i != ctx and o.tokens
              and not sched.cache.takes_whole(sched.engine.context_bytes(i))}
    copy = contexts[ctx].tokens
    start = copy[:-1]   # what a holder differing only in the last token holds of it
    other_last = any(i not in unkept and _holds_but_last_token(i, o, ctx, copy) for i, o in enumerate(contexts))
    return held_by_another(contexts, ctx, unkept) or other_last or sched.cache.keeps_longer(start or copy)


def _holds_but_last_token(i: int, other: Any, ctx: int, copy: list[int]) -> bool:
    """Whether context `i` holds the copy in `ctx` whole but its last token. A holder equal to the copy is
    held_by_another's; of two as long, the first holds the other (as there: two copies each taken as the other's
    holder were both dropped). A code completion's or a scored prompt's context is never written: it holds nothing."""
    if i == ctx or not other.valid or other.completion or other.scored or len(other.tokens) < len(copy):
        return False
    if len(other.tokens) == len(copy) and i > ctx:
        return False
    return other.tokens[:len(copy)] != copy and other.tokens[:len(copy) - 1] == copy[:-1]
