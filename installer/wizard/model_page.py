"""The wizard's first page: which GGUF model (found files, the default model, or a path).

Reads the chosen file's metadata through `flow.accept` when Next is pressed; a file that cannot be
used is refused with the reason on the page.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QPushButton,
    QVBoxLayout,
    QWizardPage,
)
from strata.installer import flow
from strata.installer.plan import parse_answer, question_for
from strata.installer.plan_types import AnswerError
from strata.installer.wizard.common import answer_combo, error_label, reason_label, why


class ModelPage(QWizardPage):
    def __init__(self) -> None:
        super().__init__()
        self.setTitle("Which model?")
        self.setSubTitle("A GGUF file of an architecture Strata runs (llama, Qwen, Mistral, Gemma 3, gpt-oss, GLM-4.5 / "
                         "4.7-Flash, DeepSeek-V2, ...). Strata measures it on this machine next.")
        self.combo = answer_combo("model")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.combo, 1)
        row.addWidget(browse)
        self.reason = reason_label()
        self.error = error_label()
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.reason)
        layout.addWidget(self.error)
        layout.addStretch(1)

    def initializePage(self) -> None:
        w = self.wizard()
        w.forget_from("model")
        q = question_for("model", w.situation, w.answers)
        self.combo.clear()
        self.combo.addItems(list(q.options))
        if q.default:
            self.combo.setCurrentText(q.default)
        self.reason.setText(why(q.reason) if q.default else q.reason)   # no default: what to do instead
        self.error.setText("")

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a GGUF model", "", "GGUF models (*.gguf)")
        if path:
            self.combo.setCurrentText(path)

    def validatePage(self) -> bool:
        w = self.wizard()
        q = question_for("model", w.situation, w.answers)
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            value = parse_answer(q, self.combo.currentText(), w.situation, w.answers)
            w.situation, w.answers = flow.accept(w.situation, w.answers, q, value)
        except AnswerError as e:
            self.error.setText(str(e))
            return False
        finally:
            QApplication.restoreOverrideCursor()
        self.error.setText("")
        return True
