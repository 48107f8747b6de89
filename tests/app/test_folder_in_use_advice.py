"""The app's word on a server refused because another Strata server of its model holds a disk level's folder
(server/cache/server_lock.py, exit status 2): not retried, and the advice is to stop that server or give this one
another folder, naming the configuration key; it said "fix the configuration file" (the file held nothing wrong)
and showed the server's terminal advice (`--conversation-cache-cold-dir DIR`, flags an app user never types).
A real server refused by a real holder, read by the supervisor as the app reads it; and the pure decision."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from strata.app.restart_policy import Exit, RestartConfig, decide
from strata.app.supervisor import ServerSupervisor
from strata.engine import GGUFFile, model_identity
from strata.server.cache.server_lock import FolderInUse

from tests.app.test_supervisor import wait_state

ADVICE = "another Strata server of this model uses the folder: stop it, or give this one another folder"
# a live server of the model, as it is between its claim of the folders and its bind: it holds the folder and does
# not listen. Not stopping (its lock file does not say so), so refused, not waited for: a closed port was taken for a
# stopping server's sign, and the start waited up to 600 s saying the previous server was saving (only one whose lock
# says it is stopping is waited for: test_start_waits_for_a_left_behind_stop)
HOLDER = textwrap.dedent("""
    import sys
    from strata.server.cache import server_lock
    server_lock.claim("--conversation-cache-cold-dir", sys.argv[1], sys.argv[2])
    print("held", flush=True)
    sys.stdin.read()
""")


def test_the_app_says_another_server_holds_the_folder(tmp_path, tiny_model_factory):
    model = tiny_model_factory()
    cold = tmp_path / "cold"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(cold), model_identity(model,
                              GGUFFile(str(model)).data_offset)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        config = tmp_path / "config.toml"
        config.write_text(f"model = '{model}'\nport = 0\nthreads = 1\nctx = 512\nbatch = 0\n"
                          f"conversation_cache_mib = 0\nconversation_cache_cold_dir = '{cold}'\n"
                          "conversation_cache_cold_mib = 16\n")
        # a wait for it would end past 5 s: "failed", saying it is still stopping, not the advice
        sup = ServerSupervisor(config, tmp_path / "logs", restart=RestartConfig(max_retries=3), left_behind_wait_s=5)
        sup.start()
        try:
            st = wait_state(sup, {"failed"}, timeout=90)
        finally:
            sup.stop()
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert st.restarts == 0, st.detail
    assert ADVICE in st.detail, st.detail
    assert f"(pid {holder.pid}, running since " in st.detail and str(cold) in st.detail, st.detail
    assert f"`conversation_cache_cold_dir` in the configuration file {config}" in st.detail, st.detail
    assert "fix the configuration file" not in st.detail and "DIR)" not in st.detail, st.detail


@pytest.mark.parametrize("level", ["warm", "cold", "segment", "system-prompt"])   # the last two held since session 41
def test_the_refusal_names_the_level_s_key(level):
    line = str(FolderInUse(f"--conversation-cache-{level}-dir", "/d/c (x)", "pid 7, running since 2026-12-07"))
    d = decide(Exit(2, 0.3, False, False, line, config="/c.toml"), 0, RestartConfig())
    assert not d.restart
    assert d.reason == (f"the server cannot use its conversation folder: exited with status 2 "
                        f"(--conversation-cache-{level}-dir /d/c (x): this folder is in use by another strata serve of "
                        f"this model (pid 7, running since 2026-12-07)); {ADVICE} (`conversation_cache_{level.replace('-', '_')}_dir` "
                        "in the configuration file /c.toml), then restart the server")
