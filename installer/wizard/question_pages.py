"""The wizard's three question pages: one request or several, conversations on disk (and where),
the context size. One QWizardPage class per step.

Each page asks `plan.question_for` for its question (its default and the default's reason, shown
beside the choice), and on Next parses the answer with `plan.parse_answer` and records it with
`flow.accept`, as the terminal wizard does; a refused answer shows the reason and stays on the page.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWizardPage,
)
from strata.installer import flow
from strata.installer.plan import parse_answer, question_for
from strata.installer.plan_types import AnswerError, PlanParameters
from strata.installer.profile import disk_facts
from strata.installer.wizard.common import answer_combo, error_label, reason_label, why


class _QuestionPage(QWizardPage):
    """A page answering one or more of the plan's questions, in order."""

    keys: tuple[str, ...] = ()

    def __init__(self, title: str, subtitle: str) -> None:
        super().__init__()
        self.setTitle(title)
        self.setSubTitle(subtitle)
        self.layout_ = QVBoxLayout(self)
        self.error = error_label()

    def initializePage(self) -> None:
        w = self.wizard()
        w.forget_from(self.keys[0])
        self.error.setText("")
        self.show_question(question_for(self.keys[0], w.situation, w.answers))

    def show_question(self, q) -> None:
        raise NotImplementedError

    def answer_texts(self) -> dict[str, str | None]:
        """key -> the typed text for it (None: that question is not asked)."""
        raise NotImplementedError

    def refused(self, key: str, reason: str) -> str:
        """What the page says when the answer to `key` is refused for `reason` (the terminal adds its own way on:
        "pass another --cold-dir PATH")."""
        return reason

    def validatePage(self) -> bool:
        w = self.wizard()
        s, a = w.situation, w.answers
        key = ""
        try:
            for key, text in self.answer_texts().items():
                if text is None:
                    continue
                q = question_for(key, s, a)
                s, a = flow.accept(s, a, q, parse_answer(q, text, s, a))
        except AnswerError as e:
            self.error.setText(self.refused(key, str(e)))
            return False
        w.situation, w.answers = s, a
        self.error.setText("")
        return True


class ConcurrencyPage(_QuestionPage):
    keys = ("concurrency",)

    def __init__(self) -> None:
        super().__init__("One request at a time, or several?",
                         "Several keeps batch slots beside the main context, so side requests (titles, "
                         "summaries) and a second agent do not wait or evict a long conversation.")
        self.one = QRadioButton("One request at a time: all memory to one conversation")
        self.several = QRadioButton("Several at once: batch slots beside the main context")
        self.one.setObjectName("one")
        self.several.setObjectName("several")
        self.group = QButtonGroup(self)
        for b in (self.one, self.several):
            self.group.addButton(b)
            self.layout_.addWidget(b)
        self.reason = reason_label()
        self.layout_.addWidget(self.reason)
        self.layout_.addWidget(self.error)
        self.layout_.addStretch(1)

    def show_question(self, q) -> None:
        chosen = self.one if q.default == "one" else self.several
        chosen.setChecked(True)
        # the wizard focuses the page's first button ("one") once this returns, whatever was chosen: Space then
        # chose it; focus the chosen answer after that
        QTimer.singleShot(0, chosen, chosen.setFocus)   # dropped if the page is gone by then
        self.reason.setText(why(q.reason))

    def answer_texts(self) -> dict[str, str | None]:
        return {"concurrency": "one" if self.one.isChecked() else "several"}


