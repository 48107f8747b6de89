"""The Qt wizard walked with the keyboard, offscreen, as a new-user trial did: Enter goes to the next page with the
answer shown, whatever Tab did before, and the end of the bench does not leave Enter on Back."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QApplication, QWizard  # noqa: E402
from strata.installer import flow  # noqa: E402
from strata.installer.wizard.setup_wizard import SetupWizard  # noqa: E402


@pytest.fixture
def situation(tmp_path, default_model_path):
    return flow.starting_situation(cold_dir=tmp_path / "cold")


def _at(qtbot, wizard, name):
    qtbot.waitUntil(lambda: wizard.currentPage() is wizard.page(wizard.page_ids[name]), timeout=5000)
    return wizard.currentPage()


def _key(qtbot, key):
    qtbot.keyClick(QApplication.focusWidget(), key)
    qtbot.wait(50)


def _tab_round(qtbot, start):
    """Tab through the page and the wizard's buttons back to `start` (the user looking around)."""
    for _ in range(8):
        _key(qtbot, Qt.Key.Key_Tab)
        if QApplication.focusWidget() is start:
            return
    raise AssertionError(f"Tab never came back to {start.objectName()}")


def test_enter_in_a_list_after_tab_takes_the_answer_shown_and_goes_on(qtbot, tmp_path, situation):
    """The model and context lists took Enter for their inline completer once Tab had selected their text: on the
    context page it put back the first row (2048 tokens in place of the 8192 shown) and stayed there; on the model
    page it stayed there."""
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=situation, run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.waitExposed(wizard)
    model = _at(qtbot, wizard, "model")
    shown_model = model.combo.currentText()
    qtbot.wait(50)
    assert QApplication.focusWidget() is model.combo
    _tab_round(qtbot, model.combo)
    _key(qtbot, Qt.Key.Key_Return)
    _at(qtbot, wizard, "bench")
    assert wizard.answers.model == shown_model
    for name in ("concurrency", "disk", "context"):
        wizard.next()
        page = _at(qtbot, wizard, name)
        qtbot.wait(50)                                   # the pages set their focus on the event loop
    shown = page.combo.currentText()
    assert shown != page.combo.itemText(0), "the case needs a default that is not the list's first row"
    assert QApplication.focusWidget() is page.combo
    _tab_round(qtbot, page.combo)
    _key(qtbot, Qt.Key.Key_Return)
    _at(qtbot, wizard, "plan")
    assert wizard.answers.ctx == int(shown)
    _key(qtbot, Qt.Key.Key_Return)                       # the plan's Enter is Finish
    qtbot.waitUntil(lambda: wizard.written is not None, timeout=5000)


def test_enter_after_the_bench_goes_on_not_back(qtbot, tmp_path, situation):
    """The Skip button had the focus while the bench ran; disabled at its end, it handed the focus to Back, and
    Enter then went back to the model page (whose Next ran the whole bench again)."""
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=situation, disk_bench_mib=8)
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.waitExposed(wizard)
    wizard.next()
    bench = _at(qtbot, wizard, "bench")
    qtbot.waitUntil(lambda: QApplication.focusWidget() is bench.skip_button or bench.isComplete(), timeout=5000)
    assert QApplication.focusWidget() is bench.skip_button, "the case: Skip has the focus while the bench runs"
    assert bench.bar.isVisible() and bench.skip_button.isVisible()
    qtbot.waitUntil(bench.isComplete, timeout=120000)
    assert QApplication.focusWidget() is wizard.button(QWizard.WizardButton.NextButton)
    _key(qtbot, Qt.Key.Key_Return)
    _at(qtbot, wizard, "concurrency")
