"""The Qt wizard walked page by page, offscreen: the same file as the terminal wizard for the same
answers, refused answers stay on their page with the reason, and a screenshot of every page is saved
to test-artifacts/installer/ for review."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QApplication, QWizard  # noqa: E402
from strata.installer import config_file, flow  # noqa: E402
from strata.installer.cli import run_terminal  # noqa: E402
from strata.installer.wizard.setup_wizard import SetupWizard  # noqa: E402

from tests.installer.conftest import next_page  # noqa: E402

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "installer"


def _shot(wizard, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    QApplication.processEvents()  # let the layouts settle before the picture
    assert wizard.grab().save(str(SHOTS / f"{name}.png"))


@pytest.fixture
def situation(tmp_path, default_model_path):
    return flow.starting_situation(cold_dir=tmp_path / "cold")


def _walk(qtbot, wizard, concurrency, keep, folder, ctx, shots=False):
    wizard.show()
    page = wizard.currentPage()
    assert page is wizard.page(wizard.page_ids["model"])
    if shots:
        _shot(wizard, "1-model")
    page = next_page(qtbot, wizard, "bench")
    qtbot.waitUntil(page.isComplete, timeout=120000)
    if shots:
        _shot(wizard, "2-bench")
    page = next_page(qtbot, wizard, "concurrency")
    if shots:
        _shot(wizard, "3-concurrency")
    (page.one if concurrency == "one" else page.several).setChecked(True)
    page = next_page(qtbot, wizard, "disk")
    if shots:
        _shot(wizard, "4-disk")
    page.keep.setChecked(keep)
    if folder:
        page.folder.setText(str(folder))
    page = next_page(qtbot, wizard, "context")
    if shots:
        _shot(wizard, "5-context")
    page.combo.setCurrentText(ctx)
    page = next_page(qtbot, wizard, "plan")
    if shots:
        _shot(wizard, "6-plan")
    wizard.button(QWizard.WizardButton.FinishButton).click()
    qtbot.waitUntil(lambda: wizard.written is not None, timeout=5000)
    return wizard.written


def _terminal(situation, path, typed):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    args = argparse.Namespace(yes=False, config=path, show=False, model=None, cold_dir=None,
                              skip_bench=True, disk_bench_mib=8)
    assert run_terminal(args, Tty(typed), io.StringIO(), situation=situation) == 0
    return config_file.read(path)[0]


def _same(a, b):
    a, b = dict(a), dict(b)
    # the free space of the cold folder is measured by each wizard; its 25 % budget is rounded to 1 GiB
    assert abs(a.pop("conversation_cache_cold_mib") - b.pop("conversation_cache_cold_mib")) <= 1024
    assert a == b


def test_the_qt_wizard_writes_what_the_terminal_writes(qtbot, tmp_path, situation):
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=situation, disk_bench_mib=8)
    qtbot.addWidget(wizard)
    written = _walk(qtbot, wizard, "one", True, tmp_path / "elsewhere", "4096", shots=True)
    qt = config_file.read(written)[0]
    term = _terminal(situation, tmp_path / "term.toml", f"\none\nyes\n{tmp_path / 'elsewhere'}\n4096\n")
    _same(qt, term)
    assert (qt["batch"], qt["ctx"], qt["conversation_cache_cold_dir"]) == (0, 4096, str(tmp_path / "elsewhere"))


def test_the_defaults_match_the_terminal_defaults(qtbot, tmp_path, situation):
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=situation, run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    for name in ("bench", "concurrency", "disk", "context", "plan"):
        next_page(qtbot, wizard, name)
    wizard.button(QWizard.WizardButton.FinishButton).click()
    qtbot.waitUntil(lambda: wizard.written is not None, timeout=5000)
    _same(config_file.read(wizard.written)[0], _terminal(situation, tmp_path / "t.toml", "\n" * 6))


def test_the_keyboard_starts_on_the_chosen_answer(qtbot, tmp_path, situation):
    """One request or several: the focus starts on the answer chosen, so Space keeps it (it started on "One
    request at a time" whatever the default: Space then switched a keyboard user to one request)."""
    from PySide6.QtCore import Qt

    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=situation, run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.waitExposed(wizard)
    next_page(qtbot, wizard, "bench")
    page = next_page(qtbot, wizard, "concurrency")
    chosen = page.several if page.several.isChecked() else page.one
    qtbot.wait(50)                          # the wizard sets the page's focus on the event loop
    assert QApplication.focusWidget() is chosen
    qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Space)
    assert chosen.isChecked()


