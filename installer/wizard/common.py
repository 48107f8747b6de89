"""Widgets shared by the wizard's pages: the "why" label beside a choice and the error line.

Only presentation; no plan logic here.
"""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QCompleter, QLabel


def answer_combo(name: str) -> QComboBox:
    """An editable list of proposed answers. Its completer pops a list up as one types instead of completing
    inline: an inline completer takes the whole text the line selects on focus (Tab back into it) for a completion
    of its own, so Enter there put back its stale first row (2048 tokens in place of the 8192 shown) and did not
    go to the next page."""
    combo = QComboBox()
    combo.setEditable(True)
    combo.setObjectName(name)
    combo.completer().setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
    return combo


def reason_label(text: str = "") -> QLabel:
    """The default's reason, shown beside the choice (grey, wrapped, selectable)."""
    label = QLabel(text)
    label.setWordWrap(True)
    label.setObjectName("reason")
    label.setStyleSheet("QLabel#reason { color: #555; padding: 6px 8px; background: #f3f5f8;"
                        " border-left: 3px solid #7a9cc6; }")
    return label


def error_label() -> QLabel:
    """Why an answer was refused; empty until then."""
    label = QLabel("")
    label.setWordWrap(True)
    label.setObjectName("error")
    label.setStyleSheet("QLabel#error { color: #b00020; font-weight: bold; }")
    return label


def why(reason: str) -> str:
    return f"Why this default: {reason}"
