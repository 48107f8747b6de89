"""Back and Cancel while the engine's bench runs, offscreen: the window answers at once (it waited on the GUI
thread for the bench to end, up to two minutes with a big model), the bench's process ends with it, and a
later Next runs a bench of its own that the stopped one does not finish."""

from __future__ import annotations

import time
from dataclasses import replace

import psutil
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QWizard  # noqa: E402
from strata.installer import flow  # noqa: E402
from strata.installer.wizard.setup_wizard import SetupWizard  # noqa: E402

from tests.installer.test_bench_process import SLOW, running_benches  # noqa: E402

ANSWERS_WITHIN_S = 2.0   # the bench below takes 8 s or more: a wizard that waits for it fails by far


@pytest.fixture
def slow_wizard(qtbot, tmp_path, tiny_model_factory):
    """A wizard whose engine bench takes seconds for real: `strata bench` without --quick (prefill of 512 and
    2048 tokens, 128 decode steps, four contexts) on a 4-layer, 1024-wide F16 model, with one thread (8.4 s
    on the machine this was written on)."""
    model = tiny_model_factory(**SLOW)
    s = flow.starting_situation(cold_dir=tmp_path / "cold", extra_model=str(model), model_reason="the test's")
    s = replace(s, machine=replace(s.machine, n_cores=1))
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=s, disk_bench_mib=8, quick_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.waitExposed(wizard)
    assert wizard.page(wizard.page_ids["model"]).combo.currentText() == str(model)
    return wizard


def _benches() -> list[psutil.Process]:
    """This process's `strata bench` children still running."""
    return running_benches(psutil.Process())


def _into_the_engine_bench(qtbot, wizard):
    wizard.next()
    bench = wizard.page(wizard.page_ids["bench"])
    qtbot.waitUntil(lambda: wizard.currentPage() is bench, timeout=5000)
    qtbot.waitUntil(lambda: len(_benches()) == 1, timeout=10000)
    qtbot.wait(500)                                   # the engine is loading or measuring
    assert not bench.isComplete()
    return bench


def test_cancel_during_the_engine_bench_closes_the_window_at_once(qtbot, slow_wizard):
    wizard = slow_wizard
    bench = _into_the_engine_bench(qtbot, wizard)
    process = _benches()[0]
    t0 = time.monotonic()
    wizard.button(QWizard.WizardButton.CancelButton).click()      # returns at once: the wait is on the event loop
    clicked_s = time.monotonic() - t0
    qtbot.waitUntil(lambda: not wizard.isVisible(), timeout=int(ANSWERS_WITHIN_S * 1000))
    assert clicked_s < 0.5 and time.monotonic() - t0 < ANSWERS_WITHIN_S
    assert wizard.result() == QWizard.DialogCode.Rejected
    assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE, "the bench's process outlived it"
    assert bench._running == {}, "a bench thread outlived the window"
    assert wizard.written is None


def test_back_during_the_engine_bench_goes_back_at_once_and_next_runs_a_fresh_bench(qtbot, slow_wizard):
    wizard = slow_wizard
    bench = _into_the_engine_bench(qtbot, wizard)
    first = _benches()[0]
    t0 = time.monotonic()
    wizard.back()
    assert wizard.currentPage() is wizard.page(wizard.page_ids["model"])
    assert time.monotonic() - t0 < 0.5
    qtbot.waitUntil(lambda: not first.is_running() or first.status() == psutil.STATUS_ZOMBIE,
                    timeout=int(ANSWERS_WITHIN_S * 1000))
    qtbot.waitUntil(lambda: bench._running == {}, timeout=int(ANSWERS_WITHIN_S * 1000))   # its thread ended too

    _into_the_engine_bench(qtbot, wizard)                       # Next: a bench of its own, not the stopped one's end
    second = _benches()[0]
    assert second.pid != first.pid
    assert bench.status.text().startswith("engine:"), bench.status.text()
    bench.skip_button.click()
    qtbot.waitUntil(bench.isComplete, timeout=int(ANSWERS_WITHIN_S * 1000) + 3000)   # the 8-MiB disk bench is skipped too
    assert "bench skipped" in bench.results.text()
    assert _benches() == []
