"""llama.cpp's `t_max_prompt_ms` on `POST /infill`, acted on (llama.cpp reads it and does not): a completion whose
prompt is still being read that long after it began ends with nothing answered (`stop_type` "limit"), the part
read kept in its context, so the next keystroke's request goes on from there; a warm-up (`n_predict` 0, llama.vim's
sends t_max_prompt_ms 1) reads its whole prompt. A live server (real engine and scheduler, tiny model with
Qwen2.5-Coder's FIM tokens, prompt pieces of 64 tokens), each engine call slowed by 40 ms so that reading a
prompt takes about a second."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model
from tests.server.live import LiveServer

SLOW_S = 0.04
CODE = "".join(f"    value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, 120))   # ~1,500 tokens


class SlowEngine:
    """The real engine, each prompt piece and decode step 40 ms slower."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def prefill(self, *a: Any, **kw: Any) -> Any:
        time.sleep(SLOW_S)
        return self._engine.prefill(*a, **kw)

    def step(self, *a: Any, **kw: Any) -> Any:
        time.sleep(SLOW_S)
        return self._engine.step(*a, **kw)

    def decode(self, *a: Any, **kw: Any) -> Any:
        time.sleep(SLOW_S)
        return self._engine.decode(*a, **kw)


@pytest.fixture
def server(tiny_model_factory, tmp_path):
    with timed_fim_server(tiny_model_factory, tmp_path, SlowEngine, prefill_chunk=64) as (s, _):
        yield s


