""""Set up again…" then Finish restarts the server when the model file was replaced under the same path. The
decision compared only the configuration's values (ba00882), so a model file copied over the one the server runs
(a newer quantisation saved under the old name) left the server running the old model, saying the configuration
was the one it runs on. The model file's size, modification time and inode at the server's start are compared with
a look at Finish."""

from __future__ import annotations

import os
import shutil

import tomli_w
from strata.app.controller import AppController
from strata.app.model_file import look
from strata.app.restart_policy import UNCHANGED, ModelFile, RestartConfig, SetupRestart, setup_restarts

try:
    import tomllib
except ModuleNotFoundError:        # Python 3.10
    import tomli as tomllib

from tests.app.test_setup_again_unchanged import RUNNING, finish_changes_nothing, finish_restarts

THEN = ModelFile("/models/m.gguf", "file", True, (1000, 5, 77))


def test_a_model_file_replaced_under_the_same_path_restarts_the_server():
    same = RUNNING.replace("08:00:00", "09:00:00")
    assert setup_restarts(True, RUNNING, same, THEN, THEN) == SetupRestart(False, UNCHANGED)
    for now in (ModelFile("/models/m.gguf", "file", True, (1000, 6, 77)),    # written over: a new time
                ModelFile("/models/m.gguf", "file", True, (1200, 5, 77)),    # another size
                ModelFile("/models/m.gguf", "file", True, (1000, 5, 78)),    # moved over it, its time kept
                ModelFile("/models/m.gguf", "missing", True)):               # gone
        decision = setup_restarts(True, RUNNING, same, THEN, now)
        assert decision.restart and "the model file /models/m.gguf changed" in decision.reason, (now, decision)
    # not known (no probe, an id the server resolves), or the configuration names another file: as before
    assert not setup_restarts(True, RUNNING, same, None, THEN).restart
    assert not setup_restarts(True, RUNNING, same, ModelFile(None), ModelFile(None)).restart
    assert setup_restarts(False, RUNNING, same, THEN, THEN).restart   # not serving: started as before


def test_a_look_tells_a_file_copied_over_the_model_apart(tmp_path, tiny_model_factory):
    path = tmp_path / "m.gguf"
    shutil.copyfile(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3), path)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = look(str(path))
    other = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=4)
    assert os.path.getsize(other) == before.stamp[0]          # the same size: only its time or inode tells
    shutil.copyfile(other, path)
    assert look(str(path)).stamp != before.stamp
    moved = tmp_path / "new.gguf"
    shutil.copyfile(other, moved)
    os.utime(moved, ns=(1_000_000_000, 1_000_000_000))        # `cp -p`: the old file's time kept
    os.replace(moved, path)
    assert look(str(path)).stamp[:2] == before.stamp[:2] and look(str(path)).stamp != before.stamp


def test_finish_after_the_model_file_was_replaced_restarts_the_server(qtbot, app_config, tmp_path,
                                                                      tiny_model_factory):
    # the fixture's model is shared by the session's tests: this one runs on its own copy, which it replaces
    model = tmp_path / "model.gguf"
    values = tomllib.loads(app_config.read_text(encoding="utf-8"))
    shutil.copyfile(values["model"], model)
    app_config.write_text(tomli_w.dumps({**values, "model": str(model)}), encoding="utf-8")
    controller = AppController(app_config, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=1))
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=60_000)
        finish_restarts(qtbot, controller)                         # setup's own file: restarted on it
        # another model of the same size copied over the file the server runs
        shutil.copyfile(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=4), model)
        # before: not restarted, the status bar saying the configuration is the one the server runs on
        finish_restarts(qtbot, controller)
        assert controller.window.statusBar().currentMessage() != f"Set up again: {UNCHANGED}"
        # and with nothing changed since, the next Finish leaves it alone (the look at its start is the file now)
        finish_changes_nothing(qtbot, controller)
    finally:
        controller.shutdown()
