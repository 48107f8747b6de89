"""Starting a request in the context it was given: what of its prompt is already there (the context's
own history, a copy from another context, or a restore from the conversation cache), what is parked
before it is overwritten, and the Row it then runs as (its sampler, with the answer's rule as a
constraint, its decoder and stop matcher, where its prompt left the history it was compared with).

Mechanism on the scheduler's worker thread, over its state (engine, slot table, placer, cache,
metrics). Not here: which context the request gets (context_choice.py, placement.py), how a
history is parked (parking.py), reading the rest of the prompt (the scheduler's steps). A cache
problem never fails a request: the prompt is read instead.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from strata.engine import EngineInterrupted
from strata.engine.canonical_split import CanonicalSplit
from strata.engine.sampling import Sampler
from strata.engine.text import StreamDecoder
from strata.server import cache_reuse
from strata.server.jobs import Job, StopMatcher
from strata.server.parking import goes_on_as_text
from strata.server.row import Row, mismatch_position
from strata.server.slots import MAIN, common_prefix

if TYPE_CHECKING:
    from strata.server.scheduler import Scheduler

log = logging.getLogger("strata.server.scheduler")   # the scheduler's lines, named as before this module

MISMATCH_EXCERPT_TOKENS = 12
# cache lookups a request makes when its hit's files are gone (a miss, unindexed) or damaged from the start: before,
# the first such hit had the whole prompt read again (a two-server trial: 5,089 tokens, 38 s) while another entry
# held most of it
CACHE_LOOKUPS = 3


def constraint(job: Job, tokenizer: Any, eos: set[int]) -> Any:
    """The answer's rule as a sampler constraint (JSON, a held call, a reasoning budget around either) or None."""
    held = None if job.answer_rule is None else job.answer_rule.constraint_for(tokenizer, eos)
    if job.reasoning_budget is not None:
        held = job.reasoning_budget.constraint_for(tokenizer, held)
    if held is None:
        return None
    # the held answer's fixed text in the tokenizer's own split: the next turn reuses all of it
    return CanonicalSplit(held, tokenizer)


