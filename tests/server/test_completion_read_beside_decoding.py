"""A code completion's prompt being read beside an agent generating gets no decode-only steps in between
(--decode-share is for an agent's side request beside its long turn): the completion is latency-critical, bound by
its t_max_prompt_ms, so each step reads a slice of its prompt with the agent riding along, as before --decode-share.
With the share applied there too, half of the completion's read time would go to the agent's own steps. A live server
(real engine and scheduler, tiny model with Qwen2.5-Coder's FIM tokens), each engine call recorded and slowed a
little (test_infill_prompt_time.timed_fim_server)."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.server.test_infill_prompt_time import infill, timed_fim_server
from tests.server.test_scheduling import complete, ids, wait_for


class CallRecorder:
    """The real engine, each prompt token 1 ms and each decode step 5 ms slower; its calls in order: ('step',
    the contexts whose prompts it read) or ('decode', the contexts it decoded)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.calls: list[tuple[str, set[int]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def prefill(self, ctx: int, part: list[int], **kw: Any) -> Any:
        self.calls.append(("step", {ctx}))
        time.sleep(0.001 * len(part))
        return self._engine.prefill(ctx, part, **kw)

    def step(self, pieces: list, *a: Any, **kw: Any) -> Any:
        self.calls.append(("step", {ctx for ctx, part in pieces if part}))
        time.sleep(0.001 * sum(len(part) for _, part in pieces))
        return self._engine.step(pieces, *a, **kw)

    def decode(self, ctxs: list[int], *a: Any, **kw: Any) -> Any:
        self.calls.append(("decode", set(ctxs)))
        time.sleep(0.005)
        return self._engine.decode(ctxs, *a, **kw)


def test_a_completions_prompt_is_read_without_decode_only_steps_beside_an_agent(tiny_model_factory, tmp_path):
    with timed_fim_server(tiny_model_factory, tmp_path, CallRecorder) as (server, spy):
        sched = server.state.scheduler
        complete(server.url, ids(300, 3), 1)                                   # the prefill rate measured
        assert sched.prefill_rate > 0
        agent: dict[str, dict] = {}
        thread = threading.Thread(target=lambda: agent.__setitem__(
            "answer", complete(server.url, ids(20, 7), 1500, ignore_eos=True)))
        thread.start()
        try:
            wait_for(lambda: sum(1 for kind, _ in spy.calls if kind == "decode") >= 5)   # the agent generates
            spy.calls.clear()
            answer, _ = infill(server)                                          # ~1,500 prompt tokens, slices
            calls = list(spy.calls)
            assert sched.in_flight >= 1, "the agent ended before the completion was read: no step beside it"
        finally:
            thread.join(120)
    assert answer["tokens_predicted"] == 8 and answer["tokens_evaluated"] > 1000
    assert agent["answer"]["usage"]["completion_tokens"] == 1500
    agent_ctx = next(iter(next(ctxs for kind, ctxs in calls if kind == "decode")))
    reads = [i for i, (kind, ctxs) in enumerate(calls) if kind == "step" and ctxs - {agent_ctx}]
    assert len(reads) >= 3, calls                                              # read in slices, the agent riding
    between = calls[reads[0]: reads[-1] + 1]
    assert all(kind == "step" for kind, _ in between), \
        f"decode-only steps while the completion's prompt was read: {between}"
