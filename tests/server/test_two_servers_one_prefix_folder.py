"""A second `strata serve` of the same model on the segment tier's or the system-prompt cache's folder that a running
server holds is refused before it loads (exit status 2), in the words a level's folder is (server_lock.py). Before,
those folders were not locked: each server indexes them once and evicts only what it indexed, so two of one model
could keep the folder past its budget (each counting its own files) and each evict files the other still counts.
A server of another model shares the folder as before. Real servers in subprocesses, tiny models, each with a cold
folder of its own."""

from __future__ import annotations

import pytest

from strata.exit_status import CONFIGURATION_REFUSED
from tests.server.test_auth_and_lifecycle import listening_port
from tests.server.test_two_servers_one_cache_folder import start, stop


@pytest.mark.parametrize("store", ["segment", "system-prompt"])
def test_a_second_server_of_the_model_on_a_prefix_folder_is_refused(tiny_model_factory, tmp_path, store):
    model, other_model = tiny_model_factory(), tiny_model_factory(n_ff=256)   # another header: another model
    shared = tmp_path / "shared"
    flags = (f"--conversation-cache-{store}-dir", str(shared), f"--conversation-cache-{store}-mib", "8")
    first, first_log = start(model, tmp_path / "cold-1", tmp_path, "first", *flags)
    procs = [first]
    try:
        listening_port(first_log, first)
        second, second_log = start(model, tmp_path / "cold-2", tmp_path, "second", *flags)
        procs.append(second)
        assert second.wait(60) == CONFIGURATION_REFUSED    # before: it started, the folder shared unlocked
        said = second_log.read_text()
        assert f"--conversation-cache-{store}-dir {shared}: this folder is in use by another strata serve of this " \
               f"model (pid {first.pid}" in said, said
        assert f"--conversation-cache-{store}-mib 0" in said, said       # the advice names the store's own flag
        assert "listening on" not in said and "Traceback" not in said, said
        # its cold folder, claimed before the shared one, was let go with nothing written (the lock file stays)
        assert [p.name for p in (tmp_path / "cold-2").iterdir() if not p.name.startswith(".strata-serve-")] == []

        other, other_log = start(other_model, tmp_path / "cold-3", tmp_path, "other", *flags)   # shares it
        procs.append(other)
        listening_port(other_log, other)
        assert other.poll() is None
    finally:
        for p in procs:
            stop(p)