def start(sched: Scheduler, job: Job, ctx: int) -> Row:
    """Readies context `ctx` for `job` (its busy_job set by context_choice.choose_context) and returns its Row, in
    prefill from the first prompt token the context does not hold; the scheduler registers it."""
    state = sched.table[ctx]
    state.phase = "prefill"        # from here: the copy or restore below is part of reading its prompt
    state.prefill_tps = state.decode_tps = None      # the previous request's; live values come per step
    prompt = job.prompt
    # a scored prompt is read whole: a context's history, a copy or a cache restore holds no logits but its last
    # position's, and each position's are what it asks for (prompt_scoring.py)
    scored = job.prompt_logprobs is not None
    # the last prompt token is always read: its logits start the answer
    limit = 0 if scored else len(prompt) - 1
    # a code completion takes a history whose KV was moved (--cache-reuse) whole, an exact request only before
    # the move (main's too: a completion runs there where no slot is idle, editor_place.py; a park into a slot
    # keeps approx_from)
    approximate = job.completion and not scored
    own = state.matched_by(prompt, approximate) if state.valid else 0
    src, src_n = sched.table.best_source(prompt, exclude=ctx, approximate=approximate)
    best_n = max(own, src_n)
    row = Row(job=job, ctx=ctx, max_tokens=max(0, min(job.max_tokens, state.capacity - len(prompt))),
              sampler=Sampler(job.sampling, int(sched.engine.n_vocab),
                              constraint=constraint(job, sched.engine.tokenizer, sched.eos)),
              decoder=StreamDecoder(sched.engine.tokenizer),
              stopper=StopMatcher(job.stop))
    t0 = time.monotonic()
    restored = False
    # a hit stays held from its lookup to the end of its restore: the parks between (this context's history, the
    # spill thread's) must not delete it (RestoreMixin.held_lookup)
    with contextlib.ExitStack() as holds:
        hit, tried, parked = None, set(), False
        # a hit whose files went since it was indexed (another server sharing the folder removed them) is a miss,
        # unindexed, and one damaged before its first whole chunk restores nothing, discarded: the lookup is asked
        # again for the next best entry, a few times (two servers evicting at once)
        while sched.cache is not None and best_n < limit and len(tried) < CACHE_LOOKUPS:
            try:
                hit = holds.enter_context(sched.cache.held_lookup(prompt))
            except Exception:
                log.exception("cache lookup failed")
                hit = None
            hit_n = int(getattr(hit, "n_tokens", 0) or 0) if hit is not None else 0
            key = (getattr(hit, "level", None), getattr(hit, "key", None))
            if hit is None or hit_n <= best_n or key in tried:   # the same one again: kept (a context too small)
                break
            tried.add(key)
            if not parked and state.tokens and own < len(state.tokens):
                sched.park_to_cache(ctx, "overwritten by a cache restore")
                parked = True
            outcome = restore_from_cache(sched, hit, row, limit)
            restored = outcome == "restored"
            if outcome == "failed":   # the context's old history is gone: read from whatever is left
                own, best_n = 0, src_n
            # a damaged hit that restored nothing is discarded, a gone one unindexed: the next best may serve
            if outcome == "restored" or sched.stopping:
                break
        hit_n = int(getattr(hit, "n_tokens", 0) or 0) if hit is not None else 0
        compared = [(own, len(state.tokens)),
                    (src_n, len(sched.table[src].tokens) if src is not None else 0),
                    (hit_n, int(getattr(hit, "entry_tokens", hit_n) or 0) if hit is not None else 0)]
    copied_from = None
    spliced = 0        # new prompt tokens read between moved runs (--cache-reuse), in the context already
    if restored:
        n = row.reused
        copied_from = "cache"
    elif src is not None and src_n > own and not scored:
        n = min(src_n, limit)
        if state.tokens and own < len(state.tokens):
            sched.park_to_cache(ctx, "overwritten by a copy")
        source = sched.table[src]
        # a completion copies the source's runs past the common prefix too, to move them into place (a keystroke
        # placed beside the context that read the file: else its suffix was read again at every keystroke)
        whole = min(len(source.tokens), state.capacity)
        plan = cache_reuse.plan(source.tokens[:whole], prompt, n, sched.cache_reuse, limit) if approximate else None
        copy_n = whole if plan is not None else n
        sched.engine.copy(src, ctx, copy_n)
        sched.table.set_tokens(ctx, source.tokens[:copy_n])
        if source.approx_from is not None and copy_n > source.approx_from:   # the copy holds its approximation
            state.approx_from = source.approx_from
        if plan is not None and move_runs(sched, ctx, prompt, plan):
            n, spliced = n + plan.moved, plan.read
        elif plan is not None:
            sched.engine.truncate(ctx, n)
            sched.table.truncate(ctx, n)
        row.source = "main" if src == MAIN else "slot"
        copied_from = src
    elif not state.valid:   # a failed engine call left its tokens unknown: start from nothing
        n = 0
        sched.engine.truncate(ctx, 0)
        sched.table.set_tokens(ctx, [])
        row.source = "none"
    else:
        n = min(own, limit)
        if len(state.tokens) > n:
            if own < len(state.tokens) - 1 and not goes_on_as_text(sched.engine, state.tokens, prompt, own):
                sched.park_to_cache(ctx, "overwritten")
            plan = cache_reuse.plan(state.tokens, prompt, n, sched.cache_reuse, limit) if approximate else None
            if plan is None or not move_runs(sched, ctx, prompt, plan):
                sched.engine.truncate(ctx, n)
                sched.table.truncate(ctx, n)
            else:
                n, spliced = n + plan.moved, plan.read
        row.source = ("main" if ctx == MAIN else "slot") if n > 0 else "none"
    row.prefill_s += time.monotonic() - t0
    row.reused = n
    row.pos = n + spliced
    sched.placer.settle(job.id, n, copied_from)     # the trace says what the request got, as its usage does
    row.mismatch_at = mismatch_position(compared, limit)
    if row.mismatch_at is not None:
        at = row.mismatch_at
        row.mismatch_excerpt = excerpt(sched.engine, prompt[at: at + MISMATCH_EXCERPT_TOKENS])
    state.conversation = job.conversation
    state.completion = job.completion
    state.scored = job.prompt_logprobs is not None
    state.phase = "prefill"
    state.reused_tokens = n
    state.prompt_tokens_last = len(prompt)
    row.prefill_window.add(row.prefill_s, row.pos)
    state.superseded = state.covered = False   # its own history from here on, worth what any is (a copy it took was blank)
    # at every start, its own slot's too: a conversation main took over can go on in the slot it came from,
    # and main's history is then the idle copy
    sched.table.supersede_copies(job.conversation, ctx, prompt, sched.placer.cfg.own_min_share)
    return row


