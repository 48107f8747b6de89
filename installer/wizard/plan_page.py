"""The wizard's last page: the plan, every choice with its reason, and where the file goes.

Finish writes the file (`SetupWizard.write`); a write that fails shows the reason and stays here.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWizardPage,
)
from strata.installer import config_file, flow
from strata.installer.wizard.common import error_label

# The table's columns at a narrow window (640x440, the wizard's least size): the setting and value columns took 446
# of the table's 572 px there, the reasons' 126 px a word or two a line and cut "SmolLM2-135M-Instruct.Q4_1:"
WHY_LEAST_SHARE = 0.45      # the reasons keep at least this share of the table's width
SETTING_MOST_SHARE = 0.3    # a longer key wraps at its underscores
VALUE_MOST_PX = 200         # a longer value (a path, a model's file name) is elided in the middle, whole in its tooltip
BREAK = "_\u200b"           # a key's underscore shown with a zero-width space after it: a line may break there


def column_widths(width: int, setting_px: int, value_px: int) -> tuple[int, int]:
    """The setting and value columns' widths in a table `width` px wide whose longest key and value need `setting_px`
    and `value_px`: each what it needs, at most its cap; the reasons get the rest, at least WHY_LEAST_SHARE."""
    setting = min(setting_px, int(width * SETTING_MOST_SHARE))
    value = max(0, min(value_px, VALUE_MOST_PX, width - setting - math.ceil(width * WHY_LEAST_SHARE)))
    return setting, value


def shown_value(value: object) -> str:
    """A choice's value as the table shows it: an empty folder is a level that is off, said so ("off"; the table
    showed the TOML's `""`, which a new-user trial read as a value missing). The file still gets `""`."""
    return "off" if value == "" else str(value)


def kept_note(plan, path) -> str:
    """What the page says of the file already there: the keys it keeps (config_file.carried_over), or that it
    cannot read it; "" when there is none."""
    if path is None:
        return ""
    previous, _, unreadable = config_file.previous_file(path)
    if unreadable:
        return f"; the file there cannot be read, so none of its keys are kept ({unreadable}); it is kept as .bak"
    kept = config_file.carried_over(plan, previous)
    if not kept:
        return ""
    names = ", ".join(f"[{k}]" if isinstance(v, dict) else k for k, v in kept.items())
    return f"; kept from the file there (keys setup does not decide): {names}"


class PlanPage(QWizardPage):
    def __init__(self) -> None:
        super().__init__()
        self.setTitle("The plan")
        self.setSubTitle("What Strata will use, and why. Finish writes it; `strata serve` and the app read it.")
        self.table = QTableWidget(0, 3)
        self.table.setObjectName("plan")
        self.table.setHorizontalHeaderLabels(["setting", "value", "why"])
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Fixed)  # column_widths, at each resize of the table
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Fixed)  # long paths are elided, full in the tooltip
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.setColumnWidth(1, VALUE_MOST_PX)
        self.table.viewport().installEventFilter(self)
        # the reasons wrap to the width their column has once laid out: rows sized before that (at the page's first
        # show) kept the narrower column's heights, the model's reason 6 lines tall for its 3 (a new-user trial)
        self._fit_due = False
        header.sectionResized.connect(self._fit_rows)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.warnings = QLabel("")
        self.warnings.setWordWrap(True)
        self.warnings.setStyleSheet("color: #a05a00;")
        self.target = QLabel("")
        self.target.setWordWrap(True)
        self.error = error_label()
        layout = QVBoxLayout(self)
        for widget in (self.table, self.warnings, self.target, self.error):
            layout.addWidget(widget)

    def initializePage(self) -> None:
        w = self.wizard()
        plan = flow.plan_for(w.situation, w.answers, w.config_path)
        self.table.setRowCount(len(plan.choices))
        for row, c in enumerate(plan.choices):
            value = shown_value(c.value)
            for col, text in enumerate((c.key, value, c.reason)):
                item = QTableWidgetItem(text.replace("_", BREAK) if col == 0 else text)
                item.setToolTip(text)
                self.table.setItem(row, col, item)
        self._fit_columns()
        self.table.resizeRowsToContents()
        self.warnings.setText("\n".join(f"Warning: {x}" for x in plan.warnings))
        self.target.setText(f"Will be written to {w.config_path}" + kept_note(plan, w.config_path))
        self.error.setText("")

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table.viewport() and event.type() == QEvent.Type.Resize:
            self._fit_columns()
        return False

    def _fit_columns(self) -> None:
        """The setting and value columns as column_widths gives them for the table's width now (the rows follow:
        _fit_rows, at the sections' resize)."""
        t = self.table
        setting, value = column_widths(t.viewport().width(), t.sizeHintForColumn(0), t.sizeHintForColumn(1))
        t.setColumnWidth(0, setting)
        t.setColumnWidth(1, value)

    def _fit_rows(self, *_) -> None:
        """After the layout pass that resized the column (during it, the rows measured the width it had before)."""
        if not self._fit_due:
            self._fit_due = True
            QTimer.singleShot(0, self, self._fit_rows_now)

    def _fit_rows_now(self) -> None:
        self._fit_due = False
        self.table.resizeRowsToContents()

    def validatePage(self) -> bool:
        try:
            self.wizard().write()
        except OSError as e:
            self.error.setText(f"cannot write {self.wizard().config_path}: {e.strerror or e}")
            return False
        return True
