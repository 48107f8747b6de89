"""`strata setup --yes --config PATH` with stdin closed writes a file that `strata serve --config PATH`
starts with: /health answers ok within a bounded wait, on the default model, also once the default
model's package has moved (the packaged app unpacked in another folder)."""

from __future__ import annotations

import json
import os
import shutil
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
def default_model_package_in(folder, default_model_path):
    """A copy of the default model's package (its file linked) in `folder`, found before the installed one."""
    package = folder / default_model_path.parent.name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / default_model_path.name).symlink_to(default_model_path)
    return str(folder)


def test_setup_yes_with_stdin_closed_then_serve_starts(tmp_path, default_model_path):
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               XDG_DATA_HOME=str(tmp_path / "data"))
    path = tmp_path / "strata.toml"
    first = default_model_package_in(tmp_path / "app-1.0", default_model_path)
    setup = subprocess.run(["bash", "-c", f'"{sys.executable}" -m strata setup --yes --config "{path}" '
                                          f'--disk-bench-mib 8 <&-'],
                           env=dict(env, PYTHONPATH=first), capture_output=True, text=True, timeout=300)
    assert setup.returncode == 0, setup.stderr
    values, _ = config_file.read(path)
    # by its id, not the path into the folder it was found in (the packaged app's own: gone with an update)
    assert values["model"] == default_model_path.stem
    shutil.rmtree(first)
    env["PYTHONPATH"] = default_model_package_in(tmp_path / "app-1.1", default_model_path)

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
        assert body["model"] == default_model_path.stem
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=30)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        log.close()
