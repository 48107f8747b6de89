"""Quitting the app while Set up again's bench runs (no server, so the bench runs): the app's last step stops
the bench at once and joins its thread, instead of waiting for the bench to end (the wizard's Cancel no longer
waits on the GUI thread, and a QThread still running when the wizard is destroyed aborts the process)."""

from __future__ import annotations

import time
from dataclasses import replace

import psutil
import tomli_w
from shiboken6 import isValid
from strata.app.controller import AppController
from strata.app.restart_policy import RestartConfig
from strata.installer.config_file import read

from tests.installer.test_wizard_bench_stop import _benches


def test_quit_during_the_bench_stops_it_and_closes_the_wizard_at_once(qtbot, app_config, tmp_path,
                                                                       tiny_model_factory):
    values, _ = read(app_config)
    app_config.write_text(tomli_w.dumps({**values, "model": str(tmp_path / "moved.gguf")}), encoding="utf-8")
    text = app_config.read_bytes()
    slow = tiny_model_factory(n_layer=4, n_embd=1024, n_head=8, n_head_kv=8, n_ff=4096, dtype="F16", ctx_len=4096)
    controller = AppController(app_config, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=1))
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "waiting", timeout=60_000)
        controller.setup_action.trigger()
        qtbot.waitUntil(lambda: controller.setup_wizard is not None and controller.setup_wizard.isVisible(),
                        timeout=10_000)
        wizard = controller.setup_wizard
        assert wizard.run_bench
        wizard.quick_bench = False                       # the whole bench: 8 s or more with one thread
        wizard.situation = replace(wizard.situation, machine=replace(wizard.situation.machine, n_cores=1))
        wizard.page(wizard.page_ids["model"]).combo.setCurrentText(str(slow))
        wizard.next()
        bench = wizard.page(wizard.page_ids["bench"])
        qtbot.waitUntil(lambda: wizard.currentPage() is bench and len(_benches()) == 1, timeout=10_000)
        process = _benches()[0]
        qtbot.wait(500)
        assert not bench.isComplete()
    finally:
        t0 = time.monotonic()
        controller.shutdown()
        took = time.monotonic() - t0
    assert took < 3.0, f"the quit waited {took:.1f} s for the bench"
    # the shutdown waits for the server's stop in an event loop of its own, where the wizard's deleteLater is done
    assert controller.setup_wizard is None and (not isValid(wizard) or not wizard.isVisible())
    assert bench._running == {}
    assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    assert app_config.read_bytes() == text
