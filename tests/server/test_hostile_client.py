"""A hostile or buggy client against a real `strata serve` (a subprocess, --api-key, the cold disk level on): what
session 40's hostile-client trial found. A prompt of megabytes does not hold every other client while it is
tokenized; a session call's error quoting a huge value is cut.
Not here: the bodies of test_hostile_bodies.py / test_generated_bodies.py, the key table of test_auth_and_lifecycle.py.
"""

from __future__ import annotations

import threading
import time

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


def test_a_prompt_of_megabytes_does_not_hold_other_clients(served):
    """A 3 MB message is tokenized in a worker thread; the tokenizer's `encode` held the GIL the whole time
    (a 10 MB one 12 s), so /v1/models of another client waited for it: now it answers meanwhile."""
    url, _, _ = served
    done, latencies = threading.Event(), []

    def other_client() -> None:
        with httpx.Client(base_url=url, headers=AUTH, timeout=120) as c:
            while not done.is_set():
                t = time.monotonic()
                assert c.get("/v1/models").status_code == 200
                latencies.append(time.monotonic() - t)
                time.sleep(0.05)

    th = threading.Thread(target=other_client)
    th.start()
    try:
        time.sleep(0.3)
        t = time.monotonic()
        r = httpx.post(url + "/v1/chat/completions", headers=AUTH, timeout=300,
                       json={"max_tokens": 1, "messages": [{"role": "user", "content": "hello there " * 250_000}]})
        took = time.monotonic() - t
    finally:
        done.set()
        th.join()
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text[:300]
    assert took > 1.0, f"the prompt took only {took:.2f} s: too short to tell"
    assert max(latencies) < max(0.5, took / 4), (max(latencies), took)


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
