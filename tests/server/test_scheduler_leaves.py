"""A client that leaves at each phase of the scheduler's agenda, on every API: while queued, while its
history is restored from the conversation cache, mid prefill piece, in a mixed step, in a lookup step,
while a park copies the solo conversation, between its last token and its final event. The worker is
held inside the real engine (or cache) call of that phase (sched_stress.Pause) until the server has seen
the client go; then the server must be at rest (every context idle, its table entry what the engine
holds, the gauges 0) and the same request again must reuse what the context kept and answer what a
fresh server answers."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer
from tests.server.sched_stress import KINDS, WAIT_S, Client, Pause, body_for, check_at_rest, wait_for
from tests.server.test_scheduler_stress import (
    serve,
    stress_model,  # noqa: F401  (a fixture)
)

JSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "r", "schema": {
    "type": "object", "additionalProperties": False, "required": ["status", "detail"],
    "properties": {"status": {"type": "string", "enum": ["finished"]}, "detail": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def batched(stress_model, tmp_path_factory):  # noqa: F811
    with serve(stress_model, tmp_path_factory.mktemp("batched"), 2) as s:
        yield s


@pytest.fixture(scope="module")
def solo(stress_model, tmp_path_factory):  # noqa: F811
    with serve(stress_model, tmp_path_factory.mktemp("solo"), 0) as s:
        yield s


@pytest.fixture(scope="module")
def fresh(stress_model):  # noqa: F811
    """Answers as they are without any history reused: no slots, no cache."""
    with LiveServer(model=str(stress_model), ctx=4096, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield s


def conversation(tag: str, size: int = 40) -> list[dict]:
    return [{"role": "system", "content": f"{tag}: " + "Keep the rules. " * size},
            {"role": "user", "content": f"{tag} step one " * 4}]


def whole(url: str, kind: str, messages: list[dict], max_tokens: int = 8, **extra) -> tuple[str, int]:
    """The answer's text and the cached tokens it reported, not streamed."""
    path, body = body_for(kind, messages, max_tokens)
    body.update(stream=False, **extra)
    r = httpx.post(url + path, json=body, timeout=WAIT_S)
    assert r.status_code == 200, r.text
    data = r.json()
    if path == "/v1/chat/completions":
        return data["choices"][0]["message"]["content"], data["usage"]["prompt_tokens_details"]["cached_tokens"]
    if path == "/v1/messages":
        return "".join(b.get("text", "") for b in data["content"]), data["usage"]["cache_read_input_tokens"]
    text = "".join(c["text"] for i in data["output"] if i["type"] == "message" for c in i["content"])
    return text, data["usage"]["input_tokens_details"]["cached_tokens"]


def submitted(server: LiveServer) -> list:
    """The jobs submitted to the server's scheduler since this was first called."""
    sched = server.state.scheduler
    if "submit" not in vars(sched):
        jobs: list = []

        def submit(job, real=sched.submit):
            real(job)
            jobs.append(job)
        sched.submit = submit
        sched.submitted = jobs
    return sched.submitted


def leaving(server: LiveServer, kind: str, messages: list[dict], max_tokens: int = 8, **extra) -> Client:
    path, body = body_for(kind, messages, max_tokens)
    body.update(stream=kind != "responses_ws" and body["stream"], **extra)
    submitted(server)
    return Client(server.url + ("" if kind == "responses_ws" else path), kind, body)


def left_while_held(server: LiveServer, pause: Pause, client: Client) -> None:
    """The worker is inside the paused call: the client leaves, the server sees it (the job is marked
    cancelled), then the call goes on."""
    assert pause.entered.wait(WAIT_S), "the phase was never reached"
    job = submitted(server)[-1]
    client.leave()
    wait_for(lambda: job.cancelled, what="the server saw the client leave")
    pause.release.set()
    out = client.result()
    assert out.end == "left" and not out.problems, out


def again(server: LiveServer, fresh: LiveServer, kind: str, messages: list[dict], at_least: int, **extra) -> None:
    """At rest; the same request whole reuses at least `at_least` tokens and answers as a fresh server does."""
    check_at_rest(server)
    text, cached = whole(server.url, kind, messages, **extra)
    assert cached >= at_least, (cached, at_least)
    assert text == whole(fresh.url, kind, messages, **extra)[0]
    check_at_rest(server)


class HeldWorker:
    """The worker thread held between two steps (as a Pause holds it inside a call)."""

    def __init__(self, sched) -> None:
        import threading

        self.entered, self.release = threading.Event(), threading.Event()
        self.done = sched.call(lambda: (self.entered.set(), self.release.wait(WAIT_S)))


