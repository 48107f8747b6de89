"""The Qt wizard run again on a file (the app's "Set up again"): every page proposes the file's answers, so Next
to the end changes nothing; "Use recommended values" proposes the plan's. Offscreen, real files, a tiny model;
screenshots in test-artifacts/installer/."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QApplication, QWizard  # noqa: E402
from strata.installer import config_file  # noqa: E402
from strata.installer.wizard.setup_wizard import SetupWizard  # noqa: E402

from tests.installer.conftest import next_page  # noqa: E402

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "installer"
ASKED = ("model", "ctx", "batch", "slot_ctx", "conversation_cache_cold_dir", "conversation_cache_cold_mib")


@pytest.fixture(autouse=True)
def own_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _finish(qtbot, wizard):
    wizard.button(QWizard.WizardButton.FinishButton).click()
    qtbot.waitUntil(lambda: wizard.written is not None, timeout=5000)
    return config_file.read(wizard.written)[0]


def test_next_to_the_end_keeps_every_answer_of_the_file(qtbot, own_answers):
    before, _ = config_file.read(own_answers)
    wizard = SetupWizard(config_path=own_answers, run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    assert wizard.recommended_button.isVisible()
    next_page(qtbot, wizard, "bench")
    page = next_page(qtbot, wizard, "concurrency")
    assert page.several.isChecked() and "batch = 2" in page.reason.text()
    page = next_page(qtbot, wizard, "disk")
    assert page.keep.isChecked() and page.folder.text() == before["conversation_cache_cold_dir"]
    page = next_page(qtbot, wizard, "context")
    assert page.combo.currentText() == "2048" and "recommended: " in page.reason.text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    QApplication.processEvents()
    assert wizard.grab().save(str(SHOTS / "rerun-context.png"))
    next_page(qtbot, wizard, "plan")
    after = _finish(qtbot, wizard)
    assert {k: after[k] for k in ASKED} == {k: before[k] for k in ASKED} and after["port"] == 8123


def test_use_recommended_values_proposes_the_plans(qtbot, own_answers):
    wizard = SetupWizard(config_path=own_answers, run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    next_page(qtbot, wizard, "bench")
    next_page(qtbot, wizard, "concurrency")
    wizard.button(QWizard.WizardButton.CustomButton1).click()
    assert not wizard.recommended_button.isVisible()
    next_page(qtbot, wizard, "disk")
    page = next_page(qtbot, wizard, "context")
    assert page.combo.currentText() != "2048"
    next_page(qtbot, wizard, "plan")
    after = _finish(qtbot, wizard)
    assert after["ctx"] != 2048 and after["batch"] != 2 and after["port"] == 8123


def test_a_first_run_has_no_such_button(qtbot, tmp_path, default_model_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    wizard = SetupWizard(config_path=tmp_path / "none.toml", run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    assert not wizard.recommended_button.isVisible()