def test_a_model_trained_on_fewer_tokens_than_the_first_step_lists_its_context(qtbot, tmp_path, tiny_model_factory):
    """The context list was empty for a model trained on 1,024 tokens (every step is 2,048 or more)."""
    model = tiny_model_factory(ctx_len=1024)
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=flow.starting_situation(cold_dir=tmp_path / "c"),
                         run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    wizard.currentPage().combo.setCurrentText(str(model))
    for name in ("bench", "concurrency", "disk"):
        next_page(qtbot, wizard, name)
    page = next_page(qtbot, wizard, "context")
    assert [page.combo.itemText(i) for i in range(page.combo.count())] == ["1024"]
    assert page.combo.currentText() == "1024" and "whole trained context" in page.reason.text()


def test_a_refused_answer_stays_on_its_page_with_the_reason(qtbot, tmp_path, situation):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=situation, run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    model = wizard.currentPage()
    model.combo.setCurrentText(str(tmp_path / "missing.gguf"))
    wizard.next()
    assert wizard.currentPage() is model and "no such file" in model.error.text()
    model.combo.setCurrentIndex(0)
    for name in ("bench", "concurrency", "disk"):
        page = next_page(qtbot, wizard, name)
    page.keep.setChecked(True)
    page.folder.setText(str(blocker / "sub"))
    wizard.next()
    assert wizard.currentPage() is page and "cannot write to" in page.error.text()
    _shot(wizard, "4b-disk-refused")
    page.keep.setChecked(False)
    assert not page.folder.isEnabled()
    page = next_page(qtbot, wizard, "context")
    page.combo.setCurrentText("lots")
    wizard.next()
    assert wizard.currentPage() is page and "not a number of tokens" in page.error.text()
    _shot(wizard, "5b-context-refused")
    # Back to the first question and a different answer: the later defaults are asked again
    wizard.back()
    wizard.back()
    page = wizard.currentPage()
    assert page is wizard.page(wizard.page_ids["concurrency"])
    page.one.setChecked(True)
    next_page(qtbot, wizard, "disk")
    ctx_page = next_page(qtbot, wizard, "context")
    assert wizard.answers.ctx is None and ctx_page.combo.currentText() == "8192"


def test_run_wizard_is_the_apps_entry_point():
    from strata.installer.wizard import SetupWizard as exported
    from strata.installer.wizard import run_wizard

    assert exported is SetupWizard and callable(run_wizard)


def _drive(qtbot, monkeypatch, tmp_path, action):
    """run_wizard as the app calls it (modal, real machine), with a timer playing the user."""
    from PySide6.QtCore import QTimer
    from strata.installer.wizard import run_wizard

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    timer = QTimer()
    timer.setInterval(50)

    def tick():
        wizard = QApplication.activeModalWidget()
        if isinstance(wizard, SetupWizard):
            action(wizard)

    timer.timeout.connect(tick)
    timer.start()
    try:
        return run_wizard(None, tmp_path / "app.toml")
    finally:
        timer.stop()


def test_run_wizard_returns_none_when_cancelled(qtbot, monkeypatch, tmp_path, default_model_path):
    assert _drive(qtbot, monkeypatch, tmp_path, lambda w: w.reject()) is None
    assert not (tmp_path / "app.toml").exists()


def test_run_wizard_returns_the_file_written(qtbot, monkeypatch, tmp_path, default_model_path):
    def press(wizard):
        if wizard.currentPage().isComplete():
            if wizard.currentId() == wizard.page_ids["plan"]:
                wizard.button(QWizard.WizardButton.FinishButton).click()
            else:
                wizard.next()

    path = _drive(qtbot, monkeypatch, tmp_path, press)
    assert path == tmp_path / "app.toml" and config_file.read(path)[0]["model"] == default_model_path.stem


