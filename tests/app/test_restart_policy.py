"""The start and restart decisions, table-driven: no I/O, each row's reason checked."""

from __future__ import annotations

import pytest
from strata.app.restart_policy import (
    FREE_PORT,
    Exit,
    ModelFile,
    RestartConfig,
    decide,
    describe_exit,
    names_a_path,
    wait_for_model,
    wait_for_stop,
)

CFG = RestartConfig(max_retries=3, stable_s=60.0)


@pytest.mark.parametrize("exit_, attempts, restart, after, words", [
    (Exit(-9, 5.0, True, False), 0, True, 1, "server killed by SIGKILL; restart 1 of 3"),
    (Exit(-9, 5.0, True, False), 2, True, 3, "restart 3 of 3"),
    (Exit(-9, 5.0, True, False), 3, False, 3, "gave up after 3 restarts in a row"),
    (Exit(-9, 600.0, True, False), 3, True, 1, "restart 1 of 3"),          # ran stably: a new failure
    (Exit(-9, 600.0, False, False), 3, False, 3, "gave up"),               # never healthy: still a loop
    (Exit(1, 0.5, False, False, "boom"), 0, True, 1, "exited with status 1 (boom)"),
    (Exit(-15, 9.0, True, False, "some log line"), 0, True, 1, "killed by SIGTERM; restart"),  # no line
    (Exit(2, 0.3, False, False, "bad --ctx"), 0, False, 0, "refused its configuration"),
    (Exit(2, 0.3, False, False, "bad ctx", config="/c.toml"), 0, False, 0,
     "refused its configuration: exited with status 2 (bad ctx); fix the configuration file (or run the setup again)"),
    # a flag given to the app (./run --port x on a desktop): it said to fix the file, which held nothing wrong
    (Exit(2, 0.3, False, False, "strata serve: --port: expected int, got 'x'", options="--port x"), 0, False, 0,
     "fix the options given to the app (--port x) or the configuration file (or run the setup again)"),
    (Exit(3, 0.4, False, False, "no such file"), 0, False, 0, "could not load its model: exited with status 3 "
                                                               "(no such file); fix what it says, or choose another model"),
    (Exit(3, 90.0, True, False), 0, True, 1, "restart 1 of 3"),             # served first: not the file
    # the server's own line on a failed load says what the reason says: once (a new-user trial read both)
    (Exit(3, 0.4, False, False, "the model could not be loaded: d.gguf: tensor 'x' runs past the end"), 0, False,
     0, "the server could not load its model: d.gguf: tensor 'x' runs past the end; fix what it says"),
    # the file went away (its drive) between the app's look and the load: wait for it, no retry counted
    (Exit(3, 0.4, False, False, "gone.gguf: no such file", model_missing=True), 2, True, 2,
     "could not load its model: exited with status 3 (gone.gguf: no such file); its file is not there now: waiting"),
    # half a file (a copy that paused): it changed while the server read it: wait for it whole, no retry counted
    (Exit(3, 0.9, False, False, "m.gguf: damaged (truncated)", model_changed=True), 1, True, 1,
     "could not load its model: exited with status 3 (m.gguf: damaged (truncated)); its file changed while the "
     "server read it (still being copied?): waiting for it to be whole"),
    (Exit(0, 30.0, True, True), 2, False, 0, "stopped on request"),
    (Exit(1, 0.5, False, False), 1, False, 1, "gave up after 1 restart in a row"),   # STRATA_START_RETRIES=1
    # its address taken (an old server): the same address fails again, so it is not retried (5 tries, 18 s)
    (Exit(4, 0.6, False, False, "cannot listen on 127.0.0.1:8080: Address already in use"), 1, False, 1,
     "the server cannot listen on its address: exited with status 4 (cannot listen on 127.0.0.1:8080: Address "
     "already in use); end the program that holds it, or set another `port` in the configuration file"),
    (Exit(4, 0.6, False, False, "cannot listen on 192.0.2.1:0", on_free_port=True), 0, False, 0,
     "cannot listen even on a free port: exited with status 4 (cannot listen on 192.0.2.1:0); fix `host`"),
    (Exit(4, 0.6, False, False, "cannot listen", config="/home/me/strata.toml"), 0, False, 0,
     "set another `port` in the configuration file /home/me/strata.toml (0: any free port)"),
    # the server's own hint without its terminal advice ('--port chooses another': the app says what to do)
    (Exit(4, 0.6, False, False, "cannot listen on 127.0.0.1:8080: Address already in use (is another server "
                                "running there? --port chooses another)"), 0, False, 0,
     "exited with status 4 (cannot listen on 127.0.0.1:8080: Address already in use (is another server running "
     "there?)); end the program that holds it"),
    (Exit(4, 0.6, False, False, "cannot listen on 127.0.0.1:80: Permission denied (ports below 1024 need "
                                "administrator rights: --port chooses another, e.g. 8080)"), 0, False, 0,
     "(cannot listen on 127.0.0.1:80: Permission denied (ports below 1024 need administrator rights)); "),
    # a host that is not this machine's: no port helps; it said to end the program holding the port
    (Exit(4, 0.6, False, False, "cannot listen on 192.0.2.1:8080: Cannot assign requested address (--host takes "
                                "an address of this machine: 127.0.0.1 (this machine only) or 0.0.0.0 (every "
                                "interface))", config="/home/me/strata.toml"), 0, False, 0,
     "exited with status 4 (cannot listen on 192.0.2.1:8080: Cannot assign requested address); `host` is not an "
     "address of this machine: set it in the configuration file /home/me/strata.toml to 127.0.0.1 (this machine "
     "only) or 0.0.0.0 (every interface), then restart the server"),
])
def test_decide(exit_, attempts, restart, after, words):
    d = decide(exit_, attempts, CFG if "1 restart " not in words else RestartConfig(max_retries=1))
    assert (d.restart, d.attempts) == (restart, after)
    assert words in d.reason
    if exit_.returncode == 4:     # the server's advice to a terminal is not the app's
        assert "--port" not in d.reason and "--host" not in d.reason
    if exit_.returncode < 0:
        assert exit_.last_line not in d.reason or not exit_.last_line


