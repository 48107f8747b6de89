"""The scheduler: ONE worker thread drives the engine for every request (the continuous agenda).

Each step it admits waiting requests into free contexts, reads one chunk of one prompt (round robin),
then decodes one token for every generating row in a single `engine.decode(ctxs, tokens)` call, so a
long prompt never freezes the other streams; with lookup decoding (server/lookup.py) that call also
checks each row's guessed next tokens (`engine.extend`) and takes those the model samples itself.
A request alone runs on the solo path (main context, the full --ctx); with more in flight requests run
in slots chosen by the slot policy. A cancelled request (its client left) stops at the next step.
Handlers talk to it through `submit` and the job's events.

Not here: HTTP parsing (openai_api / anthropic_api), the policy's rules (slot_policy), the cache's
levels (server/cache). The slot table and the trace are in slots.py and placement.py. What the worker
calls out to: which context a waiting request gets (context_choice.py), starting it there, a cache restore
included (row_start.py), parking a history before it is overwritten (parking.py), the lookup-decoding
step (lookup_step.py), what a sampled token becomes and a request's end (row_output.py); a running
request's record is a Row (row.py). The policies it applies each step: which prompt pieces a step reads
(prompt_order.py), and when a step only decodes, the requests generating beside a prompt read getting their share
of the time (decode_share.py).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import threading
import time
from typing import Any

from strata.engine import EngineInterrupted
from strata.server import (
    context_choice,
    decode_share,
    editor_place,
    lookup,
    lookup_step,
    parking,
    prompt_order,
    prompt_scoring,
    row_failure,
    row_output,
    row_start,
    slot_policy,
    stop_progress,
)
from strata.server.errors import APIError
from strata.server.jobs import Job, Outbox
from strata.server.metrics import Metrics
from strata.server.placement import Placer, wall_of
from strata.server.row import Row
from strata.server.slots import MAIN, SlotTable, held_by_another, stop_order

log = logging.getLogger("strata.server.scheduler")

MIN_PREFILL_SLICE = 16        # tokens: below this a piece costs more in overhead than it saves in latency
# seconds after an editor's last code completion arrived during which prompts are read in time slices (the next
# keystroke's comes within them: llama.vscode and llama.vim send one as soon as the last is answered, Continue
# 350 ms after the last keystroke): one arriving during a whole --prefill-chunk piece of an agent's turn waited
# for it, 3-6 s at a 7K-token history on a loaded 2-core machine (fim_beside_agent, 2026-12-06)
EDITOR_ACTIVE_S = 3.0
# tokens a --solo-slice-ms piece of a prompt read alone keeps at least: smaller pieces read at a poorer rate (each
# reads the weights, and the history's KV, once): the default model on two cores read 64-token pieces at 0.85x of
# 512's rate at a 6K-token history (32: 0.58x), 128 at 0.99x (benchmarks/piece_rate.py, 2026-12-06)
SOLO_PIECE_MIN = 128
ENGINE_THREAD = "strata-engine"   # the worker's name (server/cli.py looks for it at exit: a step given up)


class Scheduler:
    def __init__(self, engine: Any, *, queue_limit: int, prefill_chunk: int, metrics: Metrics,
                 policy_cfg: slot_policy.PolicyConfig, cache: Any = None, timeline: Any = None,
                 prefill_slice_ms: float = 250.0, mixed_piece: int = 64,
                 lookup_cfg: lookup.LookupConfig | None = None, cache_reuse: int = 0,
                 prompt_order_name: str = "shortest-first", solo_slice_ms: float = 1000.0,
                 decode_share_of_time: float = decode_share.DECODE_SHARE) -> None:
        self.engine = engine
        n_slots = int(getattr(engine, "n_slots", 0))
        slot_ctx = engine.context_capacity(1) if n_slots else 0
        self.table = SlotTable(engine.context_capacity(MAIN), n_slots, slot_ctx, int(getattr(engine, "n_groups", 1)))
        self.placer = Placer(self.table, policy_cfg)
        # cache hits held while a request is placed, until it has started (parking.displace_main): released
        # between main's park and the restore, the hit made room for that park and was gone before it was read
        self.start_holds = contextlib.ExitStack()
        self.queue_limit = queue_limit
        self.chunk = prefill_chunk
        self.slice_s = prefill_slice_ms / 1000.0
        self.solo_slice_s = solo_slice_ms / 1000.0    # a prompt read alone: the most a request arriving waits (0: a chunk)
        # Prompt tokens in one mixed step (Engine.step): enough rows that the products run at their
        # prefill rate, few enough that the streams riding along get a token every ~0.1 s on two
        # cores, and never more than the time slice holds at the measured rate (a deep context reads
        # slower: 64 tokens at 15K history took 720 ms on two cores, 16 took 208 ms).
        # 0 turns mixed steps off (prompt pieces and decode steps apart).
        self.mixed_piece = mixed_piece
        # which prompt a step with several being read gives its tokens first (server/prompt_order.py, --prompt-order)
        self.prompt_order = prompt_order.check_order(prompt_order_name)
        # the time requests generating beside a prompt read get in decode-only steps (server/decode_share.py,
        # --decode-share), and the seconds of prompt and decode-only steps since they began generating beside it
        self.decode_share = decode_share.check_share(decode_share_of_time)
        self._beside_s = [0.0, 0.0]
        # --cache-reuse: a code completion moves runs of at least this many tokens of its context's history into
        # place instead of reading them (server/cache_reuse.py); 0 where the engine cannot move KV (it says why)
        refusal = getattr(engine, "shift_refusal", "this engine cannot move KV cells")
        self.cache_reuse = cache_reuse if refusal is None else 0
        if cache_reuse and refusal is not None:
            log.info("--cache-reuse %d is off: %s; code completions read what they do not share", cache_reuse,
                     refusal)
        self.lookup = lookup_cfg or lookup.LookupConfig()
        self._parked_at_stop = False
        self.prefill_rate = 0.0        # tokens/s of recent prefill pieces (EMA), sizes the slices
        self._reading = 0              # prompt tokens the engine call under way reads (a stop waits for it)
        self._gave_up = False          # a stop gave the step under way up as stuck (a later one does not wait)
        self._pieces_read = 0          # prompt pieces and calls ended: a stop times what follows one from its end
        self._in_call = False          # a session save or restore (Scheduler.call) runs: a stop waits for it too
        self.metrics = metrics
        self.cache = cache
        self.timeline = timeline
        self.eos = set(getattr(engine, "eos_token_ids", ()) or ())
        self.requests: collections.deque[dict] = collections.deque(maxlen=50)
        self._inbox: collections.deque[Job] = collections.deque()
        # (fn, future, the context it needs idle or None): a session save or restore waits for its context's request
        # (or rebuild) to end in _deferred, and runs before any request is placed again (Scheduler.call)
        self._calls: collections.deque[tuple[Any, concurrent.futures.Future, int | None]] = collections.deque()
        self._deferred: list[tuple[Any, concurrent.futures.Future, int | None]] = []
        self._waiting: collections.deque[Job] = collections.deque()
        self._rows: dict[int, Row] = {}
        self._outbox = Outbox()        # events of the current step, delivered when it ends
        self._cv = threading.Condition()
        self._n_pending = 0            # submitted, not yet running (inbox + waiting)
        self._stopping = False
        self._rr = 0
        self._scored_turn = 0          # prompt steps while a scored prompt is read (its turns among the others)
        self._completion_at = -EDITOR_ACTIVE_S   # when the last code completion was submitted (time.monotonic)
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    # ----- loop side -----

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=ENGINE_THREAD, daemon=True)
        self._thread.start()

    def stop(self, every_s: float = stop_progress.PROGRESS_EVERY_S) -> None:
        """Ends the worker after the step under way, then keeps the live histories. A long prompt piece
        (a big model on the CPU) is waited for as long as its measured rate says, with a line every
        `every_s` (the app ends a server that says nothing of its stop for 15 s); past that the call is
        taken as stuck and the contexts are left alone."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        # the step under way is not waited for: its forward is given up at its next layer, none of its tokens added,
        # every context holding what it held before it (a 512-token piece at a 14K-token history held a stop 10.5 s
        # on two loaded cores: benchmarks/stop_phases.py). Calls (a session save writing) compute nothing: waited for
        self._interrupt_engine(True)
        if self._thread is not None and self._gave_up:   # the second stop at shutdown: not a second wait
            self._thread.join(0)
            if self._thread.is_alive():
                return
        elif self._thread is not None:
            began, pieces = time.monotonic(), self._pieces_read
            while True:
                self._thread.join(every_s)
                if not self._thread.is_alive():
                    break
                now = time.monotonic()
                if self._pieces_read != pieces:   # a piece ended: what follows it gets its own allowance
                    began, pieces = now, self._pieces_read
                waited = now - began
                # a call reading prompt pieces (a session rebuilt from its tokens) is waited for as a piece is
                tokens, in_call = self._reading, self._in_call and not self._reading
                allowance = (stop_progress.CALL_WAIT_S if in_call
                             else stop_progress.step_wait_s(tokens, self.prefill_rate))
                if waited >= allowance:
                    log.warning("stopping: the engine step under way has not ended after %.0f s; the histories in "
                                "the contexts are not kept", waited)
                    self._gave_up = True
                    return          # still inside an engine call: leave the contexts alone
                save = getattr(self.cache, "saving", None) if in_call else None   # how far, when it is a save
                log.info("%s", stop_progress.step_line(tokens, waited, in_call, save))
        self._interrupt_engine(False)   # the worker has ended: the engine computes again for whoever holds it next
        self._park_live_histories()

    def _interrupt_engine(self, on: bool) -> None:
        interrupt = getattr(self.engine, "interrupt", None)   # a test's stand-in engine may have none
        if interrupt is not None:
            interrupt(on)

    def _park_live_histories(self) -> None:
        """At a clean stop, the histories still in the engine's contexts (the solo conversation in main,
        the slots') go to the cache, which then hands them to its disk level: after a restart their next
        turn restores them instead of reading them again. Only with a disk level (RAM does not outlive
        the process)."""
        if self._parked_at_stop or self.cache is None or not self.cache.keeps_across_restarts():
            return
        self._parked_at_stop = True       # stop() runs twice at shutdown (aiohttp's on_shutdown, then cleanup)
        contexts = self.table.contexts
        unkept = {ctx for ctx in range(len(contexts)) if contexts[ctx].tokens and not self.cache.disk_takes(ctx)}
        # queued whole before any is written: the cache writes only those its disk levels keep (cache.stop_writes)
        with self.cache.stop_writes():
            for ctx in stop_order(contexts):   # least recently used first: a full disk level keeps the latest
                if not held_by_another(contexts, ctx, unkept):
                    self.park_to_cache(ctx, "server stopped")

    def submit(self, job: Job) -> None:
        """Hands a job to the worker; 503 with Retry-After when the queue is full."""
        with self._cv:
            if self._stopping:
                raise _stopping_error()
            idle = not self._rows and not self._n_pending   # nothing running or queued: it would run alone
            # copies: the worker changes rows and waiting jobs outside this lock (a copy is made at once under the GIL)
            beside = not idle and context_choice.submitted_beside_completions(
                self.table, dict(self._rows), list(self._waiting) + list(self._inbox), job)
            if self._n_pending >= self.queue_limit + context_choice.free_for(self.table, job, idle, beside,
                                                                                   self.placer.cfg.editor_main):
                self.metrics.add_rejected("queue_full")
                n = self.queue_limit       # the server's --queue, named for whoever runs it
                raise APIError(503, f"the queue is full ({n} request{'' if n == 1 else 's'} waiting, the server's "
                               f"--queue {n}); retry later",
                               headers={"Retry-After": "2"})
            self._n_pending += 1
            if job.completion:
                self._completion_at = time.monotonic()
            if self.timeline is not None:   # shared_tokens against the turns that arrived before it
                try:
                    self.timeline.arrived(job)
                except Exception:
                    log.exception("timeline write failed")
            self._inbox.append(job)
            self._cv.notify()

    def call(self, fn: Any, idle_ctx: int | None = None) -> concurrent.futures.Future:
        """Runs `fn()` on the worker thread between two steps (the engine is driven from that thread only). With
        `idle_ctx`, once that context runs no request and no rebuild: until then the call waits (not begun: its
        caller may cancel it), calls for that context after it wait behind it, and it runs at the first step that
        finds the context idle, before any waiting request is placed, so no request can take the context between
        one request's end and the call however busy the server is (llama.cpp's server defers a slot's save or
        restore the same way until the slot is idle)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._cv:
            if self._stopping:
                fut.set_exception(_stopping_error())
                return fut
            self._calls.append((fn, fut, idle_ctx))
            self._cv.notify()
        return fut

    def cancel(self, job: Job) -> None:
        job.cancelled = True
        with self._cv:
            self._cv.notify()

    # ----- for what the worker calls out to (row_output, lookup_step) -----

    def post(self, job: Job, kind: str, payload: Any) -> None:
        """An event for `job`'s handler ("start", "text", "logprobs", "done"), delivered when the step ends."""
        self._outbox.post(job, kind, payload)

    def running(self, row: Row) -> bool:
        """Whether `row` still runs (a token it took may have ended it)."""
        return self._rows.get(row.ctx) is row

    def release(self, row: Row) -> None:
        """Takes ended `row` off the running ones (its context is free for the next step's choice)."""
        del self._rows[row.ctx]

    @property
    def stopping(self) -> bool:
        """Whether a stop has begun (a cache restore under way ends at its next piece once it has)."""
        return self._stopping

    @property
    def gave_up(self) -> bool:
        """Whether a stop gave the engine call under way up as stuck (nothing more will come of it)."""
        return self._gave_up

    @property
    def pieces_read(self) -> int:
        """Prompt pieces and calls ended so far: a caller waiting on a call sees the worker make progress."""
        return self._pieces_read

    @property
    def queue_depth(self) -> int:
        return self._n_pending

    @property
    def in_flight(self) -> int:
        """Requests holding a context: running, or starting there (a copy or a cache restore, before their
        row exists; a restore from disk can take seconds, and it counted as nothing, neither queued nor here)."""
        return sum(1 for c in list(self.table.contexts) if c.busy_job is not None)

    # ----- worker thread -----

    def _run(self) -> None:
        while True:
            with self._cv:
                while not (self._stopping or self._inbox or self._rows or self._waiting or self._calls
                           or self._deferred_due()):
                    self._cv.wait(0.5)
                if self._stopping:
                    break
                self._waiting.extend(self._inbox)
                arrived = list(self._inbox)
                self._inbox.clear()
                calls = self._deferred + list(self._calls)
                self._calls.clear()
            self._run_calls(calls)
            try:
                self._drop_cancelled()
                # after the drop (a completion its client left ends cancelled, not answered for the call), before
                # the deferred calls run again below: they run in this pass
                self._yield_to_calls()
                # an answer ended there (a completion past its prompt time) goes out now, not after this step's
                # piece (~2 s of another prompt on two cores)
                self._outbox.flush()
                if self._deferred:         # a request its client left freed a context a call waits for: the call first
                    self._run_calls(self._deferred)
                self._align(arrived)
                if not self._stopping:     # a stop that came during the calls starts no request
                    self._assign()
                if not self._stopping:     # nor any step once it came: not a prompt piece after a restore it ended
                    self._step()
            except EngineInterrupted:
                # the stop interrupted the step under way (stop: _interrupt_engine): none of its tokens were added and
                # the table was not told of them, so every context holds the history it held before that step, kept
                break
            except Exception as e:  # a bug or an engine failure: fail the running rows, keep serving
                # (a forward that failed added no row's token; one row's own work after a forward that succeeded
                # is guarded where the steps run it, and fails that row alone: row_failure.py)
                log.exception("scheduler step failed")
                self.last_error = str(e)
                for row in list(self._rows.values()):
                    self.table.invalidate(row.ctx)
                    row_output.end_anyway(self, row, "error", f"internal error: {e}")
            self._outbox.flush()
        for row in list(self._rows.values()):
            row_output.end_anyway(self, row, "cancelled", "the server is stopping")
        for _, fut, _ in self._deferred + list(self._calls):   # a session save or restore waiting: told why, as a request is
            if fut.set_running_or_notify_cancel():
                fut.set_exception(_stopping_error())
        with self._cv:             # submit refuses new jobs once stopping; take what came before that
            queued = list(self._waiting) + list(self._inbox)
        for job in queued:
            self._pending_done()
            row_output.end_unstarted(self, job, "cancelled", "the server is stopping", "the server is stopping")
        self._waiting.clear()
        self._inbox.clear()
        self._outbox.flush()

    def _run_calls(self, calls: list[tuple[Any, concurrent.futures.Future, int | None]]) -> None:
        """Runs `calls` in order; one whose context is busy (or behind another waiting for it) is kept for a later
        step in self._deferred, one its caller gave up meanwhile is dropped."""
        waiting: list[tuple[Any, concurrent.futures.Future, int | None]] = []
        held: set[int] = set()
        for fn, fut, ctx in calls:
            if self._stopping:   # taken with one under way when the stop came: refused as a waiting one is
                if fut.set_running_or_notify_cancel():   # False: its caller gave it up already
                    fut.set_exception(_stopping_error())
                continue
            if ctx is not None and (ctx in held or self._busy(ctx)):
                if not fut.cancelled():
                    waiting.append((fn, fut, ctx))
                    held.add(ctx)
                continue
            if fut.set_running_or_notify_cancel():
                self._in_call = True
                try:
                    fut.set_result(fn())
                except BaseException as e:
                    fut.set_exception(e)
                finally:
                    self._in_call = False
                    self._pieces_read += 1
        self._deferred = waiting

    def _yield_to_calls(self) -> None:
        """Ends the code completions running in contexts a session save or restore waits for (editor_place's rule),
        answered with what they wrote (nothing, mid-prompt), so the call runs in this pass: one keystroke's
        completion after another, or one of an editor's pause reading for a minute, held a user's restore in main
        until its 30 s wait answered 503 (the session-33 agent soak)."""
        waited = [ctx for _, fut, ctx in self._deferred if ctx is not None and not fut.cancelled()]
        if not waited:
            return
        running = {ctx: row.job.completion for ctx, row in self._rows.items()}
        for ctx in editor_place.yield_to_session_calls(running, waited):
            row = self._rows[ctx]
            log.info("request %s (%s, a code completion) in context %s ends: a session save or restore waits for "
                     "the context", row.job.id, row.job.api, self.table[ctx].display_id())
            row_output.finish(self, row, "length")

    def _busy(self, ctx: int) -> bool:
        """Whether context `ctx` runs a request or a rebuild (an out-of-range one is not: its call says so)."""
        return 0 <= ctx < len(self.table.contexts) and self.table[ctx].busy_job is not None

    def _deferred_due(self) -> bool:
        """Whether a waiting call can run now or was given up (the worker wakes for it; under self._cv)."""
        return any(fut.cancelled() or not self._busy(ctx) for _, fut, ctx in self._deferred if ctx is not None)

    def _drop_cancelled(self) -> None:
        for job in [j for j in self._waiting if j.cancelled]:
            self._waiting.remove(job)
            self._pending_done()
            row_output.end_unstarted(self, job, "cancelled", "its client left while it waited")
        self._drop_cancelled_rows()

    def _drop_cancelled_rows(self) -> None:
        """Ends the running requests whose clients left (also mid-step: one that left during a prompt piece
        takes no part in the decode after it), and the completions whose prompts outlasted their
        t_max_prompt_ms (Row.prompt_overdue: nothing answered, what was read kept for the next keystroke)."""
        for row in [r for r in self._rows.values() if r.job.cancelled]:
            row_output.finish(self, row, "cancelled")
        now = time.monotonic()
        for row in [r for r in self._rows.values() if r.prompt_overdue(now)]:
            row_output.finish(self, row, "length")

    def _pending_done(self) -> None:
        with self._cv:
            self._n_pending -= 1

    # ----- waiting requests into contexts -----

    def _align(self, jobs: list[Job]) -> None:
        """The arrived prompts that go on as a context's history in other tokens take its tokens (once, before
        any is placed: context_choice.align_arrival). A failure leaves the prompt as sent."""
        for job in jobs:
            try:
                gained = context_choice.align_arrival(self.table, getattr(self.engine, "tokenizer", None), job,
                                                      self.cache)
                if gained:
                    self.metrics.add_aligned(gained)
            except Exception:
                log.exception("aligning request %s's prompt with the contexts' histories failed", job.id)

    def _assign(self) -> None:
        """Moves waiting jobs into free contexts: alone -> main (solo path); else a slot by the policy."""
        for job in list(self._waiting):
            if context_choice.waits_for_shared_read(self.table, self._rows.values(), job):
                continue
            with self.start_holds:
                self._assign_one(job)

    def _assign_one(self, job: Job) -> None:
        try:
            ctx = context_choice.choose_context(self, job, alone=not self._rows and len(self._waiting) == 1)
        except Exception as e:   # a bug or an engine failure placing it: this request fails, once
            self._waiting.remove(job)
            self._pending_done()
            self._fail_unstarted(job, None, e)
            return
        if ctx is None:
            return
        self._waiting.remove(job)
        self._pending_done()
        try:
            self._start_row(job, ctx)
        except Exception as e:
            self._fail_unstarted(job, ctx, e)

    def _fail_unstarted(self, job: Job, ctx: int | None, e: Exception) -> None:
        """Answers a request that could not be placed or started with an internal error; the context it
        was given (if any) is left blank and free. (Escaping to the step's handler, such a failure failed
        the requests already running instead and left this one queued, to be raised again: a park whose
        copy always failed looped thousands of times a second.)"""
        log.exception("could not start request %s", job.id)
        if ctx is not None:
            self.table.invalidate(ctx)
            self.table[ctx].busy_job = None
        self.last_error = str(e)
        row_output.end_unstarted(self, job, "error", "it could not be started", f"internal error: {e}")

    def park_to_cache(self, ctx: int, reason: str) -> None:
        """Hands the history `ctx` holds to the conversation cache before it is overwritten (worker thread),
        once (parking.py)."""
        parking.park_to_cache(self, ctx, reason)

    def _start_row(self, job: Job, ctx: int) -> None:
        row = row_start.start(self, job, ctx)
        n, prompt = row.reused, job.prompt
        self._rows[ctx] = row
        self._outbox.post(job, "start", {"cached_tokens": n, "prompt_tokens": len(prompt), "source": row.source})
        log.debug("request %s in context %s: %d of %d prompt tokens reused (%s)", job.id, ctx, n, len(prompt),
                  row.source)

    # ----- one step of the agenda -----

    def _step(self) -> None:
        prefilling = [r for r in self._rows.values() if r.phase == "prefill"]
        decoding = [r for r in self._rows.values() if r.phase == "decode"]
        # requests generating beside a prompt read get --decode-share of the time in decode-only steps; a code
        # completion's prompt keeps its slices (latency-critical, bound by its t_max_prompt_ms)
        beside = bool(prefilling and decoding) and not any(r.job.completion for r in prefilling)
        if not beside:
            self._beside_s = [0.0, 0.0]
        t0 = time.monotonic()
        if beside and decode_share.decode_turn(*self._beside_s, self.decode_share):
            self._decode_rows(decoding)
            self._beside_s[1] += max(time.monotonic() - t0, 1e-6)   # a step takes time: never 0, never a loop
            return
        self._prompt_step(prefilling, decoding)
        if beside:
            self._beside_s[0] += max(time.monotonic() - t0, 1e-6)

    def _prompt_step(self, prefilling: list[Row], decoding: list[Row]) -> None:
        scored = [r for r in prefilling if r.job.prompt_logprobs is not None]
        if scored:
            # a scored prompt's piece is read on its own (Engine.extend keeps each position's logits, a mixed
            # step the last only), every other prompt step where other prompts are read too
            self._scored_turn += 1
            if len(scored) < len(prefilling) and self._scored_turn % 2:
                prefilling = [r for r in prefilling if r.job.prompt_logprobs is None]
            else:
                prefilling, decoding = [scored[self._scored_turn // 2 % len(scored)]], []
        if prefilling and self.mixed_piece > 0 and (decoding or len(prefilling) > 1):
            self._mixed_step(prefilling, decoding)
            return
        if prefilling:
            row = prefilling[self._rr % len(prefilling)]
            self._rr += 1
            self._prefill_chunk(row)
            self._drop_cancelled_rows()    # clients that left while the piece was read (an editor's typing on)
        decoding = [r for r in self._rows.values() if r.phase == "decode"]
        if decoding:
            self._decode_rows(decoding)

    def _decode_rows(self, decoding: list[Row]) -> None:
        """The next token of each generating row (or lookup decoding's guesses checked), prompts being read waiting."""
        for r in self._rows.values():
            if r.phase == "prefill":
                r.steps_during_prefill += 1
        guessing = self.lookup.enabled and len(decoding) <= self.lookup.max_rows
        # a held answer's next tokens are its constraint's, the row's own work: one failing ends that row alone
        drafting = guessing or any(row_failure.guarded(self, r, r.forced)[1] for r in decoding)
        decoding = [r for r in decoding if self.running(r)]
        if decoding and not (drafting and lookup_step.run(self, decoding, guessing)):
            decoding = [r for r in decoding if self.running(r)]   # and so does one whose draft failed
            if decoding:
                self._decode_step(decoding)

    def slice_tokens(self) -> int:
        """Tokens of the next prefill piece: a solo piece (_solo_piece) when nobody is generating and no code
        completion waits, runs or came in the last EDITOR_ACTIVE_S, else about `slice_s` seconds of prefill at the measured
        rate (the continuous agenda's time slice; in a mixed step, all its pieces together). A completion is
        latency-critical (an editor bounds its prompt's time, t_max_prompt_ms): beside an agent reading its
        turn in 512-token pieces (~2 s each at a 7K-token history on two cores) it waited a whole piece to
        start and each step it shared took as long."""
        sliced = any(r.phase == "decode" or r.job.completion for r in self._rows.values()) \
            or any(j.completion for j in self._waiting) or time.monotonic() - self._completion_at < EDITOR_ACTIVE_S
        return self._slice_at_rate() if sliced else self._solo_piece()

    def _solo_piece(self) -> int:
        """A piece of a prompt read with nothing else running or waiting: where there are slots for a request arriving
        meanwhile, about `solo_slice_s` of prefill at the measured rate (SOLO_PIECE_MIN tokens at least), so it (an
        agent's side request, the first after a quiet spell too) waits about that long for the engine, not a whole
        --prefill-chunk piece (512 tokens took 5-9 s at a 7K-token history on two loaded cores); else, with
        --solo-slice-ms 0 or before a rate is measured, the whole chunk."""
        if self.solo_slice_s <= 0 or not self.table.slots or self.prefill_rate <= 0:
            return self.chunk
        return max(min(SOLO_PIECE_MIN, self.chunk), min(self.chunk, int(self.prefill_rate * self.solo_slice_s)))

    def _slice_at_rate(self) -> int:
        """Tokens `slice_s` seconds of prefill hold at the measured rate (--prefill-chunk before one is measured)."""
        if self.prefill_rate <= 0:
            return self.chunk
        return max(MIN_PREFILL_SLICE, min(self.chunk, int(self.prefill_rate * self.slice_s)))

    def _mixed_step(self, prefilling: list[Row], riders: list[Row]) -> None:
        """The mixed step (Engine.step): a piece of each prompt being read, as many as fit, and the
        next token of every generating row, in one forward, so all of them share one weight read and
        the streams keep moving while prompts are read."""
        budget = self.engine.max_rows - len(riders)
        per_row = self.mixed_piece if riders else max(self.mixed_piece, self.chunk // len(prefilling))
        # the streams riding along wait for the whole step, and so does a completion reading: pieces keep to the slice
        if riders or any(r.job.completion for r in prefilling):
            budget = min(budget, self.slice_tokens())
        start = self._rr % len(prefilling)
        self._rr += 1
        left = [len(r.job.prompt) - r.pos for r in prefilling]
        caps = [min(per_row, self.completion_piece(r)) for r in prefilling]
        planned = prompt_order.plan(left, caps, start, order=self.prompt_order, budget=budget,
                                    slice_tokens=self._slice_at_rate(),
                                    passed_over=[r.steps_passed_over for r in prefilling])
        read = {i for i, _ in planned}
        for i, r in enumerate(prefilling):
            r.steps_passed_over = 0 if i in read or left[i] <= 0 else r.steps_passed_over + 1
        pieces = [(prefilling[i], prefilling[i].job.prompt[prefilling[i].pos: prefilling[i].pos + n])
                  for i, n in planned]
        done = [r for r in prefilling if r.pos >= len(r.job.prompt)]   # nothing left to read (its logits are there)
        if riders:
            for r in prefilling:
                r.steps_during_prefill += 1
        tokens = [int(r.next_token) for r in riders]
        t0 = time.monotonic()
        self._reading = sum(len(part) for _, part in pieces)
        try:
            logits = self.engine.step([(r.ctx, part) for r, part in pieces], [r.ctx for r in riders], tokens)
        finally:
            self._reading = 0
            self._pieces_read += 1
        dt = time.monotonic() - t0
        n_rows = sum(len(part) for _, part in pieces) + len(riders)
        if riders:
            self.metrics.add_decode(dt * len(riders) / n_rows, len(riders))
        for i, rider in enumerate(riders):
            self.table.extend(rider.ctx, [tokens[i]])
            row_failure.guarded(self, rider, self._take_token, rider, logits[i])
        for row, part in pieces:
            row_failure.guarded(self, row, self._after_piece, row, part, dt * len(part) / n_rows)
        for row in done:
            row_failure.guarded(self, row, self._after_piece, row, [], 0.0)

    def completion_piece(self, row: Row) -> int:
        """The most prompt tokens a piece of a code completion reads: about a time slice (`slice_s`) at the measured
        prefill rate, and no more than its t_max_prompt_ms has left, so an editor's request whose client left (the
        next keystroke) or whose bound passed ends within a short piece, not one of --prefill-chunk tokens (512 took
        ~2 s beside an agent on two cores: completions bound to 500 ms came back after 2.0-2.6 s). Any other
        request, or before a rate is measured: --prefill-chunk."""
        if not row.job.completion or self.prefill_rate <= 0:
            return self.chunk
        left = self.slice_s
        if row.job.max_prompt_s > 0:
            left = min(left, row.job.max_prompt_s - (time.monotonic() - row.started))
        return max(MIN_PREFILL_SLICE, int(self.prefill_rate * left))

    def _prefill_chunk(self, row: Row) -> None:
        """Reads the next piece of row's prompt on its own (Engine.prefill; a scored prompt's with every
        position's logits, Engine.extend, scored before the piece is counted read)."""
        top = row.job.prompt_logprobs
        n = min(self.slice_tokens(), self.completion_piece(row))
        if top is not None:
            n = min(n, prompt_scoring.SCORE_PIECE_ROWS, self.engine.max_logit_rows)
        part = row.job.prompt[row.pos: row.pos + n]
        t0 = time.monotonic()
        logits = None
        if part:
            self._reading = len(part)
            try:
                if top is not None:
                    logits = self.engine.extend([(row.ctx, part)])
                else:
                    self.engine.prefill(row.ctx, part, chunk=self.chunk)
            finally:
                self._reading = 0
                self._pieces_read += 1
        if logits is not None and not row_failure.guarded(self, row, self._score_piece, row, logits)[0]:
            return
        row_failure.guarded(self, row, self._after_piece, row, part, time.monotonic() - t0)

    def _score_piece(self, row: Row, logits: Any) -> None:
        """Row's prompt entries for the piece read from row.pos (prompt_scoring.py)."""
        prompt = row.job.prompt
        if row.pos == 0:
            row.prompt_logprobs.append(prompt_scoring.first_entry(prompt))
        row.prompt_logprobs += prompt_scoring.piece_entries(logits, prompt, row.pos, row.job.prompt_logprobs)

    def _after_piece(self, row: Row, part: list[int], dt: float) -> None:
        """Bookkeeping after `part` of row's prompt was read in `dt` seconds: the slot table, rates,
        and, once the whole prompt is in, the first token."""
        prompt = row.job.prompt
        # a scored prompt's pieces read slower (small, every position's logits): not the rate other prompts are read at
        ordinary = row.job.prompt_logprobs is None
        if part:
            self.table.extend(row.ctx, part)
            row.pos += len(part)
            row.prefill_chunks += 1
            if ordinary:
                self._measure_prefill(len(part), dt)
        row.prefill_s += dt
        self.metrics.add_prefill(dt)
        self._publish_prefill_rate(row)
        if row.job.cancelled:      # its client left during the piece: no first token is sampled for a client gone
            row_output.finish(self, row, "cancelled")
            return
        if row.pos < len(prompt):
            return
        if row.job.prompt_logprobs is not None and row.job.stream:   # a stream echoes its scored prompt first
            self.post(row.job, "prompt_logprobs", list(row.prompt_logprobs))
        logits = self.engine.logits(row.ctx)
        read = len(prompt) - row.reused
        if row.prefill_s > 0 and read >= 64 and ordinary:
            rate = read / row.prefill_s
            self.placer.prompt_rate_tps = rate if not self.placer.prompt_rate_tps else (
                0.8 * self.placer.prompt_rate_tps + 0.2 * rate)
        row.phase = "decode"
        self.table[row.ctx].phase = "decode"
        if row.max_tokens <= 0:
            row_output.finish(self, row, "length")
            return
        self._take_token(row, logits)

    def _take_token(self, row: Row, logits: Any) -> None:
        """Samples row's next token from `logits` and hands it on (row_output.accept): the row's own work after a
        forward, which the steps run guarded (row_failure.guarded: a failure there ends that row alone)."""
        row_output.accept(self, row, int(row.sampler.sample(logits, row.generated)), logits)

    def _publish_prefill_rate(self, row: Row) -> None:
        """The slot's live prefill_tps: prompt tokens read per second of prefill over the recent window."""
        row.prefill_window.add(row.prefill_s, row.pos)
        rate = row.prefill_window.rate()
        if rate is not None:
            self.table[row.ctx].prefill_tps = rate

    def read_piece(self, ctx: int, part: list[int]) -> None:
        """Reads `part` into context `ctx` outside a request, on the worker thread (a Scheduler.call: a session an
        older Strata saved, read again from its tokens by session_rebuild.py), as a request's prompt piece is
        read: a stop waits for it as long as the measured prefill rate says, and it counts toward that rate."""
        t0 = time.monotonic()
        self._reading = len(part)
        try:
            self.engine.prefill(ctx, part, chunk=self.chunk)
        except EngineInterrupted:   # by the stop (none of the piece read): its caller is told so, as a refused call is
            raise _stopping_error() from None
        finally:
            self._reading = 0
            self._pieces_read += 1
        self.table.extend(ctx, part)
        self._measure_prefill(len(part), time.monotonic() - t0)

    def _measure_prefill(self, n: int, dt: float) -> None:
        if dt > 0 and n >= MIN_PREFILL_SLICE:
            rate = n / dt
            self.prefill_rate = rate if not self.prefill_rate else 0.7 * self.prefill_rate + 0.3 * rate

    def _decode_step(self, rows: list[Row]) -> None:
        ctxs = [r.ctx for r in rows]
        tokens = [int(r.next_token) for r in rows]
        t0 = time.monotonic()
        logits = self.engine.decode(ctxs, tokens)
        self.metrics.add_decode(time.monotonic() - t0, len(rows))
        for i, row in enumerate(rows):
            self.table.extend(row.ctx, [tokens[i]])
            row_failure.guarded(self, row, self._take_token, row, logits[i])

    # ----- views (any thread; copies of plain data) -----

    def slots_view(self) -> list[dict]:
        now = time.monotonic()
        out = []
        for c in list(self.table.contexts):
            entry: dict[str, Any] = {
                "id": c.display_id(), "group": c.group if c.id != MAIN else None, "state": c.state,
                "tokens": len(c.tokens), "capacity": c.capacity, "conversation": c.conversation or None,
                "last_use": wall_of(c.last_use), "reused_tokens": c.reused_tokens,
                "prefill_tps": round(c.prefill_tps, 1) if c.prefill_tps else None,
                "decode_tps": round(c.decode_tps, 1) if c.decode_tps else None,
            }
            if c.tokens and c.superseded:
                entry["superseded"] = True     # a copy whose conversation went on elsewhere: worth nothing
            # an idle slot's protection and value (seed 000): a slot in use has neither (the policy never weighs
            # it; its age starts again when the use ends): before, it showed its previous use's, 0 s and 0.0 for a
            # history that use had left expired while it read and answered a new turn
            if c.id != MAIN and c.tokens and c.last_use is not None and not c.blank and c.busy_job is None:
                age = now - c.last_use
                cfg = self.placer.cfg
                entry["protection_left_s"] = round(max(0.0, slot_policy.protection_s(len(c.tokens), cfg) - age), 2)
                entry["value"] = round(slot_policy.value(len(c.tokens), age, cfg), 6)
            out.append(entry)
        return out


def _stopping_error() -> APIError:
    """Why work handed to a stopping scheduler is not done: the same 503 a request submitted then gets."""
    return APIError(503, "the server is stopping", headers={"Retry-After": "5"})
