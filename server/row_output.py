"""What a running request's sampled tokens become, and its end: a token is streamed as text (and
logprobs), checked against the end-of-turn tokens, stop sequences and limits; a request that ends gets
its completion, its context's final numbers, its metrics, its record (the monitor feed's `requests`), its
timeline entry and its 'ended' log line, and one that never ran gets the same end without a context.

Mechanism on the scheduler's worker thread, over its state (slot table, metrics; its events through
`Scheduler.post`, an ended row off its running ones through `Scheduler.release`). Not
here: sampling (the steps sample, then call `accept`), the row's record type (row.py), when a request is
cancelled or failed (scheduler.py decides, then calls `finish`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from strata.engine.sampling import token_logprobs
from strata.server.jobs import Completion, Job
from strata.server.row import Row, decode_rate

if TYPE_CHECKING:
    from strata.server.scheduler import Scheduler

log = logging.getLogger("strata.server.scheduler")   # the scheduler's lines, named as before this module


def accept(sched: Scheduler, row: Row, token: int, logits: Any = None) -> None:
    """A sampled token (from `logits`): stream its text, or finish the row."""
    if row.first_token_at is None:
        row.first_token_at = time.monotonic()
        count_prompt(sched, row)     # read whole: counted now, as its tokens are, not at the answer's end
    row.sampled += 1
    if (token in sched.eos or token in row.job.end_tokens) and not row.job.ignore_eos:
        finish(sched, row, "stop")
        return
    if row.job.logprobs is not None and logits is not None:
        row.logprobs.append(token_logprobs(logits, token, row.job.logprobs))
        row.logprob_starts.append(row.decoded_chars)
    row.generated.append(token)
    sched.metrics.add_generated(1)
    row.decode_window.add(time.monotonic(), len(row.generated))
    rate = row.decode_window.rate()
    if rate is not None:
        sched.table[row.ctx].decode_tps = rate
    piece = row.decoder.push(token)
    row.decoded_chars += len(piece)
    out = row.stopper.feed(piece) if piece else ""
    post_logprobs(sched, row, row.stopper.released)   # before the text they wrote (text_logprobs reads them so)
    if out and row.job.stream:
        sched.post(row.job, "text", out)
    if row.stopper.matched is not None or (out and row.job.call_end is not None and row.job.call_end.feed(out)):
        finish(sched, row, "stop")       # a stop sequence, or the one call allowed is whole
    elif len(row.generated) >= row.max_tokens or len(sched.table[row.ctx].tokens) + 1 >= \
            sched.table[row.ctx].capacity:
        finish(sched, row, "length")
    else:
        row.next_token = token


def post_logprobs(sched: Scheduler, row: Row, upto: int) -> None:
    """Streams the log-probabilities of the tokens whose text begins before character `upto`, the text given
    out so far: a token whose text the stop strings still hold waits with it, and one whose text a stop
    sequence cut off is never sent, as the text is not (its entry would name text the answer lacks)."""
    if not row.job.stream:
        return
    n = _entries_before(row, upto)
    if n > row.logprobs_posted:
        sched.post(row.job, "logprobs", row.logprobs[row.logprobs_posted:n])
        row.logprobs_posted = n


def _entries_before(row: Row, upto: int) -> int:
    """How many of the row's log-probability entries are of tokens whose text begins before character `upto`
    (a token that writes only part of a character, nothing yet, goes with the next whose text is given out)."""
    n = row.logprobs_posted
    while n < len(row.logprob_starts) and row.logprob_starts[n] < upto:
        n += 1
    return n


def count_prompt(sched: Scheduler, row: Row) -> None:
    """Counts the row's prompt in the metrics, once: at its first token (the whole prompt read) or, for a
    row ended before one, at its end with the part read by then (a cancelled or failed request's read
    tokens were work done)."""
    if row.prompt_counted:
        return
    row.prompt_counted = True
    sched.metrics.add_prompt(len(row.job.prompt), row.reused, row.source, row.pos - row.reused)


def _kept_logprobs(row: Row) -> list:
    """The entries of the tokens whose text the answer keeps: after a stop sequence, none of those whose text
    begins where the stop sequence did (their text is not in the answer), as llama.cpp leaves them out."""
    if row.stopper.matched is None:
        return row.logprobs
    cut = len(row.stopper.text)
    return [e for e, start in zip(row.logprobs, row.logprob_starts, strict=True) if start < cut]


def request_status(reason: str) -> str:
    """A request's status in /metrics and its record for its finish reason: an answer that ended is "ok"."""
    return {"stop": "ok", "length": "ok"}.get(reason, reason)


