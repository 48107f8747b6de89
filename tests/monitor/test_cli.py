"""`strata monitor` as a user runs it: argument errors, and --screenshot against a real server."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.monitor.conftest import API_KEY


def strata(*args, timeout=120):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    return subprocess.run([sys.executable, "-m", "strata", "monitor", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.parametrize("args, message", [
    (["--url", "ftp://x"], "not an http(s) address"),
    (["--after", "-1", "--screenshot", "x.png"], "--after must be between"),
    (["--size", "big"], "--size must be WIDTHxHEIGHT"),
    (["--size", "10x10"], "out of range"),
])
def test_argument_errors(args, message):
    r = strata(*args)
    assert r.returncode == 2 and message in r.stderr


def test_screenshot_of_a_running_server(keyed_server, tmp_path, artifacts):
    path = tmp_path / "shot.png"
    r = strata("--url", keyed_server.url, "--api-key", API_KEY, "--screenshot", str(path), "--after", "1.5",
               "--theme", "dark")
    assert r.returncode == 0, r.stderr
    assert "(connected)" in r.stdout
    # Qt's offscreen plugin wrote 'This plugin does not support propagateSizeHints()' (and raise()) under the
    # saved line of every documented screenshot command: notes about its own limits, nothing for the user
    assert "does not support" not in r.stderr, r.stderr
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 800)
    (artifacts / "cli-dark.png").write_bytes(data)


def test_screenshot_says_when_it_could_not_connect(keyed_server, tmp_path):
    path = tmp_path / "shot.png"
    r = strata("--url", keyed_server.url, "--api-key", "wrong", "--screenshot", str(path), "--after", "1")
    assert r.returncode == 1
    assert "wrong or missing API key" in r.stdout
    assert path.is_file()                       # the window shows the reason; the picture is still saved


def test_a_size_below_the_windows_least_says_the_size_drawn(tmp_path):
    """--size 400x240 saved a larger picture with no word (a new-user trial's 1024x640 came out 1091x660; the window
    is 485 px wide at least, and 640x480 fits since its panels scroll)."""
    from tests.monitor.traffic import free_port

    path = tmp_path / "shot.png"
    r = strata("--url", f"http://127.0.0.1:{free_port()}", "--screenshot", str(path), "--after", "0.5",
               "--size", "400x240")
    data = path.read_bytes()
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) != (400, 240)
    assert f"at {width}x{height}, the window's least size for --size 400x240" in r.stdout, r.stdout


def test_a_screenshot_waits_for_a_first_answer_slower_than_after(tmp_path):
    """CI under load saved 'connecting' (exit 1, no reason) when the feed's first answer came after --after: the
    shot waits for that answer, here a 401 held back 2 s."""
    import http.server
    import threading
    import time as clock

    class SlowRefusal(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            clock.sleep(2.0)
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowRefusal)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = tmp_path / "shot.png"
        r = strata("--url", f"http://127.0.0.1:{server.server_address[1]}", "--screenshot", str(path),
                   "--after", "0.2")
    finally:
        server.shutdown()
    assert r.returncode == 1
    assert "wrong or missing API key" in r.stdout, r.stdout
    assert path.is_file()
