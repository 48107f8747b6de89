"""The Qt setup wizard: a QWizard holding what is measured and answered, and its pages in order.

What it is: the window and the shared state (`Situation`, `Answers`, where the file goes). The
pages (one class per step) live beside it; the decisions are `strata.installer.plan`'s and the
measuring and writing `strata.installer.flow`'s, exactly as for `strata setup` in a terminal, so
the same answers write the same file. What it is not: the first-run logic of the app.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtWidgets import QWizard
from strata.installer import config_file, flow
from strata.installer.plan import QUESTION_ORDER
from strata.installer.plan_types import Answers, Plan, Situation
from strata.installer.wizard.bench_page import BenchPage
from strata.installer.wizard.model_page import ModelPage
from strata.installer.wizard.plan_page import PlanPage
from strata.installer.wizard.question_pages import ConcurrencyPage, ContextPage, DiskPage


class SetupWizard(QWizard):
    """Model -> bench -> one request or several -> conversations on disk -> context -> the plan."""

    PAGE_ORDER = ("model", "bench", "concurrency", "disk", "context", "plan")

    def __init__(self, parent=None, config_path: str | Path | None = None,
                 situation: Situation | None = None, disk_bench_mib: int = 256, run_bench: bool = True):
        super().__init__(parent)
        self.setWindowTitle("Strata setup")
        self.setWizardStyle(QWizard.WizardStyle.ClassicStyle)
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage, True)
        self.setMinimumSize(900, 600)
        self.situation: Situation = situation or flow.starting_situation()
        self.answers = Answers()
        self.config_path = Path(config_path).expanduser() if config_path else config_file.configured_path()
        self.disk_bench_mib = disk_bench_mib
        self.run_bench = run_bench
        self.plan: Plan | None = None
        self.written: Path | None = None
        self.page_ids: dict[str, int] = {}
        for name, page in zip(self.PAGE_ORDER, (ModelPage(), BenchPage(), ConcurrencyPage(), DiskPage(),
                                                 ContextPage(), PlanPage()), strict=True):
            self.page_ids[name] = self.addPage(page)

    def done(self, result: int) -> None:
        """Finish or Cancel: a bench still running is told to stop and its thread joined first."""
        self.page(self.page_ids["bench"]).stop()
        super().done(result)

    def forget_from(self, key: str) -> None:
        """Drop the answers to `key` and every later question (their defaults depend on earlier ones)."""
        later = QUESTION_ORDER[QUESTION_ORDER.index(key):]
        self.answers = replace(self.answers, **{k: None for k in later})

    def write(self) -> Path:
        """Make the plan for the answers so far and write it (what Finish does)."""
        self.plan, self.written = flow.finish(self.situation, self.answers, self.config_path)
        return self.written
