"""The Qt setup wizard (`SetupWizard`) and `run_wizard`, which the app shows on first run.

Only this package imports PySide6 in `strata.installer`; the plan and the mechanism are shared
with `strata setup` in a terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strata.installer.wizard.setup_wizard import SetupWizard

__all__ = ["SetupWizard", "run_wizard"]


def run_wizard(parent=None, config_path: str | Path | None = None,
               on_open: Callable[[SetupWizard], object] | None = None) -> Path | None:
    """Show the wizard modally; the path written on Finish, or None when it was cancelled. `on_open` gets the
    wizard before it is shown (the app: a second launch meanwhile brings this wizard forward)."""
    from PySide6.QtWidgets import QApplication, QDialog
    from strata.installer.wizard.setup_wizard import SetupWizard

    app = QApplication.instance() or QApplication([])  # noqa: F841 - kept alive while the wizard runs
    wizard = SetupWizard(parent, config_path)
    if on_open is not None:
        on_open(wizard)
    if wizard.exec() != QDialog.DialogCode.Accepted:
        return None
    return wizard.written


def __getattr__(name: str):
    if name == "SetupWizard":
        from strata.installer.wizard.setup_wizard import SetupWizard

        return SetupWizard
    raise AttributeError(name)
