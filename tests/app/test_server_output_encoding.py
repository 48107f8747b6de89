"""The app reads its server's output as UTF-8 (app/supervisor.py `_pump`), and the server writes a pipe so whatever the
machine's code page: on Windows a pipe's encoding is the ANSI code page (cp1252...), simulated here with
PYTHONIOENCODING=cp1252 in the app's environment. A real `strata serve` child refusing a model in a Cyrillic
folder: its line reaches the status and server.log with the folder's name as written. Not here: the `strata`
command's own console (tests/cli/test_console_encoding.py)."""

from __future__ import annotations

import os
import time

from strata.app.restart_policy import RestartConfig
from strata.app.supervisor import ServerSupervisor


def test_a_server_line_with_a_cyrillic_path_reaches_the_app_as_written_under_a_cp1252_code_page(tmp_path):
    gone = tmp_path / "Модели ☃ é" / "gone.gguf"
    config = tmp_path / "config.toml"
    config.write_text(f"model = '{gone}'\nport = 0\n", encoding="utf-8")
    env = dict(os.environ, PYTHONIOENCODING="cp1252", PYTHONUTF8="0")
    sup = ServerSupervisor(config, tmp_path / "logs", restart=RestartConfig(max_retries=1), env=env)
    sup.start()
    try:
        deadline = time.monotonic() + 90
        while sup.status().state != "failed" and time.monotonic() < deadline:
            time.sleep(0.05)
        st = sup.status()
    finally:
        sup.stop()
    assert st.state == "failed", st
    assert f"{gone}: no such file" in st.detail, st.detail
    log = (tmp_path / "logs" / "server.log").read_bytes().decode("utf-8")    # strict: the log is UTF-8 too
    assert f"{gone}: no such file" in log
