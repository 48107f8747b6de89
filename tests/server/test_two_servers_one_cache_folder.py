"""A second `strata serve` of the same model on a disk level's folder that a running server holds is refused
before it loads the model (exit status 2), naming the folder, the flag and the other server's pid. Before, it
started and shared the folder silently: each server indexes a folder once, at its start, so each missed the
entries the other moved down or removed (session 39's trial, "missed moved entries"). A server of another model
shares the folder as before (each reads only its own model's files), and the folder is free again once the holder
has stopped, however it ended (the OS lets the lock go). Real servers in subprocesses, tiny models."""

from __future__ import annotations

import os
import subprocess
import sys

from strata.exit_status import CONFIGURATION_REFUSED
from tests.server.test_auth_and_lifecycle import listening_port, stop_server


def start(model, cold, tmp_path, name: str, *flags: str) -> tuple[subprocess.Popen, object]:
    log = tmp_path / f"{name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("STRATA_API_KEY", None)
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0",
                                 "--threads", "1", "--model", str(model), "--ctx", "512", "--batch", "0",
                                 "--conversation-cache-mib", "0", "--conversation-cache-cold-dir", str(cold),
                                 "--conversation-cache-cold-mib", "16", *flags],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    return proc, log


def stop(proc: subprocess.Popen) -> None:
    stop_server(proc, wait_s=60.0)


def test_a_second_server_of_the_model_on_the_folder_is_refused_before_it_loads(tiny_model_factory, tmp_path):
    model, other_model = tiny_model_factory(), tiny_model_factory(n_ff=256)   # another header: another model
    cold = tmp_path / "cold"
    first, first_log = start(model, cold, tmp_path, "first")
    procs = [first]
    try:
        listening_port(first_log, first)
        second, second_log = start(model, cold, tmp_path, "second")
        procs.append(second)
        assert second.wait(60) == CONFIGURATION_REFUSED
        said = second_log.read_text()
        assert f"--conversation-cache-cold-dir {cold}: this folder is in use by another strata serve of this " \
               f"model (pid {first.pid}" in said, said
        assert "listening on" not in said and "Traceback" not in said, said

        other, other_log = start(other_model, cold, tmp_path, "other")   # another model: shares it as before
        procs.append(other)
        listening_port(other_log, other)
        assert other.poll() is None

        first.kill()                   # however it ends: the lock goes with the process
        first.wait(30)
        again, again_log = start(model, cold, tmp_path, "again")
        procs.append(again)
        listening_port(again_log, again)
        assert again.poll() is None
    finally:
        for p in procs:
            stop(p)
