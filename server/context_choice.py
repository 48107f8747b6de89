"""Which context a waiting request gets now, if any. Main (the solo path, the full --ctx) goes to a request
alone, to any request where there are no slots, and to a prompt too long for a slot; otherwise the slot
policy picks a slot (placement.py). A request also waits while another reads a prompt that begins as its
own does, so that it copies that read instead of repeating it.

Runs on the scheduler's worker thread, except `free_for` and `submitted_beside_completions` (on submit, under the
scheduler's lock). Code completions (Job.completion) are no company: a request beside them only counts as alone.
Before any of that, a prompt that goes on as the same bytes as a context's history in other tokens takes the
history's own tokens for them (`align_arrival`, byte_align.py). Not here: the queue and its limit (scheduler.py),
the policy's rules (slot_policy.py), parking main's
history before it is overwritten (parking.py), starting the request (row_start.py), the conversation cache's
admission (server/cache/policy.py: whether RAM takes a history; the monitor's and /metrics' "admission").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from strata.server import byte_align, parking
from strata.server.jobs import Job, answer_room
from strata.server.row import Row
from strata.server.slots import MAIN, SlotTable, common_prefix

if TYPE_CHECKING:
    from strata.server.scheduler import Scheduler

log = logging.getLogger("strata.server.scheduler")   # the scheduler's lines

# tokens: a prompt waits for another request's read of the same start only when it would read at least
# this many of them twice (one default prefill chunk; less costs little beside the other's read)
SHARED_READ_WAIT_MIN = 512


def aligned_with_histories(table: SlotTable, tokenizer: Any, tokens: list[int],
                           cache: Any = None) -> tuple[byte_align.AlignedPrompt, str] | None:
    """`tokens` aligned with the histories that may hold them in other tokens (byte_align.aligned_prompt): the
    contexts' (an exact match holds a context only before its moved KV, ContextState.approx_from) and, with
    `cache`, the conversation cache's entries sharing the most with them (RestoreMixin.alignable_histories: a
    history keeps the model's tokens from the conversation's first split on, so a parked one matched its next
    turn only up to that split: session 35's soak, 244 of 827 tokens). With where the aligned history is ("context
    2's", "a conversation cache entry's"); None where the tokenizer cannot say (no token bytes) or nothing aligns
    further than the tokens match."""
    token_bytes = getattr(tokenizer, "token_bytes", None)
    atoms = getattr(tokenizer, "parsed_ids", None)     # tokens parsed whole in text match only themselves
    if token_bytes is None or atoms is None:
        return None
    contexts = [c for c in table.contexts if c.valid and c.tokens]
    histories = [c.tokens if c.approx_from is None else c.tokens[:c.approx_from] for c in contexts]
    if cache is not None:
        histories += cache.alignable_histories(tokens)
    out = byte_align.aligned_prompt(histories, tokens, token_bytes, atoms, common=common_prefix)
    if out.source is None:
        return None
    where = (f"context {contexts[out.source].display_id()}'s" if out.source < len(contexts)
             else "a conversation cache entry's")
    return out, where


def align_arrival(table: SlotTable, tokenizer: Any, job: Job, cache: Any = None) -> int:
    """As `job` arrives on the worker thread, before any context is chosen for it: where its prompt goes on as the
    same bytes as a history in other tokens (the model's last answer sent back as text and tokenized canonically),
    it becomes that history's tokens for those bytes (aligned_with_histories), so the choice, the match, parking
    and the cache all see them. A code completion is left as it is (its KV is moved into place, --cache-reuse), and
    so is a prompt the client sent as token ids (Job.exact_tokens: it asked for those tokens). A prompt the
    alignment would make too long for main is left as it is. Returns how many more of its tokens a history holds
    than it matched as sent (0: left as it is)."""
    if job.completion or job.exact_tokens:
        return 0
    found = aligned_with_histories(table, tokenizer, job.prompt, cache)
    if found is None:
        return 0
    out, where = found
    if len(out.prompt) > len(job.prompt) and len(out.prompt) >= table.main.capacity:
        return 0
    log.info("request %s: its prompt goes on as %s history in other tokens; %d of its %d tokens held "
             "(%d as sent), now %d tokens", job.id, where, out.held_after, len(job.prompt), out.held_before,
             len(out.prompt))
    job.prompt = out.prompt
    return out.held_after - out.held_before


def fits(job: Job, capacity: int) -> bool:
    """Whether `job`'s prompt fits a context of `capacity` with room for its answer's first token; a prompt only
    scored (max_tokens 0: nothing generated, prompting.check_fits' room 0) may fill it. A full --ctx window scored
    took main alone before, one after another, though a slot of --slot-ctx (by default --ctx) holds it."""
    return len(job.prompt) + answer_room(job.max_tokens) <= capacity


def free_for(table: SlotTable, job: Job, idle: bool, beside: bool, editor_main: bool = False) -> int:
    """Free contexts the submitted requests can start in now (they are not waiting): the free slots,
    and main only where choose_context gives it: with no slots, to a request alone (`idle`: nothing
    running or pending), to one beside code completions only (`beside`: submitted_beside_completions), to a
    prompt too long for a slot, or to a code completion with `editor_main` (STRATA_SLOT_EDITOR_MAIN:
    editor_place.place_completion takes main when no slot is idle) while no completion runs (the next one waits
    for the context holding its file, editor_busy). Main free beside a busy slot takes no agent's request that
    fits a slot, so counting it let --queue N hold N + 1 waiting; not counting it beside completions, or for a
    completion with every slot busy, answered --queue N one request early."""
    slots = table.slots
    free = sum(1 for c in slots if c.busy_job is None)
    fits_slot = bool(slots) and fits(job, slots[0].capacity)
    editor = editor_main and job.completion and not any(c.busy_job is not None and c.completion
                                                        for c in table.contexts)
    if table.main.busy_job is None and (not fits_slot or (idle and not job.completion) or beside or editor):
        free += 1
    return free


def submitted_beside_completions(table: SlotTable, rows: dict[int, Row], pending: Iterable[Job], job: Job) -> bool:
    """On submit: whether choose_context will find `job` beside code completions only (beside_completions_only of
    the running `rows` and the `pending` jobs). A context being started (busy, its row not made yet: a restore can
    take seconds) is company: what starts there is not known here, and counting main free for it wrongly let one
    more request wait than --queue."""
    if any(c.busy_job is not None and ctx not in rows for ctx, c in enumerate(table.contexts)):
        return False
    return beside_completions_only([r.job for r in rows.values()] + list(pending), job)


def waits_for_shared_read(table: SlotTable, rows: Iterable[Row], job: Job) -> bool:
    """Whether `job` waits because another request (of `rows`) is reading a prompt that begins as its own
    does, at least SHARED_READ_WAIT_MIN tokens past where that read is (`job.waits_for_read` then names
    it): once the read has passed the shared part, the job copies it (best_source) instead of reading the
    same tokens beside it. Claude
    Code's sessions and parallel subagents begin with the same system prompt and tools: two sessions
    started together each read all 32,397 tokens side by side (9.9 and 10.4 s, the second reusing 2,410)."""
    held = None                     # the longest start of the prompt a context holds, looked up once
    for row in rows:
        if row.phase != "prefill":
            continue
        shared = common_prefix(row.job.prompt, job.prompt)
        if job.waits_for_read == row.job.id:
            # waiting already: until the read has passed the shared part. Let go once the read was within
            # SHARED_READ_WAIT_MIN of it, the job copied that far and read the rest of it a second time
            # (a subagent beside another: 708 tokens read, its own 221)
            if row.pos < shared:
                return True
            continue
        if shared - row.pos < SHARED_READ_WAIT_MIN:
            continue
        if held is None:
            held = table.best_source(job.prompt, exclude=-1)[1]
        if shared - held >= SHARED_READ_WAIT_MIN:
            job.waits_for_read = row.job.id
            return True
    return False


def beside_completions_only(jobs: Iterable[Job], job: Job) -> bool:
    """`job` is not a code completion and every other request of `jobs` (running or waiting) is one. An
    editor has one running or waiting nearly all the time (a keystroke's every 1-2 s); counted as company, they
    kept an agent's request that would have run alone off main. (Rare beside four agents, which overlap each
    other on two cores: 1 such placement in 20 minutes of the agent soak with an editor.)"""
    return not job.completion and all(j.completion for j in jobs if j is not job)


def choose_context(sched: Scheduler, job: Job, alone: bool) -> int | None:
    """The context `job` starts in, marked busy with it, or None (it waits). `alone`: nothing runs and
    it is the only one waiting; a request beside code completions only counts as alone too. A completion takes
    main only where no slot holds its prompt: alone it took main and displaced the conversation there (to a
    slot or the cache) at every keystroke of a user typing while the agent waited. Main's history is parked
    first when the job takes main. A completion also takes main where no slot is idle, or where main holds the most
    of its file (editor_place.py, STRATA_SLOT_EDITOR_MAIN)."""
    table, placer = sched.table, sched.placer
    main_free = table.main.busy_job is None
    n_slots = len(table.slots)
    fits_slot = n_slots > 0 and fits(job, table.slots[0].capacity)
    alone = alone and not (job.completion and fits_slot)
    beside = not alone and main_free and beside_completions_only(
        [r.job for r in sched._rows.values()] + list(sched._waiting), job)
    # A prompt too long for a slot takes main when main is free, even with others running.
    if main_free and (n_slots == 0 or alone or beside or not fits_slot):
        parking.displace_main(sched, job)
        placer.learn_main(job.prompt, time.monotonic())
        table.main.busy_job = job.id
        reason = "solo" if alone or n_slots == 0 else "beside_completions" if beside else "too_long_for_slot"
        placer.record(job.id, MAIN, None, reason, common_prefix(table.main.tokens, job.prompt), None)
        return MAIN
    if not fits_slot:
        return None
    now = time.monotonic()
    decision = placer.pick(job.prompt, now, job.id, job.completion, now - sched._completion_at)
    if decision.slot is None:
        return None
    if decision.slot == MAIN:     # a code completion (no slot idle, or its file there), or an agent kept off the
                                  # editor's slot (editor_place)
        parking.displace_main(sched, job)
        table.main.busy_job = job.id
        return MAIN
    slot = table[decision.slot]
    slot.busy_job = job.id
    return decision.slot
