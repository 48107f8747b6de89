"""What a new user meets at the terminal: every option of every command explains itself in --help,
a command piped into `head` ends without a traceback, and the server's log lines do not run into its
live status line. Not here: what each command computes (each part's own tests).
"""

from __future__ import annotations

import argparse
import http.client
import importlib
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from strata.cli import SUBCOMMANDS
from strata.exit_status import CANNOT_LISTEN


def _parser_for(name: str) -> argparse.ArgumentParser:
    module = importlib.import_module(SUBCOMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"strata {name}")
    module.add_arguments(parser)
    return parser


def _options_without_help(parser: argparse.ArgumentParser) -> list[str]:
    return [a.option_strings[0] for a in parser._actions
            if a.option_strings and a.help is None]


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_option_of_every_subcommand_has_help(name):
    if name == "monitor":
        pytest.importorskip("PySide6")
    missing = _options_without_help(_parser_for(name))
    assert not missing, f"`strata {name} --help` says nothing about {missing}"


def test_every_option_of_the_app_has_help():
    pytest.importorskip("PySide6")
    from strata.app.main import build_parser

    missing = _options_without_help(build_parser())
    assert not missing, f"`strata-app --help` says nothing about {missing}"


def test_serve_help_lists_the_choices_of_choice_options():
    text = _parser_for("serve").format_help()
    for shown in ("--kv-type {f16,q8_0}", "--backend {cpu,cuda,auto}", "--log-level {debug,info,warning,error}",
                  "--conversation-cache-park {ram,disk,auto}"):
        assert shown in text


