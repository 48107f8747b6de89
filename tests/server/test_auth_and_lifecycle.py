"""API keys on and off, /health while loading and after a failed load, `strata serve` as a process:
the INFO line, SIGTERM and SIGINT stop it cleanly, a model that cannot load stops it with status 3,
and `--timeline-out` writes the replay timeline (ids, times, token counts only)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2 as httpx
import openai
import pytest
from strata.server.replay.timeline import read_strata

from strata.exit_status import MODEL_NOT_LOADED
from tests.server.live import LiveServer

KEY = "s3cret-key"
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pseudo-terminals")


@pytest.fixture(scope="module")
def keyed(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=1024, batch=1, threads=1, api_key=KEY,
                    conversation_cache_mib=0) as s:
        yield s


@pytest.mark.parametrize("headers,status", [
    ({}, 401),
    ({"Authorization": "Bearer wrong"}, 401),
    ({"x-api-key": "wrong"}, 401),
    ({"Authorization": "Basic " + KEY}, 401),
    ({"Authorization": f"Bearer {KEY}"}, 200),
    ({"authorization": f"bearer {KEY}"}, 200),
    ({"x-api-key": KEY}, 200),
])
def test_every_endpoint_but_health_needs_the_key(keyed, headers, status):
    for path in ("/v1/models", "/metrics", "/v1/slots", "/v1/monitor"):
        r = httpx.get(keyed.url + path, headers=headers)
        assert r.status_code == status, path
        if status == 401:
            assert "API key" in r.json()["error"]["message"]
    assert httpx.get(keyed.url + "/health").status_code == 200


def test_claude_codes_reachability_probe_is_answered_without_the_key(keyed):
    """Claude Code 2.1.332 sends `HEAD /api/hello` to its base URL at start-up (and GETs it in its
    connectivity check), without a key; it was a 404."""
    assert httpx.head(keyed.url + "/api/hello").status_code == 200
    r = httpx.get(keyed.url + "/api/hello")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_sdks_with_and_without_the_key(keyed):
    good = openai.OpenAI(base_url=keyed.url + "/v1", api_key=KEY, max_retries=0)
    # ignore_eos: a sampled first token may end the turn, and this test is about the key, not the answer
    assert good.chat.completions.create(model="x", max_tokens=2, messages=[{"role": "user", "content": "hi"}],
                                        extra_body={"ignore_eos": True}).usage.completion_tokens == 2
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed.url + "/v1", api_key="nope", max_retries=0).models.list()
    claude = anthropic.Anthropic(base_url=keyed.url, api_key=KEY, max_retries=0)
    assert claude.messages.create(model="x", max_tokens=2, messages=[{"role": "user", "content": "hi"}]).content
    with pytest.raises(anthropic.AuthenticationError) as e:
        anthropic.Anthropic(base_url=keyed.url, api_key="nope", max_retries=0).messages.create(
            model="x", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error"


def test_without_a_key_everything_is_open(tiny_server):
    assert httpx.get(tiny_server.url + "/v1/models").status_code == 200


def test_health_reports_a_failed_load(tmp_path):
    s = LiveServer(model=str(tmp_path / "missing.gguf"), ctx=256, batch=0)
    s.start(wait_ready=False)
    try:
        r = None
        for _ in range(200):
            r = httpx.get(s.url + "/health")
            if r.json()["status"] == "error":
                break
            assert r.status_code == 503 and r.json()["status"] == "loading"
            time.sleep(0.02)
        assert r.status_code == 503 and "no such file" in r.json()["error"]
        r = httpx.post(s.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 503 and "could not be loaded" in r.json()["error"]["message"]
    finally:
        s.stop()


LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


def listening_port(log: Path, proc: subprocess.Popen, timeout: float = 60.0) -> int:
    """The port that `strata serve --port 0` bound, from its "listening on" line in `log` (a free port
    picked before the server starts can be taken by another process before the server binds it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = LISTENING.search(log.read_text()) if log.exists() else None
        if found:
            return int(found.group(1))
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    raise TimeoutError(f"strata serve said no 'listening on':\n{log.read_text()}")


def start_cli(args: list[str], tmp_path) -> tuple[subprocess.Popen, Path]:
    """`strata serve` on port 0, its output in the returned log file."""
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("STRATA_API_KEY", None)
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0",
                                 "--threads", "1", *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=tmp_path)
    return proc, log


@contextlib.contextmanager
def serving(args: list[str], tmp_path) -> Iterator[tuple[int, Path]]:
    """A healthy `strata serve` (start_cli) for the block: its port and log; terminated after (killed past 30 s)."""
    proc, log = start_cli(args, tmp_path)
    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        yield port, log
    finally:
        stop_server(proc)