def test_cancel_during_the_bench_stops_it_and_leaves_no_file(qtbot, tmp_path, situation):
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=situation, disk_bench_mib=2048)
    qtbot.addWidget(wizard)
    wizard.show()
    bench = next_page(qtbot, wizard, "bench")
    qtbot.waitUntil(lambda: bench.bar.value() > 0, timeout=30000)
    wizard.reject()                # the window closes once the bench's thread has ended, without waiting here
    qtbot.waitUntil(lambda: not wizard.isVisible(), timeout=5000)
    assert bench._running == {}
    assert not list((tmp_path / "cold").glob(".strata-bench-*")) and not (tmp_path / "qt.toml").exists()


def test_the_bench_bar_moves_forward_and_shows_it_is_busy_while_the_engine_measures(qtbot, tmp_path, situation):
    """The bar stood at 0 % while the engine loaded and measured the model (no progress comes from there: a
    minute for a large model), jumped to 100 %, then fell back to 50 % for the disk's part (a new-user trial).
    Watched as the user sees it: the bar's state every few milliseconds while the bench runs."""
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=situation, disk_bench_mib=8)
    qtbot.addWidget(wizard)
    wizard.show()
    bench = next_page(qtbot, wizard, "bench")
    seen = []

    def watch():
        state = (bench.bar.value(), bench.bar.maximum())
        if not seen or seen[-1] != state:
            seen.append(state)
        return bench.isComplete()

    qtbot.waitUntil(watch, timeout=120000)
    watch()
    assert seen[0][1] == 0 or seen[1][1] == 0, seen      # busy (no maximum) while the engine measures
    shown = [v for v, top in seen if top]                 # percentages, whenever the bar counts
    assert shown == sorted(shown) and shown[-1] == 100, seen
    assert (bench.bar.value(), bench.bar.maximum()) == (100, 100)


def test_the_wizard_opens_inside_a_200_percent_laptop_screen(tmp_path):
    """1920x1080 at 200 % is 960x540 logical pixels: the wizard's least size was 900x600, so its Next and Finish
    buttons were below the screen's edge on the first run."""
    from tests.monitor.test_small_windows import window_frame_on_a_screen

    code = ("from strata.installer.wizard.setup_wizard import SetupWizard; "
            f"w = SetupWizard(None, {str(tmp_path / 'config.toml')!r}, run_bench=False)")
    x, y, w, h = frame = window_frame_on_a_screen(tmp_path, 960, 540, code)
    assert x >= 0 and y >= 0 and x + w <= 960 and y + h <= 540 - 30, frame



def test_the_free_space_shown_is_the_typed_folders(qtbot, tmp_path, situation):
    """The line under the folder said the proposed folder's free space whatever folder was typed (a new-user
    trial typed /proc/strata and read '68.8 GiB free there' beside it)."""
    import shutil
    from dataclasses import replace as dc_replace

    from strata.installer.plan_memory import gib

    odd = dc_replace(situation, cold_disk=dc_replace(situation.cold_disk, free_mib=123_456))   # 120.6 GiB
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=odd, run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    for name in ("bench", "concurrency", "disk"):
        page = next_page(qtbot, wizard, name)
    assert page.folder_reason.text() == "120.6 GiB free there"
    page.keep.setChecked(True)
    page.folder.setText(str(tmp_path / "elsewhere"))
    free = gib(shutil.disk_usage(tmp_path).free // 2**20)
    assert page.folder_reason.text() == f"{free} free there"
    page.folder.setText("")
    assert page.folder_reason.text() == ""


def test_the_plan_page_names_the_keys_kept_from_the_file_there(qtbot, tmp_path, situation):
    path = tmp_path / "qt.toml"
    path.write_text('port = 8123\napi_key = "sk-1"\n\n[env]\nSTRATA_RESTORE_LADDER = "0"\n', encoding="utf-8")
    wizard = SetupWizard(config_path=path, situation=situation, run_bench=False)
    qtbot.addWidget(wizard)
    wizard.show()
    for name in ("bench", "concurrency", "disk", "context"):
        next_page(qtbot, wizard, name)
    page = next_page(qtbot, wizard, "plan")
    assert page.target.text().endswith("kept from the file there (keys setup does not decide): port, api_key, [env]")
    wizard.button(QWizard.WizardButton.FinishButton).click()
    qtbot.waitUntil(lambda: wizard.written is not None, timeout=5000)
    values = config_file.read(wizard.written)[0]
    assert (values["port"], values["api_key"], values["env"]) == (8123, "sk-1", {"STRATA_RESTORE_LADDER": "0"})
