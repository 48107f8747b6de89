"""Widgets shared by the wizard's pages: the "why" label beside a choice and the error line.

Only presentation; no plan logic here.
"""

from __future__ import annotations

from PySide6.QtWidgets import QLabel


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