def test_a_closed_pipe_ends_a_command_without_a_traceback():
    proc = subprocess.Popen([sys.executable, "-m", "strata", "models", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                    # the reader is gone before the command writes (`| head -0`)
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=60)
    assert "Traceback" not in err, err
    assert rc == 1


def _read_until(fd: int, out: bytearray, needle: bytes, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if needle in out:
            return True
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return needle in out
    return needle in out


def _generate_in_background(port: int, n_tokens: int) -> threading.Thread:
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": n_tokens, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})

    def run() -> None:
        try:
            urllib.request.urlopen(request, timeout=120).read()
        except (OSError, http.client.HTTPException):
            pass   # the server was stopped under it

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_the_status_line_is_live_and_log_lines_do_not_run_into_it():
    pid, fd = pty.fork()
    if pid == 0:                           # the child: the server on a terminal, as `./run` starts it
        os.execv(sys.executable, [sys.executable, "-m", "strata", "serve", "--no-config", "--status-line",
                                  "--port", "0", "--batch", "0", "--ctx", "4096",
                                  "--conversation-cache-mib", "0"])
    out = bytearray()
    try:
        assert _read_until(fd, out, b"prompt reuse", 60), out.decode(errors="replace")
        port = int(re.search(rb"listening on http://127\.0\.0\.1:(\d+)", bytes(out)).group(1))
        # long enough to span several once-a-second status lines at any decode speed (400 tokens took
        # under a second once decode passed 400 tok/s, and the line could miss the request)
        _generate_in_background(port, 3500)
        # while the request is still generating, the status line shows its speed (not 0 until it ends)
        live = re.compile(rb"1 running, 0 queued, 0 done \| (?!0\.0 )[0-9.]+ tok/s")
        end = time.monotonic() + 60
        while time.monotonic() < end and not live.search(bytes(out)):
            _read_until(fd, out, b"\x00", 0.5)
        assert live.search(bytes(out)), out.decode(errors="replace")[-2000:]
    finally:
        os.kill(pid, signal.SIGINT)        # its "stopping" log line comes right after a status line
        _read_until(fd, out, b"stopping", 30)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
    text = out.decode(errors="replace")
    assert "stopping" in text
    pieces = text.replace("\r", "\n").split("\n")
    glued = [p for p in pieces if "prompt reuse" in p and " INFO " in p]
    assert not glued, f"a log line continued the status line: {glued}"


def test_a_busy_port_stops_serve_at_once_without_loading_the_model():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "strata", "serve", "--no-config", "--port", str(port)],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == CANNOT_LISTEN         # the app does not retry it (strata/exit_status.py)
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "loaded in" not in done.stderr, "the model was loaded although the server could not listen"


def test_a_json_body_sent_as_a_form_is_refused_with_the_curl_fix():
    import asyncio

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer
    from strata.server.errors import APIError
    from strata.server.fields import read_json_object

    async def echo(request: web.Request) -> web.Response:
        try:
            return web.json_response(await read_json_object(request))
        except APIError as e:
            return web.json_response({"status": e.status, "message": e.message}, status=e.status)

    async def scenario() -> tuple[dict, dict]:
        app = web.Application()
        app.router.add_post("/", echo)
        async with TestClient(TestServer(app)) as client:
            as_form = await (await client.post("/", data=b'{"a": 1}',
                                               headers={"Content-Type": "application/x-www-form-urlencoded"})).json()
            as_json = await (await client.post("/", data=b'{"a": 1}',
                                               headers={"Content-Type": "application/json"})).json()
        return as_form, as_json

    as_form, as_json = asyncio.run(scenario())
    assert as_form["status"] == 415
    assert "-H 'Content-Type: application/json'" in as_form["message"]
    assert as_json == {"a": 1}


def test_chat_says_once_that_a_conversation_outgrew_the_context():
    done = subprocess.run([sys.executable, "-m", "strata", "chat", "--ctx", "64"], input="word " * 200 + "\n",
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert "strata chat: the conversation is" in done.stderr, done.stderr
    assert "chat: chat:" not in done.stderr


def _serve_until_loaded(*flags: str) -> str:
    """Starts `strata serve` with these flags, returns its log up to the INFO line, stops it."""
    proc = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", *flags],
                            stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if "loaded in" in line or "could not be loaded" in line:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    return "".join(lines)


def test_a_context_beyond_the_trained_one_is_warned_about():
    log = _serve_until_loaded("--ctx", "16384", "--batch", "0", "--conversation-cache-mib", "0")
    assert "larger than the 8192 tokens the model was trained on" in log, log
    log = _serve_until_loaded("--ctx", "8192", "--batch", "0", "--conversation-cache-mib", "0")
    assert "loaded in" in log and "trained on" not in log, log


def test_replay_of_a_small_timeline_shows_its_token_counts(tmp_path):
    timeline = tmp_path / "mine.jsonl"               # what `strata serve --timeline-out` writes
    timeline.write_text("".join(
        f'{{"conversation": "c{i % 2}", "time": {i}.0, "prompt_tokens": {300 * (i + 1)}, '
        f'"shared_tokens": {300 * i if i > 1 else 0}, "output_tokens": 40}}\n' for i in range(4)))
    done = subprocess.run([sys.executable, "-m", "strata", "replay", str(timeline), "--slots", "1",
                           "--policies", "lru"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "0.00M" not in done.stdout
    assert "prompt tokens in the timeline: 3.0K" in done.stdout, done.stdout


STREAMS = {
    "openai-chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    "openai-text": ("/v1/completions", {"prompt": "Once upon a time"}),
    "anthropic": ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}]}),
}


@pytest.mark.parametrize("api", sorted(STREAMS))
def test_a_stream_cut_by_the_server_stopping_ends_with_an_error_not_a_normal_finish(api):
    path, body = STREAMS[api]
    proc = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--batch", "0",
                             "--ctx", "4096", "--conversation-cache-mib", "0"], stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+) \(loaded", line)
            if found:
                port = int(found.group(1))
                break
        assert port, "the server did not start"
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", json.dumps({**body, "max_tokens": 3000, "ignore_eos": True,
                                                          "stream": True}).encode(),
            {"Content-Type": "application/json"})
        lines = []
        with urllib.request.urlopen(request, timeout=120) as stream:
            for raw in stream:
                lines.append(raw.decode())
                if len(lines) == 12:                     # generating: now stop the server under it
                    proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines)
    assert "the server is stopping" in text, text[-1500:]
    for normal_end in ('"finish_reason":"stop"', '"finish_reason":"length"', "[DONE]", '"stop_reason":"end_turn"',
                       '"stop_reason":"max_tokens"'):
        assert normal_end not in text, f"a cut answer was ended as complete ({normal_end})"