def test_only_a_taken_address_offers_a_free_port():
    taken = decide(Exit(4, 0.6, False, False, "cannot listen"), 0, CFG)
    assert taken.offer == FREE_PORT
    assert decide(Exit(4, 0.6, False, False, "cannot listen", on_free_port=True), 0, CFG).offer == ""
    elsewhere = "cannot listen on 192.0.2.1:8080: Name or service not known (--host takes an address of this machine)"
    assert decide(Exit(4, 0.6, False, False, elsewhere), 0, CFG).offer == ""
    for other in (Exit(1, 0.5, False, False), Exit(2, 0.3, False, False), Exit(3, 0.4, False, False)):
        assert decide(other, 0, CFG).offer == ""


def test_describe_exit():
    assert describe_exit(0) == "exited with status 0"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-200) == "killed by signal 200"


def test_from_env():
    assert RestartConfig.from_env({}).max_retries == 5
    assert RestartConfig.from_env({"STRATA_START_RETRIES": " 0 "}).max_retries == 0
    with pytest.raises(ValueError, match="STRATA_START_RETRIES must be a whole number, got 'many'"):
        RestartConfig.from_env({"STRATA_START_RETRIES": "many"})
    with pytest.raises(ValueError, match="STRATA_START_RETRIES must be >= 0, got -1"):
        RestartConfig.from_env({"STRATA_START_RETRIES": "-1"})


@pytest.mark.parametrize("found, wait, words", [
    (ModelFile(None), False, "the default one or an id"),
    (ModelFile("/media/usb/m.gguf", "file", True), False, "a file"),
    (ModelFile("/media/usb/models", "folder", True), False, "a folder"),     # the server says what is wrong
    (ModelFile("/media/usb/m.gguf", "missing", False), True,
     "for the model file /media/usb/m.gguf: its folder is not there (is its drive mounted?); the server starts by "
     "itself when the file appears, or choose another model (run the setup again)"),
    (ModelFile("/media/usb/m.gguf", "missing", True), True, "its folder is there, the file is not (still being copied"),
])
def test_wait_for_model(found, wait, words):
    d = wait_for_model(found)
    assert d.wait == wait
    assert words in d.reason


FILE = ModelFile("/media/usb/m.gguf", "file", True, (1000, 5))
MISSING = ModelFile("/media/usb/m.gguf", "missing", True)


@pytest.mark.parametrize("found, before, wait, words", [
    (FILE, None, False, "a file"),                                         # there at the first look: start
    (FILE, MISSING, True, "for the model file /media/usb/m.gguf to be whole: it appeared (1,000 bytes)"),
    (ModelFile("/media/usb/m.gguf", "file", True, (4000, 9)), FILE, True, "it is still changing (4,000 bytes now)"),
    (FILE, FILE, False, "a file"),                                         # the same at two looks: whole
    (MISSING, FILE, True, "the file is not"),                              # gone again
])
def test_a_file_that_appears_is_started_once_it_stops_changing(found, before, wait, words):
    """`cp` writes under the final name: a server started on half a file stops as "damaged", not retried."""
    d = wait_for_model(found, before)
    assert d.wait == wait
    assert words in d.reason


@pytest.mark.parametrize("model, path", [
    ("/mnt/models/m.gguf", True), ("~/models/m.gguf", True), ("D:\\models\\m.gguf", True), ("models/m.gguf", True),
    ("SmolLM2-135M-Instruct.Q4_1", False), ("m.gguf", False),     # ids and file names: the server resolves them
])
def test_names_a_path(model, path):
    assert names_a_path(model) == path


def test_model_poll_s_is_checked():
    assert RestartConfig().model_poll_s == 5.0
    with pytest.raises(ValueError, match="model_poll_s must be > 0, got 0"):
        RestartConfig(model_poll_s=0)


@pytest.mark.parametrize("waited, quiet, wait, words", [
    (1.0, 1.0, True, "is stopping"),
    (14.9, 14.9, True, "is stopping"),                  # said nothing yet, within the grace time
    (15.0, 15.0, False, "said nothing of its stop for 15 s"),
    (120.0, 2.0, True, "is stopping"),                  # long, but its progress lines keep coming
    (120.0, 15.0, False, "said nothing of its stop for 15 s"),   # they stopped: stalled
    (600.0, 1.0, False, "still stopping after 600 s"),  # the cap, however it progresses
])
def test_wait_for_stop(waited, quiet, wait, words):
    d = wait_for_stop(waited, quiet, grace_s=15.0, cap_s=600.0)
    assert d.wait is wait and words in d.reason, d