def infill(server: LiveServer, **fields: Any) -> tuple[dict, float]:
    body = {"input_prefix": "def f(value_0):\n" + CODE, "input_suffix": "\n    return value\n", "prompt": "    ",
            "n_predict": 8, "temperature": 0, **fields}
    t0 = time.monotonic()
    r = requests.post(server.url + "/infill", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json(), time.monotonic() - t0


def test_a_completion_past_its_prompt_time_answers_nothing_and_the_next_goes_on(server):
    a, took = infill(server, t_max_prompt_ms=300)
    assert a["content"] == "" and a["tokens_predicted"] == 0 and a["stop_type"] == "limit"   # before: 8 tokens
    assert took < 0.3 + 0.5                        # ended at a piece's end past 300 ms (the whole read: > 1 s)
    n = a["tokens_evaluated"]
    assert n > 1000
    b, _ = infill(server, t_max_prompt_ms=300)     # read on from where the first stopped
    assert b["timings"]["cache_n"] > 64
    c, _ = infill(server)                          # no bound: the rest is read and answered
    assert c["tokens_predicted"] == 8 and c["timings"]["cache_n"] > b["timings"]["cache_n"]


def test_a_warm_up_reads_its_whole_prompt_whatever_its_prompt_time(server):
    """llama.vim's warm-up of its chunks: n_predict 0 with t_max_prompt_ms 1."""
    w, took = infill(server, n_predict=0, t_max_prompt_ms=1, t_max_predict_ms=1)
    assert took > 0.5 and w["tokens_cached"] == w["tokens_evaluated"] > 1000
    again, _ = infill(server, t_max_prompt_ms=300)
    assert again["tokens_predicted"] == 8 and again["timings"]["prompt_n"] <= 2   # all of it was kept


class TokenTimedEngine:
    """The real engine, each prompt token 1 ms slower (about 1,000 tokens/s, a small model beside an agent on two
    cores), recording each prompt piece's length (alone or in a mixed step)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.pieces: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def prefill(self, ctx: int, part: list[int], **kw: Any) -> Any:
        self.pieces.append(len(part))
        time.sleep(0.001 * len(part))
        return self._engine.prefill(ctx, part, **kw)

    def step(self, pieces: list, *a: Any, **kw: Any) -> Any:
        """The mixed step: its prompt pieces, each recorded, at the same rate."""
        self.pieces.extend(len(part) for _, part in pieces)
        time.sleep(0.001 * sum(len(part) for _, part in pieces))
        return self._engine.step(pieces, *a, **kw)


@contextlib.contextmanager
def timed_fim_server(tiny_model_factory, tmp_path, slowed: type = TokenTimedEngine,
                     prefill_chunk: int = 2048, solo_slice_ms: float = 0.0) -> Iterator[tuple[LiveServer, Any]]:
    """A live server of a tiny FIM model (2 slots of 4,096) whose engine is wrapped in `slowed` (by default one that
    reads a prompt token in 1 ms more and records its `pieces`), and that wrapped engine. --solo-slice-ms 0 by default:
    a prompt read alone goes in whole --prefill-chunk pieces, so the pieces seen are the editor's slices."""
    plain = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
    with LiveServer(model=str(fim_model(plain, tmp_path / "coder.gguf")), ctx=4096, batch=2, slot_ctx=4096,
                    threads=1, prefill_chunk=prefill_chunk, conversation_cache_mib=0, solo_slice_ms=solo_slice_ms) as s:
        sched = s.state.scheduler
        real = sched.engine
        sched.engine = slowed(real)
        try:
            yield s, sched.engine
        finally:
            sched.engine = real


@pytest.fixture
def timed_server(tiny_model_factory, tmp_path):
    with timed_fim_server(tiny_model_factory, tmp_path) as pair:
        yield pair


def test_a_completions_pieces_keep_to_a_slice_and_to_what_its_bound_has_left(timed_server):
    """Alone a prompt is read in --prefill-chunk pieces (here 2,048: ~1.5 s for this one); a completion's pieces
    are about --prefill-slice-ms (250 ms) at the measured rate and no longer than its t_max_prompt_ms has left, so
    it ends close to its bound (before: after its one 1,500-token piece)."""
    server, spy = timed_server
    warm = requests.post(server.url + "/v1/completions", json={"model": "m", "prompt": "x = 1\n" * 150,
                                                               "max_tokens": 1}, timeout=60)
    assert warm.status_code == 200 and server.state.scheduler.prefill_rate > 0
    spy.pieces.clear()
    a, took = infill(server, t_max_prompt_ms=300)
    assert a["tokens_predicted"] == 0 and a["tokens_evaluated"] > 1000
    assert took < 0.3 + 0.35                       # before: ~1.5 s, the whole prompt in one piece
    assert spy.pieces and max(spy.pieces) <= 400   # ~250 tokens at ~1,000 tokens/s


def test_beside_a_completion_another_prompt_is_read_in_slices(timed_server):
    """A long prompt read alone goes in --prefill-chunk pieces (2,048 here); while a code completion runs, in
    pieces of about a slice at the measured rate, so the completion's turn comes round every slice (before: mixed
    steps of 1,024 + 1,024 tokens), and the completion's end past its bound goes out at once, not after the
    next step's piece (the rest of the other prompt, read within EDITOR_ACTIVE_S of the completion, in slices)."""
    server, spy = timed_server
    warm = requests.post(server.url + "/v1/completions", json={"model": "m", "prompt": "x = 1\n" * 150,
                                                               "max_tokens": 1}, timeout=60)
    assert warm.status_code == 200
    long_prompt = "".join(f"row_{i} = table[{i}] * {i}\n" for i in range(90))      # ~2,000 tokens, not code FIM
    spy.pieces.clear()
    alone = requests.post(server.url + "/v1/completions", json={"model": "m", "prompt": long_prompt, "max_tokens": 1},
                          timeout=60)
    assert alone.status_code == 200 and max(spy.pieces) > 1000
    done: dict = {}
    thread = __import__("threading").Thread(target=lambda: done.update(a=infill(server, t_max_prompt_ms=600)))
    spy.pieces.clear()
    thread.start()
    time.sleep(0.1)                                # the completion runs: the agent-like prompt arrives beside it
    other = requests.post(server.url + "/v1/completions", json={"model": "m", "prompt": "# v2\n" + long_prompt,
                                                                "max_tokens": 1}, timeout=60)
    thread.join(60)
    assert other.status_code == 200
    a, took = done["a"]
    assert took < 0.6 + 0.5 and a["tokens_predicted"] == 0   # before: ~2.2 s (its end went out after a piece)
    assert max(spy.pieces) <= 400                  # ~250 tokens a slice at ~1,000 tokens/s, shared in mixed steps


def test_while_an_editor_types_a_prompt_alone_is_read_in_slices(timed_server):
    """Within EDITOR_ACTIVE_S of a completion, a prompt read alone goes in slices too, so the next keystroke's
    completion, arriving during it, starts within a slice (before: after the whole 2,000-token piece, ~2 s)."""
    server, spy = timed_server
    warm = requests.post(server.url + "/v1/completions", json={"model": "m", "prompt": "x = 1\n" * 150,
                                                               "max_tokens": 1}, timeout=60)
    assert warm.status_code == 200
    first, _ = infill(server, t_max_prompt_ms=300)           # the editor: the user is typing
    assert first["tokens_predicted"] == 0
    spy.pieces.clear()
    long_prompt = "".join(f"row_{i} = table[{i}] * {i}\n" for i in range(90))
    agent: dict = {}
    thread = __import__("threading").Thread(target=lambda: agent.update(r=requests.post(
        server.url + "/v1/completions", json={"model": "m", "prompt": long_prompt, "max_tokens": 1}, timeout=60)))
    thread.start()
    time.sleep(0.3)                                           # the agent's prompt is being read, alone
    a, took = infill(server, t_max_prompt_ms=300)
    thread.join(60)
    assert agent["r"].status_code == 200
    assert took < 0.3 + 0.6 and a["tokens_predicted"] == 0   # before: ~2 s, behind the agent's one piece
    assert max(spy.pieces) <= 400
