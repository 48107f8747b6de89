"""The Qt setup wizard: a QWizard holding what is measured and answered, and its pages in order.

What it is: the window and the shared state (`Situation`, `Answers`, where the file goes). The
pages (one class per step) live beside it; the decisions are `strata.installer.plan`'s and the
measuring and writing `strata.installer.flow`'s, exactly as for `strata setup` in a terminal, so
the same answers write the same file. What it is not: the first-run logic of the app.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWizard
from strata.installer import config_file, flow
from strata.installer.plan import QUESTION_ORDER, default_answers
from strata.installer.plan_types import Answers, Plan, Situation
from strata.installer.wizard.bench_page import BenchPage
from strata.installer.wizard.model_page import ModelPage
from strata.installer.wizard.plan_page import PlanPage
from strata.installer.wizard.question_pages import ConcurrencyPage, ContextPage, DiskPage

DEFAULT_SIZE = (900, 600)
LEAST_SIZE = (640, 440)
TITLE_BAR_PX = 40        # the window manager's frame is unknown before the window is shown: room for it


def fitted_size(size: tuple[int, int], screen) -> tuple[int, int]:
    """`size`, no larger than the screen's free area with a title bar above it (the least size still applies)."""
    if screen is None:
        return size
    free = screen.availableGeometry()
    return min(size[0], free.width()), min(size[1], free.height() - TITLE_BAR_PX)


class SetupWizard(QWizard):
    """Model -> bench -> one request or several -> conversations on disk -> context -> the plan."""

    PAGE_ORDER = ("model", "bench", "concurrency", "disk", "context", "plan")

    def __init__(self, parent=None, config_path: str | Path | None = None,
                 situation: Situation | None = None, disk_bench_mib: int = 256, run_bench: bool = True,
                 fresh: bool = False, no_bench_reason: str = "bench not run", quick_bench: bool = True):
        super().__init__(parent)
        self.setWindowTitle("Strata setup")
        self.setWizardStyle(QWizard.WizardStyle.ClassicStyle)
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage, True)
        # 900x600 where the screen has room; every page also fits 640x440 (the plan's table scrolls): a least
        # size of 900x600 put Next and Finish below the edge of a small logical screen (1920x1080 at 200 %:
        # 960x540; 1366x768 at 125 %)
        self.setMinimumSize(*LEAST_SIZE)
        self.resize(*fitted_size(DEFAULT_SIZE, QGuiApplication.primaryScreen()))
        self.config_path = Path(config_path).expanduser() if config_path else config_file.configured_path()
        # a re-run (the app's "Set up again") proposes the file's own answers; `fresh`: the recommendation
        self.situation: Situation = situation or flow.rerun_situation(self.config_path, fresh=fresh)
        self.answers = Answers()
        self.disk_bench_mib = disk_bench_mib
        self.run_bench = run_bench
        self.quick_bench = quick_bench           # False: the engine's whole bench (`strata bench` without --quick)
        self._closing: int | None = None         # Finish or Cancel waiting for a stopped bench's thread to end
        self.no_bench_reason = no_bench_reason   # what the bench page says when it is not run
        self.plan: Plan | None = None
        self.written: Path | None = None
        self.page_ids: dict[str, int] = {}
        for name, page in zip(self.PAGE_ORDER, (ModelPage(), BenchPage(), ConcurrencyPage(), DiskPage(),
                                                 ContextPage(), PlanPage()), strict=True):
            self.page_ids[name] = self.addPage(page)
        # a re-run's way to the plan's recommendation instead of the file's answers (setup --fresh)
        self.setOption(QWizard.WizardOption.HaveCustomButton1, True)
        self.setButtonText(QWizard.WizardButton.CustomButton1, "Use recommended values")
        self.recommended_button = self.button(QWizard.WizardButton.CustomButton1)
        self.recommended_button.setToolTip("Propose what the plan recommends for this machine and model, not the "
                                           "answers of the configuration file there")
        self.recommended_button.setVisible(self.situation.previous is not None)
        self.customButtonClicked.connect(self._custom_button)

    def _custom_button(self, which: int) -> None:
        if which == QWizard.WizardButton.CustomButton1.value:
            self.use_recommended()

    def use_recommended(self) -> None:
        """Drop the file's answers: this page and the ones after it propose the recommendation."""
        self.situation = replace(self.situation, previous=None)
        self.recommended_button.setVisible(False)
        page = self.currentPage()
        if page is self.page(self.page_ids["plan"]):   # every question answered: the recommended answers instead
            self.answers = default_answers(self.situation, start=Answers(model=self.answers.model))
        if page is not None and page is not self.page(self.page_ids["bench"]):
            page.initializePage()

    def done(self, result: int) -> None:
        """Finish or Cancel: a bench still running is told to stop; the window closes once its thread has ended
        (at once when none runs; a moment after, with the page saying it is stopping, when one does), and the
        event loop runs meanwhile: waiting here froze the window until a big model's bench was done."""
        if self._closing is not None:    # a second Cancel while the bench stops: the first one closes
            return
        bench = self.page(self.page_ids["bench"])
        if bench.stop():
            super().done(result)
            return
        self._closing = result
        for which in (QWizard.WizardButton.BackButton, QWizard.WizardButton.NextButton,
                      QWizard.WizardButton.FinishButton, QWizard.WizardButton.CancelButton):
            self.button(which).setEnabled(False)
        bench.stopped.connect(self._close_after_the_bench)

    def end_now(self) -> None:
        """Cancel, the bench's thread joined here first: the app's shutdown, after which no event loop runs the
        close that `done` leaves to it."""
        self.page(self.page_ids["bench"]).join()
        self.reject()

    def _close_after_the_bench(self) -> None:
        result, self._closing = self._closing, None
        self.page(self.page_ids["bench"]).stopped.disconnect(self._close_after_the_bench)
        if result is not None:
            super().done(result)

    def forget_from(self, key: str) -> None:
        """Drop the answers to `key` and every later question (their defaults depend on earlier ones)."""
        later = QUESTION_ORDER[QUESTION_ORDER.index(key):]
        self.answers = replace(self.answers, **{k: None for k in later})

    def write(self) -> Path:
        """Make the plan for the answers so far and write it (what Finish does)."""
        self.plan, self.written = flow.finish(self.situation, self.answers, self.config_path)
        return self.written
