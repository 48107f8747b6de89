"""A hostile or buggy client against a real `strata serve` (a subprocess, --api-key, the cold disk level on): what
session 40's hostile-client trial found. A prompt of megabytes does not hold every other client while it is
tokenized; a session call's error quoting a huge value is cut.
Not here: the bodies of test_hostile_bodies.py / test_generated_bodies.py, the key table of test_auth_and_lifecycle.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import httpx2 as httpx
import pytest

from tests.server.test_auth_and_lifecycle import listening_port, start_cli, wait_healthy

KEY = "hostile-trial-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile_client")
    proc, log = start_cli(["--model", str(tiny_model), "--ctx", "4096", "--batch", "1", "--api-key", KEY,
                           "--conversation-cache-mib", "0",
                           "--conversation-cache-cold-dir", str(tmp / "cold"), "--conversation-cache-cold-mib", "64",
                           "--conversation-cache-sessions-dir", str(tmp / "sessions")], tmp)
    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}", port, log
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except Exception:
            proc.kill()


def while_another_client_asks(url: str, send: Callable[[], httpx.Response]) -> tuple[httpx.Response, float, float]:
    """`send()`'s answer, how long it took, and the longest another client's GET /v1/models waited meanwhile."""
    done, waits = threading.Event(), []

    def other_client() -> None:
        with httpx.Client(base_url=url, headers=AUTH, timeout=120) as c:
            while not done.is_set():
                t = time.monotonic()
                assert c.get("/v1/models").status_code == 200
                waits.append(time.monotonic() - t)
                time.sleep(0.05)

    th = threading.Thread(target=other_client)
    th.start()
    try:
        time.sleep(0.3)
        t = time.monotonic()
        r = send()
        took = time.monotonic() - t
    finally:
        done.set()
        th.join()
    assert took > 1.0, f"the request took only {took:.2f} s: too short to tell"
    return r, took, max(waits)


def test_a_prompt_of_megabytes_does_not_hold_other_clients(served):
    """A 3 MB message is tokenized in a worker thread; the tokenizer's `encode` held the GIL the whole time
    (a 10 MB one 12 s), so /v1/models of another client waited for it: now it answers meanwhile."""
    url, _, _ = served
    r, took, worst = while_another_client_asks(url, lambda: httpx.post(
        url + "/v1/chat/completions", headers=AUTH, timeout=300,
        json={"max_tokens": 1, "messages": [{"role": "user", "content": "hello there " * 250_000}]}))
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text[:300]
    assert worst < max(0.5, took / 4), (worst, took)


def fanned_schema(depth: int) -> dict:
    """A valid schema of 2**depth leaves (depth 15: 2 MB), compiled for seconds."""
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"anyOf": [schema, {"type": "array", "items": schema}]}
    return schema


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"max_tokens": 2, "messages": HI,
                              "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 0}}}),
    ("/v1/messages", {"max_tokens": 2, "messages": HI, "output_config": {"format": {"type": "json_schema", "schema": 0}}}),
    ("/v1/responses", {"max_output_tokens": 16, "input": "hi",
                       "text": {"format": {"type": "json_schema", "name": "x", "schema": 0}}}),
], ids=["chat_response_format", "messages_output_config", "responses_text_format"])
def test_a_json_schema_of_megabytes_does_not_hold_other_clients(served, path, body):
    """The answer's JSON format was compiled on the event loop: a 4 MB schema held every other client 6 to 8 s."""
    url, _, _ = served
    wire = json.dumps(body).replace('"schema": 0', '"schema": ' + json.dumps(fanned_schema(15)))
    r, took, worst = while_another_client_asks(url, lambda: httpx.post(
        url + path, headers={**AUTH, "Content-Type": "application/json"}, content=wire, timeout=300))
    assert r.status_code == 200, r.text[:300]
    assert worst < max(0.5, took / 4), (worst, took)


@pytest.mark.parametrize("call", [
    lambda url: httpx.post(url + "/v1/sessions/ok/save", headers=AUTH, json={"conversation": "c" * 20_000}),
    lambda url: httpx.post(url + "/v1/sessions/" + "n" * 5000 + "/restore", headers=AUTH, json={}),
    lambda url: httpx.delete(url + "/v1/sessions/" + "n" * 5000, headers=AUTH),
], ids=["save_conversation", "restore_name", "delete_name"])
def test_a_session_error_quoting_a_huge_value_is_cut(served, call):
    """The session endpoints quoted the value whole (20,000 characters back for a conversation key), where every
    other endpoint's error keeps its start and end (errors.shortened)."""
    url, _, _ = served
    r = call(url)
    assert 400 <= r.status_code < 500
    message = r.json()["error"]["message"]
    assert len(message) < 2100 and "characters cut" in message, message[:200]