def finish(sched: Scheduler, row: Row, reason: str, error: str | None = None) -> None:
    """Ends a running request: the rest of its text, its completion, its context's final numbers, the
    metrics, its record and timeline entry, and its 'ended' line."""
    if row.stopper.matched is None and reason != "error":
        tail_piece = row.decoder.flush()
        row.decoded_chars += len(tail_piece)
        tail = row.stopper.feed(tail_piece) + row.stopper.flush()
        if reason != "cancelled":
            # every token wrote text the answer keeps (unless a stop sequence in the tail cut it)
            post_logprobs(sched, row, row.stopper.released if row.stopper.matched is not None else row.decoded_chars + 1)
        if tail and reason != "cancelled" and row.job.stream:
            sched.post(row.job, "text", tail)
    now = row.finished_at = time.monotonic()
    first = row.first_token_at         # None: ended before its first token (cancelled, stopped): no ttft
    decoded = max(0, row.sampled - 1)  # made by decode steps after the first token, in (now - first)
    completion = Completion(
        text=row.stopper.text, tokens=list(row.generated), finish_reason=reason,
        stop_sequence=row.stopper.matched, prompt_tokens=len(row.job.prompt), cached_tokens=row.reused,
        prompt_ms=row.prefill_s * 1000.0, predicted_ms=0.0 if first is None else (now - first) * 1000.0,
        error=error,
        logprobs=_kept_logprobs(row) if row.job.logprobs is not None else None, decoded=decoded,
        prompt_logprobs=row.prompt_logprobs if row.job.prompt_logprobs is not None else None)
    state = sched.table[row.ctx]
    state.busy_job = None
    state.phase = "idle"
    state.last_use = now
    read = row.pos - row.reused        # all the rest of the prompt, unless cancelled or failed before
    state.prefill_tps = read / row.prefill_s if row.prefill_s > 0 and read > 0 else None
    state.decode_tps = decode_rate(row)
    sched.release(row)
    try:
        status = request_status(reason)
        count_prompt(sched, row)         # ended before its first token: what was read of it
        sched.metrics.add_request(row.job.api, status)
        if row.job.answer_rule is not None:
            sched.metrics.add_held(row.job.answer_rule.kind, row.sampler.refusals)
        if row.job.reasoning_budget is not None and getattr(row.sampler.constraint, "cut", False):
            sched.metrics.add_budget_cut()
        record_request(sched, row.job, row, status)
        if sched.timeline is not None:
            try:
                sched.timeline.record(row.job, row.reused, len(row.generated), row.generated)
            except Exception:
                log.exception("timeline write failed")
    finally:
        # released, the row is in no one's list: a failure in its bookkeeping above (raised on to the step,
        # row_failure.py) must not keep its answer from its client, who would wait for ever
        sched.post(row.job, "done", completion)
    ttft = "-" if first is None else f"{(first - row.job.submitted) * 1000.0:.0f} ms"
    log.info("request %s (%s) ended (%s): context %s, prompt %d (reused %d from %s), output %d, ttft %s",
             row.job.id, row.job.api, reason, state.display_id(), len(row.job.prompt), row.reused, row.source,
             len(row.generated), ttft)


def end_anyway(sched: Scheduler, row: Row, reason: str, error: str) -> None:
    """`finish`, for the ends no step stands behind (the step's catch-all, the stop's): where `finish` itself fails
    before it released the row (its completion, its stop strings' tail, its context's numbers), the last resort:
    the context blanked (what it holds is not known for sure then), the row released and an error answer posted.
    Raised on, that failure ended the scheduler's worker thread: no request was served again, and every client
    waited for ever."""
    try:
        finish(sched, row, reason, error)
        return
    except Exception:
        log.exception("request %s (%s): its %s end failed", row.job.id, row.job.api, reason)
    if not sched.running(row):      # released: finish posted its answer whatever its bookkeeping did
        return
    sched.table.invalidate(row.ctx)
    state = sched.table[row.ctx]
    state.busy_job = None
    state.phase = "idle"
    sched.release(row)
    sched.metrics.add_request(row.job.api, request_status(reason))
    sched.post(row.job, "done", Completion(
        text="", tokens=list(row.generated), finish_reason=reason, stop_sequence=None,
        prompt_tokens=len(row.job.prompt), cached_tokens=row.reused, prompt_ms=row.prefill_s * 1000.0,
        predicted_ms=0.0, error=error))


def record_request(sched: Scheduler, job: Job, row: Row | None, status: str) -> None:
    """The request's entry in the recent requests (the monitor feed's `requests`); `row` None for one that
    never ran."""
    rec: dict[str, Any] = {"id": job.id, "api": job.api, "started": job.submitted_wall, "finished": time.time(),
                           "prompt_tokens": len(job.prompt), "status": status}
    if row is not None:
        rec.update(reused_tokens=row.reused, source=row.source, output_tokens=len(row.generated),
                   context=sched.table[row.ctx].display_id(), prefill_chunks=row.prefill_chunks,
                   decode_steps_during_prefill=row.steps_during_prefill)
        if row.mismatch_at is not None:
            rec.update(mismatch_at=row.mismatch_at, mismatch_excerpt=row.mismatch_excerpt)
        if row.drafted:
            rec.update(lookup_drafted=row.drafted, lookup_taken=row.draft_taken)
        if row.first_token_at is not None:
            rec["ttft_ms"] = round((row.first_token_at - job.submitted) * 1000.0, 2)
        read = row.pos - row.reused
        if row.prefill_s > 0 and read > 0:
            rec["prefill_tps"] = round(read / row.prefill_s, 1)
        rate = decode_rate(row)
        if rate is not None:
            rec["decode_tps"] = round(rate, 1)
    sched.requests.append(rec)


def end_unstarted(sched: Scheduler, job: Job, reason: str, why: str, error: str | None = None) -> None:
    """Ends a request that never ran ("cancelled" or "error"), as `finish` ends one that did: counted (nothing
    of its prompt read), its record, its 'ended' line saying `why`, and an empty completion carrying `error`
    (None for a client that left: nothing failed; a stop's reason or an internal error makes it a failure)."""
    sched.metrics.add_prompt(len(job.prompt), 0, "none", 0)
    sched.metrics.add_request(job.api, reason)
    record_request(sched, job, None, reason)
    log.info("request %s (%s) ended (%s): no context (%s after %.0f ms), prompt %d (reused 0 from none), output 0",
             job.id, job.api, reason, why, (time.monotonic() - job.submitted) * 1000.0, len(job.prompt))
    sched.post(job, "done", Completion(text="", tokens=[], finish_reason=reason, stop_sequence=None,
                                       prompt_tokens=len(job.prompt), cached_tokens=0, prompt_ms=0.0,
                                       predicted_ms=0.0, error=error))
