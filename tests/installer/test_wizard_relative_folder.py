"""The disk page's folder typed without a leading `/` or `~`, offscreen: it is under the home folder, not under
the app's working folder (wherever the app was started from: a new-user trial's `conversations` went there),
and an empty folder with the box ticked is refused with what to do, not taken as the working folder."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QWizard  # noqa: E402

from tests.installer.conftest import wizard_at_disk_page  # noqa: E402


@pytest.fixture
def disk_page(qtbot, tmp_path, monkeypatch, default_model_path):
    home, elsewhere = tmp_path / "home", tmp_path / "started here"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    monkeypatch.chdir(elsewhere)
    assert Path.home() == home
    wizard = wizard_at_disk_page(qtbot, tmp_path)
    page = wizard.currentPage()
    assert page is wizard.page(wizard.page_ids["disk"])
    page.keep.setChecked(True)
    return wizard, page, home, elsewhere


def _next_to_context(qtbot, wizard):
    wizard.next()
    qtbot.waitUntil(lambda: wizard.currentPage() is wizard.page(wizard.page_ids["context"]), timeout=5000)


def test_a_relative_folder_is_under_the_home_folder(qtbot, disk_page):
    wizard, page, home, elsewhere = disk_page
    page.folder.setText("strata conversations")
    _next_to_context(qtbot, wizard)
    assert wizard.answers.cold_dir == str(home / "strata conversations")
    assert (home / "strata conversations").is_dir() and list(elsewhere.iterdir()) == []
    wizard.back()                                            # the page shows the folder as it is taken
    qtbot.waitUntil(lambda: wizard.currentPage() is page, timeout=5000)
    assert page.folder.text() == str(home / "strata conversations")
    wizard.button(QWizard.WizardButton.CancelButton).click()


def test_a_folder_under_the_tilde_and_an_absolute_one_are_as_typed(qtbot, disk_page, tmp_path):
    wizard, page, home, _ = disk_page
    page.folder.setText("~/kept")
    _next_to_context(qtbot, wizard)
    assert wizard.answers.cold_dir == str(home / "kept")
    wizard.back()
    qtbot.waitUntil(lambda: wizard.currentPage() is page, timeout=5000)
    page.folder.setText(str(tmp_path / "absolute"))
    _next_to_context(qtbot, wizard)
    assert wizard.answers.cold_dir == str(tmp_path / "absolute")


def test_an_empty_folder_is_refused_with_what_to_do(qtbot, disk_page):
    wizard, page, _, elsewhere = disk_page
    page.folder.setText("   ")
    wizard.next()
    qtbot.wait(100)
    assert wizard.currentPage() is page
    assert page.error.text() == "type the folder for the conversations kept on disk, or untick the box above"
    assert list(elsewhere.iterdir()) == []
