"""One request's own work failing after a forward that succeeded (here its sampler raising) ends that request
alone, with an internal error naming the failure: the requests running beside it in the same step finish with
the same greedy text as without the fault, their contexts keep their histories for their next turns, every
context holds what the slot table says it holds, and the server goes on. Before, the step's catch-all failed
every running request with the one request's error and blanked every context.

In every kind of step a row samples in: a decode step, a mixed step's riders and its prompt pieces' first tokens,
a prompt piece read on its own (its first token), lookup decoding's draft check; and in its own work before a
forward: a held answer's next tokens (its constraint's `upcoming`), lookup decoding's draft made from its tokens.
The one injected fault is in the victim request's own state (its sampler, its constraint, its token history), swapped
on the worker thread, inside the forward of the chosen kind that includes its context, for one that raises at its
next use; everything else is the live tiny server."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import pytest

from .conftest import TINY_CTX
from .live import LiveServer, run_together

FAULT = "sampling failed (injected)"
# three requests sent together; the middle one is the victim. Long enough to be worth reusing on a next turn.
PROMPTS = [[(i * k) % 300 + 60 for i in range(120)] for k in (7, 11, 13)]
LONG = [(i * 17) % 300 + 60 for i in range(700)]    # read in pieces beside the others (mixed steps)
# a prompt made of one repeated phrase: lookup decoding finds drafts in it (the tiny model's greedy text loops)
LOOPED = [[60 + (i % n) + k for i in range(120)] for k, n in ((0, 9), (100, 7), (200, 5))]
MAX_TOKENS = 24



def raising(*args: Any, **kw: Any) -> Any:
    raise RuntimeError(FAULT)


class Replaced:
    """A request's own object (`real`) with some of its attributes replaced (`attrs`), the rest its own."""

    def __init__(self, real: Any, **attrs: Any) -> None:
        self._real, self._attrs = real, attrs

    def __getattr__(self, name: str) -> Any:
        return self._attrs[name] if name in self._attrs else getattr(self._real, name)

    def __len__(self) -> int:
        return len(self._real)


class HeldTextFails:
    """A held answer's constraint whose next tokens cannot be made."""

    upcoming = staticmethod(raising)


def sampling_fails(row: Any) -> None:
    row.sampler = Replaced(row.sampler, sample=raising)


def held_text_fails(row: Any) -> None:
    row.sampler = Replaced(row.sampler, constraint=HeldTextFails())


def draft_fails(row: Any) -> None:
    row.history = Replaced(row.history, find_draft=raising)


# scenario: (server flags, prompts sent together (the victim second), the engine call that arms the fault, when: a
# predicate over (the victim's row, the call's arguments) that says this call is the one, and the fault)
SCENES: dict[str, tuple[dict, list[list[int]], str, Any, Any]] = {
    "decode step": (dict(mixed_piece=0, lookup_draft=0), PROMPTS, "decode",
                    lambda row, ctxs, *_: row.ctx in ctxs and len(row.generated) >= 3, sampling_fails),
    "piece read alone": (dict(mixed_piece=0, lookup_draft=0), PROMPTS, "prefill",
                         lambda row, ctx, *_: row.ctx == ctx, sampling_fails),
    "mixed step rider": (dict(mixed_piece=64, lookup_draft=0), PROMPTS + [LONG], "step",
                         lambda row, pieces, ctxs, *_: row.ctx in ctxs and len(row.generated) >= 2, sampling_fails),
    "mixed step piece": (dict(mixed_piece=64, lookup_draft=0), [LONG, PROMPTS[1], PROMPTS[0]], "step",
                         lambda row, pieces, *_: row.ctx in [c for c, _ in pieces], sampling_fails),
    "lookup draft": (dict(mixed_piece=64, lookup_draft=8, lookup_rows=4), LOOPED, "extend",
                     lambda row, pieces, *_: any(c == row.ctx and len(t) > 1 for c, t in pieces), sampling_fails),
    "held answer's next tokens": (dict(mixed_piece=0, lookup_draft=0), PROMPTS, "decode",
                                  lambda row, ctxs, *_: row.ctx in ctxs and len(row.generated) >= 3, held_text_fails),
    "lookup draft made": (dict(mixed_piece=64, lookup_draft=8, lookup_rows=4), LOOPED, "extend",
                          lambda row, pieces, *_: row.ctx in [c for c, _ in pieces], draft_fails),
}