class DiskPage(_QuestionPage):
    keys = ("keep_on_disk", "cold_dir")

    def __init__(self) -> None:
        super().__init__("Keep conversations on disk?",
                         "A conversation that leaves RAM is written to this folder and read back instead "
                         "of being read again from token 0. Only this level deletes, oldest first.")
        self.keep = QCheckBox("Keep conversations on disk")
        self.keep.setObjectName("keep_on_disk")
        self.reason = reason_label()
        self.folder = QLineEdit()
        self.folder.setObjectName("cold_dir")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(QLabel("Folder:"))
        row.addWidget(self.folder, 1)
        row.addWidget(browse)
        self.folder_reason = reason_label()
        self.folder.textChanged.connect(self._show_free_space)
        self.keep.toggled.connect(self._toggle)
        self._browse_button = browse
        self._default_reason: str | None = None    # the keep_on_disk question's, measured at the default folder
        for widget in (self.keep, self.reason):
            self.layout_.addWidget(widget)
        self.layout_.addLayout(row)
        self.layout_.addWidget(self.folder_reason)
        self.layout_.addWidget(self.error)
        self.layout_.addStretch(1)

    def show_question(self, q) -> None:
        w = self.wizard()
        self.keep.setChecked(bool(q.default))
        self._default_reason = q.reason
        self.reason.setText(why(q.reason))
        folder_q = question_for("cold_dir", w.situation, w.answers)
        self.folder.setText(folder_q.default)
        self.folder_reason.setText(folder_q.reason)
        self._toggle(self.keep.isChecked())

    def _show_free_space(self, text: str) -> None:
        """The free space where the typed folder is (or would be made): a statvfs, cheap at each keystroke."""
        w = self.wizard()
        if w is not None and self._default_reason is not None:
            self.reason.setText(self._why_for(text))
        if w is None or not text.strip():
            self.folder_reason.setText("")
            return
        try:
            disk = disk_facts(folder_meant(text))
        except (OSError, ValueError):   # a path no filesystem answers for (or a NUL in it): Next says why
            self.folder_reason.setText("")
            return
        situation = replace(w.situation, cold_disk=replace(w.situation.cold_disk, folder=disk.folder,
                                                           free_mib=disk.free_mib, reports_size=disk.reports_size))
        self.folder_reason.setText(question_for("cold_dir", situation, w.answers).reason)

    def _why_for(self, text: str) -> str:
        """Why keeping conversations on disk is the default, said of the folder it was measured at (its free space,
        its read speed): a new-user trial typed another folder and read the default's free space as if it were
        that folder's. Another folder's own free space is in the line under it."""
        measured = self.wizard().situation.cold_disk.folder
        if not text.strip() or _same_folder(folder_meant(text), measured):
            return why(self._default_reason)
        return f"Why this default, measured at the default folder {measured}: {self._default_reason}"

    def _toggle(self, on: bool) -> None:
        for widget in (self.folder, self._browse_button, self.folder_reason):
            widget.setEnabled(on)

    def _browse(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Folder for conversations kept on disk", self.folder.text())
        if path:
            self.folder.setText(path)

    def validatePage(self) -> bool:
        if not super().validatePage():
            return False
        if self.keep.isChecked():   # the folder as taken (a relative one under home), seen again on Back
            self.folder.setText(self.wizard().answers.cold_dir)
        return True

    def refused(self, key: str, reason: str) -> str:
        """A folder refused without a way on ("cannot write to /mnt/x: Read-only file system") says the page's two;
        the reasons that name one already ("choose a folder on a disk") are left as they are."""
        if key != "cold_dir" or "choose" in reason:
            return reason
        return f"{reason}: choose another folder, or untick \u201cKeep conversations on disk\u201d"

    def answer_texts(self) -> dict[str, str | None]:
        keep = self.keep.isChecked()
        if keep and not self.folder.text().strip():
            raise AnswerError("type the folder for the conversations kept on disk, or untick the box above")
        return {"keep_on_disk": "yes" if keep else "no", "cold_dir": folder_meant(self.folder.text()) if keep else None}


def _same_folder(a: str, b: str) -> bool:
    return os.path.normpath(os.path.expanduser(a)) == os.path.normpath(os.path.expanduser(b))


def folder_meant(text: str) -> str:
    """The folder a user typed, as a window means it: `~` expanded, and a relative one under the home folder.
    The app's working folder is wherever it was started from (a desktop's launcher: `/`, or the app's own
    folder), so a new-user trial's `conversations` landed there, not where the user was looking."""
    path = Path(text.strip()).expanduser()
    return str(path if path.is_absolute() else Path.home() / path)


class ContextPage(_QuestionPage):
    keys = ("ctx",)

    def __init__(self) -> None:
        super().__init__("Context size", "The longest conversation one request can hold, in tokens "
                         "(32k = 32768). Chosen with the model and this machine's memory known.")
        self.combo = answer_combo("ctx")
        self.reason = reason_label()
        self.layout_.addWidget(self.combo)
        self.layout_.addWidget(self.reason)
        self.layout_.addWidget(self.error)
        self.layout_.addStretch(1)

    def show_question(self, q) -> None:
        model = self.wizard().situation.model
        steps = [c for c in PlanParameters().ctx_ladder if c <= model.n_ctx_train]
        if q.default not in steps:   # a model trained on fewer tokens than the first step: the list was empty
            steps = sorted({*steps, q.default})
        self.combo.clear()
        self.combo.addItems([str(c) for c in steps])
        self.combo.setCurrentText(str(q.default))
        self.reason.setText(why(q.reason))

    def answer_texts(self) -> dict[str, str | None]:
        return {"ctx": self.combo.currentText()}
