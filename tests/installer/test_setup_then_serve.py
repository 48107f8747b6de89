"""`strata setup --yes --config PATH` with stdin closed writes a file that `strata serve --config PATH`
starts with: /health answers ok within a bounded wait, on the default model."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from strata.installer import config_file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.mark.skipif(sys.platform == "win32", reason="stdin closed with a POSIX shell")
def test_setup_yes_with_stdin_closed_then_serve_starts(tmp_path, default_model_path):
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               XDG_DATA_HOME=str(tmp_path / "data"))
    path = tmp_path / "strata.toml"
    setup = subprocess.run(["bash", "-c", f'"{sys.executable}" -m strata setup --yes --config "{path}" '
                                          f'--disk-bench-mib 8 <&-'],
                           env=env, capture_output=True, text=True, timeout=300)
    assert setup.returncode == 0, setup.stderr
    values, _ = config_file.read(path)
    assert values["model"] == str(default_model_path)

    port = _free_port()
    log = open(tmp_path / "serve.log", "w+")
    serve = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--config", str(path), "--port", str(port)],
                             env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline, status = time.monotonic() + 180, None
        while time.monotonic() < deadline and serve.poll() is None:
            try:
                code, body = _health(port)
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
                continue
            status = body.get("status")
            if code == 200 or status == "error":
                break
            time.sleep(0.5)
        log.seek(0)
        output = log.read()
        assert serve.poll() is None, f"strata serve exited ({serve.returncode}):\n{output}"
        assert status == "ok", f"/health said {status!r}:\n{output}"
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        log.close()