def move_runs(sched: Scheduler, ctx: int, prompt: list[int], plan: cache_reuse.ReusePlan) -> bool:
    """Applies a --cache-reuse plan to the context (Engine.splice): it then holds prompt[:plan.end], its KV
    approximate from plan.approx_from on (or before, where it already was). False when the engine refused or
    failed (logged; the caller truncates and the prompt is read)."""
    state = sched.table[ctx]
    before = state.approx_from if state.approx_from is not None and state.approx_from < plan.keep else None
    try:
        sched.engine.splice(ctx, plan.keep, plan.pieces)
    except EngineInterrupted:    # by the stop (its step under way): [0, keep) is held, as after any failed move
        log.info("the stop interrupted moving %d cached tokens of context %s into place", plan.moved, ctx)
        return False
    except Exception:
        log.exception("moving %d cached tokens of context %s into place failed; reading them instead", plan.moved,
                      ctx)
        return False
    sched.table.set_tokens(ctx, prompt[:plan.end])
    state.approx_from = plan.approx_from if before is None else before
    sched.metrics.add_shifted(plan.moved)
    return True


def restore_from_cache(sched: Scheduler, hit: Any, row: Row, limit: int) -> str:
    """Restores a cache hit into the row's context: "restored"; "missed" when the cache tried nothing
    (the entry is gone, or this context is too small for it: the context keeps its history); "failed"
    (and an empty context) when the restore broke off, so the prompt is read instead. A cache problem
    never fails a request."""
    ctx, prompt = row.ctx, row.job.prompt
    try:
        # a long read from disk ends at its next piece once the server stops (the entry stays in the cache)
        result = sched.cache.restore(hit, ctx, stop=lambda: sched.stopping)
        if result.n_tokens <= 0 and getattr(result, "untouched", False):
            log.info("the %s cache entry of %s tokens is not used for context %s: %s", result.level,
                     getattr(hit, "n_tokens", "?"), ctx, result.reason)
            return "missed"
        tokens = list(sched.engine.context_tokens(ctx))
        n = min(int(getattr(result, "n_tokens", 0)), common_prefix(tokens, prompt), limit)
        sched.engine.truncate(ctx, n)
        sched.table.set_tokens(ctx, tokens[:n])
    except Exception:
        log.exception("restoring %s tokens from the %s cache into context %s failed; looking for the next best "
                      "entry, else reading the prompt",
                      getattr(hit, "n_tokens", "?"), getattr(hit, "level", "?"), ctx)
        sched.engine.truncate(ctx, 0)
        sched.table.set_tokens(ctx, [])
        sched.metrics.add_restore_fallback(str(getattr(hit, "level", "?")))
        return "failed"
    if n <= 0 and sched.stopping:   # ended before its first chunk by the stop: nothing went wrong
        return "failed"
    if n <= 0:
        log.warning("the %s cache could not restore %s tokens into context %s (%s); looking for the next best entry, "
                    "else reading the prompt",
                    getattr(hit, "level", "?"), getattr(hit, "n_tokens", "?"), ctx,
                    getattr(result, "reason", "?"))
        sched.metrics.add_restore_fallback(str(getattr(result, "level", getattr(hit, "level", "?"))))
        return "failed"
    # a prefix of the entry it came from, which stays: the stop keeps no copy of it. Not a damaged entry's valid
    # prefix (the ladder): that entry was deleted, and the context holds the conversation's only copy (2cc4b27's
    # fault in a session save's read-back)
    if sched.stopping and not getattr(result, "ladder", False):
        sched.table[ctx].parked = True
    row.reused = n
    row.source = str(getattr(result, "level", getattr(hit, "level", "ram")))
    return "restored"


def excerpt(engine: Any, tokens: list[int]) -> str:
    """The text of `tokens` (a prompt's first tokens past its mismatch), its first 80 characters; '' where
    they do not detokenize."""
    try:
        text = engine.detokenize(tokens)
    except Exception:
        return ""
    return text[:80]