class FaultOnOneRow:
    """The real engine, except that after the first call named `call` that `when` picks for the victim's row
    (the running request whose prompt ends with `victim`), `fault` breaks that row's own state."""

    def __init__(self, engine: Any, sched: Any, victim: list[int], call: str, when: Any, fault: Any) -> None:
        self._engine, self._sched, self._victim, self._call, self._when = engine, sched, victim, call, when
        self._fault = fault
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._engine, name)
        if name != self._call:
            return real

        def forward(*args: Any, **kw: Any) -> Any:
            out = real(*args, **kw)
            row = next((r for r in self._sched._rows.values() if r.job.prompt[-len(self._victim):] == self._victim),
                       None)
            if not self.armed and row is not None and self._when(row, *args):
                self._fault(row)
                self.armed = True
            return out
        return forward


def complete(url: str, prompt: list[int]) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
                                                     "ignore_eos": True}, timeout=120)


def serve(model: Any, flags: dict) -> LiveServer:
    # no conversation cache: a next turn's reuse can only come from the history its context kept
    return LiveServer(model=str(model), ctx=TINY_CTX, batch=4, slot_ctx=2048, threads=1, conversation_cache_mib=0,
                      **flags)


def together(server: LiveServer, prompts: list[list[int]]) -> list[httpx.Response]:
    return run_together(server, [lambda p=p: complete(server.url, p) for p in prompts])


def together_with_fault(server: LiveServer, prompts: list[list[int]], call: str, when: Any,
                        fault: Any) -> tuple[FaultOnOneRow, list[httpx.Response]]:
    """`together`, the victim (prompts[1]) broken by `fault` at the `call` that `when` picks."""
    sched = server.state.scheduler
    spy = FaultOnOneRow(sched.engine, sched, prompts[1], call, when, fault)
    sched.engine = spy
    try:
        return spy, together(server, prompts)
    finally:
        sched.engine = spy._engine


@pytest.mark.parametrize("scene", list(SCENES))
def test_one_rows_failure_fails_that_row_alone(tiny_model, scene):
    flags, prompts, call, when, fault = SCENES[scene]
    with serve(tiny_model, flags) as clean:
        expected = [r.json()["choices"][0]["text"] for r in together(clean, prompts)]
    with serve(tiny_model, flags) as server:
        sched = server.state.scheduler
        spy, got = together_with_fault(server, prompts, call, when, fault)
        assert spy.armed, f"{scene}: the victim never took part in a '{call}' call"
        victim = got.pop(1)
        assert victim.status_code == 500 and FAULT in victim.text and "internal error" in victim.text, victim.text
        for i, r in zip((0, 2, 3), got, strict=False):
            assert r.status_code == 200, r.text          # before: 500, the victim's error
            assert r.json()["choices"][0]["text"] == expected[i]
        for c in range(len(sched.table.contexts)):       # the victim's included: no unchecked draft left behind
            if sched.table.contexts[c].valid:
                assert sched.engine.context_tokens(c) == sched.table.contexts[c].tokens, c
        for i in (0, 2):                                 # a next turn reuses the history its context kept
            nxt = complete(server.url, prompts[i] + [5, 6, 7])
            assert nxt.status_code == 200, nxt.text
            assert nxt.json()["timings"]["cache_n"] >= len(prompts[i]), nxt.json()["timings"]   # before: 0
        assert sched.last_error is not None and FAULT in sched.last_error
        assert server.state.metrics.snapshot()["requests_total"].get("error") == 1
        assert httpx.get(server.url + "/health", timeout=30).status_code == 200
        again = complete(server.url, prompts[1])                      # the victim's prompt runs again,
        assert again.status_code == 200, again.text
        # from the history its own context kept (cut back to what the table knew, not blanked)
        assert again.json()["timings"]["cache_n"] >= len(prompts[1]) - 1, again.json()["timings"]
