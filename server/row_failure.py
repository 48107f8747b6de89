"""One running request's own work after a forward that succeeded (its sampling: a grammar or JSON-schema
constraint, logit bias, penalties; what its token becomes: text, stop strings, tool calls, reasoning budgets;
lookup decoding's check of its draft; its first token after its prompt's last piece), or before one (its held
answer's next tokens, its lookup draft made from its tokens), failing: that request ends with an internal error
naming the failure, and every other row of the step goes on untouched. Before, the step's catch-all (scheduler.py's
`_run`) failed every running request and blanked every context for one request's unusual options, tool schema or
text (their histories read again on their next turns).

Mechanism on the scheduler's worker thread, over its state (engine, slot table, running rows). Not here: a
failure of the forward itself (no row's token was added: the catch-all fails every row, as it must), one while
placing or starting a request (scheduler.py's `_fail_unstarted`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strata.engine import EngineInterrupted
from strata.server import row_output
from strata.server.row import Row

if TYPE_CHECKING:
    from strata.server.scheduler import Scheduler

log = logging.getLogger("strata.server.scheduler")   # the scheduler's lines


def guarded(sched: Scheduler, row: Row, work: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
    """Runs `work(*args)`, `row`'s own work after a forward; (True, its result), or (False, None) once a
    failure in it has ended `row` alone (`fail`). A stop's interruption is no failure of the row: raised on."""
    try:
        return True, work(*args)
    except EngineInterrupted:
        raise
    except Exception as e:
        fail(sched, row, e)
        return False, None


def fail(sched: Scheduler, row: Row, e: Exception) -> None:
    """Ends `row` with an internal error naming `e` (logged once, with its traceback; `last_error`; counted as
    an error request in /metrics, as the catch-all's are), its context cut back to what the slot table knows.

    Why that keeps the context: the table is told of a forward's tokens only after the forward (the steps extend
    it row by row), so it holds a prefix of what the context holds; what is beyond it is the part of a lookup
    draft not yet checked (the row failed in take_draft), never a token the table counts that the context lacks.
    Cut back to the table's length, the two agree whatever the row's work had done, and the next turn reuses
    the history as it would after a normal end. Only where they cannot be made to agree (the cut itself fails,
    the context holds less than the table) is the context blanked."""
    log.exception("request %s (%s) failed in its own work after a step; the other requests go on", row.job.id,
                  row.job.api)
    reason = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    sched.last_error = reason
    _agree(sched, row.ctx)
    # not running: the failure was in its own end's bookkeeping after `release`, which posts its answer whatever
    # that bookkeeping does (row_output.finish)
    if not sched.running(row):
        return
    try:
        row_output.finish(sched, row, "error", error=f"internal error: {reason}")
    except Exception:
        if sched.running(row):   # not even released: the step's catch-all ends it (and those beside it), as before
            raise
        # released and answered (finish posts its answer whatever its bookkeeping does): raised on, the failure
        # reached the catch-all, which failed every request beside it
        log.exception("request %s's error end failed in its bookkeeping too; it was answered", row.job.id)


def _agree(sched: Scheduler, ctx: int) -> None:
    """Cuts context `ctx` back to the tokens the slot table knows, or blanks it where that cannot be done."""
    known = len(sched.table[ctx].tokens)
    try:
        held = sched.engine.context_len(ctx)
        if held > known:
            sched.engine.truncate(ctx, known)
            held = sched.engine.context_len(ctx)
    except Exception:
        log.exception("context %s could not be cut back to the %d tokens the table knows; it is blanked",
                      sched.table[ctx].display_id(), known)
        held = -1
    if held != known:
        sched.table.invalidate(ctx)