def stop_server(proc: subprocess.Popen, wait_s: float = 30.0) -> None:
    """SIGTERM (the clean stop), then a kill past `wait_s`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"strata serve exited with status {proc.returncode}"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError("strata serve did not become healthy")


@posix_only
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_starts_serves_and_stops_cleanly_on_a_signal(tiny_model, tmp_path, sig):
    timeline = tmp_path / "timeline.jsonl"
    proc, log = start_cli(["--model", str(tiny_model), "--ctx", "1024", "--batch", "2",
                           "--conversation-cache-mib", "0", "--timeline-out", str(timeline)], tmp_path)
    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        first = [{"role": "user", "content": "hello"}]
        r1 = client.chat.completions.create(model="x", messages=first, max_tokens=4, temperature=0)
        second = first + [{"role": "assistant", "content": r1.choices[0].message.content},
                          {"role": "user", "content": "again"}]
        client.chat.completions.create(model="x", messages=second, max_tokens=4, temperature=0)
        proc.send_signal(sig)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text()
    assert proc.returncode == 0, out
    assert "strata: model " in out and f"listening on http://127.0.0.1:{port}" in out
    assert "contexts main 1024 + 2 slots x 1024" in out and "large pages" in out
    assert ", 1 thread | contexts" in out, out           # not "1 threads"
    assert "| weights packed " in out or "| weights read in place |" in out   # the CPU's packed copies
    assert "| lookup decoding 8 tokens |" in out
    assert "stopping" in out and "Traceback" not in out
    lines = [json.loads(x) for x in timeline.read_text().splitlines()]
    assert [set(x) for x in lines] == [{"conversation", "time", "prompt_tokens", "shared_tokens", "output_tokens"}] * 2
    assert lines[0]["conversation"] == lines[1]["conversation"] and lines[1]["shared_tokens"] >= lines[0]["prompt_tokens"]
    assert len(read_strata(timeline)) == 2        # the replay reader takes it


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_host_is_written_as_a_url_a_client_can_use(tiny_model, tmp_path):
    """--host ::1 printed 'listening on http://::1:PORT' (and the same in the INFO line, the app's endpoint
    and /v1/monitor's): no client can open that URL; an IPv6 address goes in brackets."""
    proc, log = start_cli(["--model", str(tiny_model), "--ctx", "256", "--batch", "0", "--host", "::1"], tmp_path)
    try:
        deadline = time.monotonic() + 60
        while "strata: model " not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        found = re.search(r"listening on (http://\S+) \(loading the model\)", log.read_text())
        assert found, log.read_text()
        url = found.group(1)
        assert re.fullmatch(r"http://\[::1\]:\d+", url), url
        assert f"| listening on {url}" in log.read_text()          # the INFO line, where the app reads it
        assert httpx.get(url + "/health", timeout=10).status_code == 200
        assert httpx.get(url + "/v1/monitor", timeout=10).json()["endpoint"] == url
    finally:
        proc.terminate()
        proc.wait(30)


def test_cli_stops_with_status_3_when_the_model_cannot_load(tmp_path):
    proc, log = start_cli(["--model", str(tmp_path / "nothing.gguf")], tmp_path)
    proc.wait(60)
    out = log.read_text()
    assert proc.returncode == MODEL_NOT_LOADED == 3 and "no such file" in out


def _status_line_output(tiny_model, tmp_path, lines: int, columns: int | None = None) -> tuple[bytes, int]:
    """What a real `strata serve --status-line` writes to a terminal (`columns` wide when given) until `lines`
    status lines have come, then SIGTERM: (the bytes, the exit status)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    if columns is not None:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0",
                             "--threads", "1", "--model", str(tiny_model), "--ctx", "512", "--batch", "1",
                             "--conversation-cache-mib", "0", "--status-line", "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=slave, cwd=tmp_path)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        while seen.count(b"running") < lines and time.monotonic() < deadline:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return seen, proc.returncode


@posix_only
def test_status_line_on_a_terminal(tiny_model, tmp_path):
    """--status-line writes a live line to stderr when it is a terminal (./run headless uses it)."""
    seen, status = _status_line_output(tiny_model, tmp_path, lines=1)
    assert b"\r\x1b[2Kstrata: 0 running, 0 queued" in seen
    assert status == 0


@posix_only
def test_the_status_line_fits_a_narrow_terminal(tiny_model, tmp_path):
    """The status line (67 characters when idle, more with traffic) was cut at 200: in a terminal narrower than
    it, it wrapped, and the next second's carriage return and erase-line cleared only the wrapped row, so a
    split pane of 40 columns scrolled a stale half line a second. It is cut to the terminal's width - 1."""
    seen, _ = _status_line_output(tiny_model, tmp_path, lines=2, columns=40)
    shown = [part for part in seen.decode().split("\r\x1b[2K") if part.startswith("strata: 0 running")]
    assert len(shown) >= 2, seen
    assert all(len(part.rstrip("\r\n")) <= 39 for part in shown), shown
    assert shown[0].startswith("strata: 0 running, 0 queued, 0 done |")


@posix_only
def test_a_stop_does_not_wait_for_open_streams(tiny_model, tmp_path):
    """SIGTERM with a monitor event stream and a long generation open: the server still stops at once."""
    import threading

    proc, log = start_cli(["--model", str(tiny_model), "--ctx", "4096", "--batch", "1",
                           "--conversation-cache-mib", "0"], tmp_path)
    seen: dict[str, int] = {"monitor": 0, "tokens": 0}

    def read_monitor():
        try:
            with httpx.stream("GET", url + "/v1/monitor/events", timeout=120) as r:
                for line in r.iter_lines():
                    seen["monitor"] += line.startswith("data: ")
        except httpx.TransportError:
            pass

    def read_generation():
        body = {"prompt": "x", "max_tokens": 4000, "stream": True, "ignore_eos": True}
        try:
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
                for line in r.iter_lines():
                    seen["tokens"] += line.startswith("data: ")
        except httpx.TransportError:
            pass

    try:
        port = listening_port(log, proc)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(port, proc)
        threads = [threading.Thread(target=read_monitor, daemon=True),
                   threading.Thread(target=read_generation, daemon=True)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while (seen["monitor"] < 1 or seen["tokens"] < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen["monitor"] >= 1 and seen["tokens"] >= 3
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text()
    assert proc.returncode == 0, out
    assert took < 10, f"stopping took {took:.1f} s"