@pytest.mark.parametrize("kind", KINDS)
def test_leaves_while_queued(batched, fresh, kind):
    sched = batched.state.scheduler
    messages = conversation(f"queued {kind}")
    held = HeldWorker(sched)
    try:
        client = leaving(batched, kind, messages)
        wait_for(lambda: sched.queue_depth >= 1, what="queued")
        left_while_held(batched, held, client)
    finally:
        held.release.set()
    held.done.result(WAIT_S)
    again(batched, fresh, kind, messages, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_leaves_mid_prefill_piece(batched, fresh, kind):
    sched = batched.state.scheduler
    messages = conversation(f"prefill {kind}", 120)
    calls = []
    with Pause(sched.engine, "prefill", lambda *a, **k: calls.append(1) or len(calls) == 2) as pause:
        client = leaving(batched, kind, messages)
        left_while_held(batched, pause, client)
    again(batched, fresh, kind, messages, 64)


@pytest.mark.parametrize("kind", KINDS)
def test_leaves_in_a_mixed_step(batched, fresh, kind):
    sched = batched.state.scheduler
    runner = leaving(batched, "chat_stream", conversation(f"runner {kind}"), 2000, ignore_eos=True)
    wait_for(lambda: any(r.phase == "decode" for r in sched._rows.values()), what="a stream generating")
    messages = conversation(f"mixed {kind}", 120)
    with Pause(sched.engine, "step", lambda pieces, *a: bool(pieces)) as pause:
        client = leaving(batched, kind, messages)
        left_while_held(batched, pause, client)
    runner.leave()
    again(batched, fresh, kind, messages, 64)     # the piece read in that step at least


@pytest.mark.parametrize("kind", [k for k in KINDS if not k.startswith("messages")])
def test_leaves_in_a_lookup_step(batched, fresh, kind):
    """An answer held to a schema writes its fixed text through lookup steps (Engine.extend)."""
    sched = batched.state.scheduler
    messages = conversation(f"lookup {kind}")
    fmt = ({"response_format": JSON_FORMAT} if kind.startswith("chat") else
           {"text": {"format": {"type": "json_schema", **JSON_FORMAT["json_schema"]}}})
    with Pause(sched.engine, "extend") as pause:
        client = leaving(batched, kind, messages, 40, **fmt)
        left_while_held(batched, pause, client)
    again(batched, fresh, kind, messages, 100, **fmt)   # the whole prompt was read


@pytest.mark.parametrize("kind", KINDS)
def test_leaves_while_a_park_copies_the_solo_conversation(stress_model, tmp_path, fresh, kind):  # noqa: F811
    with serve(stress_model, tmp_path, 2) as batched:     # its slots empty: the park goes to one
        parked_while_leaving(batched, fresh, kind)


def parked_while_leaving(batched: LiveServer, fresh: LiveServer, kind: str) -> None:
    sched = batched.state.scheduler
    first = conversation(f"parked {kind}", 110)       # worth parking, short enough for a slot
    whole(batched.url, "chat", first)                         # alone: on main
    wait_for(lambda: sched.table.main.busy_job is None)
    messages = conversation(f"displacing {kind}")
    with Pause(sched.engine, "copy", lambda src, dst, n: src == 0) as pause:
        client = leaving(batched, kind, messages)             # alone too: main's history is parked into a slot
        left_while_held(batched, pause, client)
    check_at_rest(batched)
    again(batched, fresh, "chat", first, 100)     # copied back from the slot it was parked in
    again(batched, fresh, kind, messages, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_leaves_while_its_history_is_restored(solo, fresh, kind):
    sched = solo.state.scheduler
    messages = conversation(f"restored {kind}")
    whole(solo.url, kind if kind != "responses_ws" else "responses", messages)
    whole(solo.url, "chat", conversation(f"other {kind}"))    # main's history goes to the cache
    with Pause(sched.cache, "restore") as pause:
        client = leaving(solo, kind, messages)
        left_while_held(solo, pause, client)
    again(solo, fresh, kind, messages, 100)       # what the restore put back


@pytest.mark.parametrize("kind", KINDS)
def test_leaves_between_its_last_token_and_its_final_event(batched, fresh, kind):
    sched = batched.state.scheduler
    messages = conversation(f"last {kind}")
    max_tokens = 6

    def last_token(*args, **kwargs) -> bool:
        return any(len(r.generated) == max_tokens - 1 for r in sched._rows.values())

    with Pause(sched.engine, "decode extend", last_token) as pause:
        client = leaving(batched, kind, messages, max_tokens, ignore_eos=True)
        left_while_held(batched, pause, client)
    again(batched, fresh, kind, messages, 100, ignore_eos=True)


@pytest.mark.parametrize("kind", KINDS)
def test_leaves_while_the_solo_conversation_is_parked_in_the_cache(solo, fresh, kind):
    """--batch 0: main's history goes to the conversation cache (RAM) before another conversation takes main."""
    sched = solo.state.scheduler
    first = conversation(f"cache-parked {kind}")
    whole(solo.url, "chat", first)
    messages = conversation(f"cache-displacing {kind}")
    with Pause(sched.cache, "park") as pause:
        client = leaving(solo, kind, messages)
        left_while_held(solo, pause, client)
    check_at_rest(solo)
    again(solo, fresh, "chat", first, 100)        # restored from the cache (its prompt is ~330 tokens)
    again(solo, fresh, kind, messages, 0)
