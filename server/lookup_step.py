"""The lookup-decoding step: each generating row's next token plus a draft (a guess copied from its own
tokens, or a held answer's forced text) checked in one forward (Engine.extend), the draft tokens the
model itself samples taken, the rest truncated away.

Mechanism on the scheduler's worker thread, over its state (engine, slot table, metrics); it applies
lookup.py's pure rules (finding and sizing a draft). Not here: when a step uses it (scheduler.py's
`_step`), what a sampled token becomes (row_output.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from strata.server import lookup, row_failure, row_output
from strata.server.row import Row

if TYPE_CHECKING:
    from strata.server.scheduler import Scheduler


def run(sched: Scheduler, rows: list[Row], guessing: bool = True) -> bool:
    """Lookup decoding (server/lookup.py): each row's next token plus a draft copied from its own
    tokens (`guessing`), or a held answer's forced text (taken whole: canonical_split.py's upcoming),
    checked in one forward (Engine.extend); the draft tokens the model itself samples are taken, the
    rest truncated away. False, with nothing done, when no row has a draft."""
    engine, table, cfg = sched.engine, sched.table, sched.lookup
    per_row = engine.max_logit_rows // len(rows) - 1   # (that limit is never above max_rows)
    made = [(row, row_failure.guarded(sched, row, _draft, sched, row, per_row, guessing)) for row in rows]
    # a row whose draft could not be made has ended alone (row_failure), before the forward: the others go on
    made = [(row, out) for row, (ok, out) in made if ok]
    rows = [row for row, _ in made]
    drafts = [draft for _, (draft, _) in made]
    forced = [held for _, (_, held) in made]
    if not any(drafts):
        for row in rows:
            row.draft = lookup.after_step(row.draft, 0, 0, cfg)
        return False
    starts = [len(table[row.ctx].tokens) for row in rows]
    t0 = time.monotonic()
    logits = engine.extend([(row.ctx, [int(row.next_token)] + d) for row, d in zip(rows, drafts, strict=True)])
    sched.metrics.add_decode(time.monotonic() - t0, len(rows))
    first = 0
    for row, draft, start, held in zip(rows, drafts, starts, forced, strict=True):
        if not held:   # counted before the tokens are taken: the answer may end among them
            row.drafted += len(draft)
        taken_before, forced_before = row.draft_taken, row.forced_taken
        ok, taken = row_failure.guarded(sched, row, take_draft, sched, row, draft,
                                        logits[first: first + 1 + len(draft)], not held)
        first += 1 + len(draft)
        if not ok:     # ended alone, its context already cut back to the tokens the table took (row_failure.fail)
            if held:       # the forced tokens it took before failing were read and kept, as a held answer's that ends
                sched.metrics.add_forced(row.forced_taken - forced_before)
            else:          # /metrics counts the draft as its entry, written as it failed, does
                sched.metrics.add_lookup(len(draft), row.draft_taken - taken_before)
            continue
        engine.truncate(row.ctx, start + 1 + taken)   # the rejected tail, never read again
        if held:
            sched.metrics.add_forced(taken)
            continue
        row.draft = lookup.after_step(row.draft, len(draft), taken, cfg)
        sched.metrics.add_lookup(len(draft), taken)
    return True


def _draft(sched: Scheduler, row: Row, per_row: int, guessing: bool) -> tuple[list[int], bool]:
    """Row's draft, at most `per_row` tokens, and whether it is a held answer's forced text (else a guess copied
    from its own tokens when `guessing`; [] when it has none)."""
    cfg, state = sched.lookup, sched.table[row.ctx]
    # a guess past the request's token limit could never be taken
    room = min(per_row, row.max_tokens - len(row.generated) - 1, state.capacity - len(state.tokens) - 2)
    draft = row.forced()[:max(0, room)]
    if draft:
        return draft, True
    size = min(room, lookup.draft_size(row.draft, cfg, state.capacity - len(state.tokens) - 2))
    if guessing and size > 0:
        known = len(row.job.prompt) + len(row.generated)
        if row.history is None:
            row.history = lookup.TokenHistory(row.job.prompt + row.generated)
        elif len(row.history) < known:
            row.history.extend(row.generated[len(row.history) - known:])
        draft = row.history.find_draft(cfg, size)
    return draft, False


def take_draft(sched: Scheduler, row: Row, draft: list[int], logits: Any, counted: bool = True) -> int:
    """Samples row's tokens from the logits after its next token and after each draft token, in
    order, as decode steps would, while the samples equal the draft; returns the draft tokens taken
    (the slot table then holds the next token and those). Each taken is added as it is taken to the row's
    `draft_taken` (`counted`: a guess) or `forced_taken` (a held answer's forced text), so a request that ends
    or fails among them counts all it took (its record is written when it ends, and /metrics counted that last
    step while the request's entry did not; a failure returns no count)."""
    sched.table.extend(row.ctx, [int(row.next_token)])
    for j in range(len(draft) + 1):
        if j:
            if counted:
                row.draft_taken += 1
            else:
                row.forced_taken += 1
            sched.table.extend(row.ctx, [draft[j - 1]])
        token = int(row.sampler.sample(logits[j], row.generated))
        row_output.accept(sched, row, token, logits[j])
        if not sched.running(row) or j == len(draft) or token != draft[j]:
            return j
    return len(draft)
