"""The tray icon: the server's state in its tooltip and menu, the endpoint address (click to copy),
open the monitor, restart the server, set up again, quit. Only presentation; the controller does the work.
"""

from __future__ import annotations

from PySide6.QtGui import QAction, QIcon
from PySide6.QtWidgets import QMenu, QSystemTrayIcon
from strata.app.supervisor import ServerStatus
from strata.monitor import units


class Tray:
    def __init__(self, icon: QIcon, *, on_open, on_copy, on_restart, on_quit, on_setup=None) -> None:
        self.icon = QSystemTrayIcon(icon)
        self.menu = QMenu()
        self.state_action = QAction("Server: starting")
        self.state_action.setEnabled(False)
        self.endpoint_action = QAction("Copy address")
        self.endpoint_action.triggered.connect(on_copy)
        self.open_action = QAction("Open monitor")
        self.open_action.triggered.connect(on_open)
        self.restart_action = QAction("Restart server")
        self.restart_action.triggered.connect(on_restart)
        # the wizard on the configuration file, its answers proposed; Finish restarts the server on it
        self.setup_action = QAction("Set up again\u2026")
        self.setup_action.setVisible(on_setup is not None)
        if on_setup is not None:
            self.setup_action.triggered.connect(on_setup)
        self.quit_action = QAction("Quit Strata")
        self.quit_action.triggered.connect(on_quit)
        for a in (self.state_action, self.endpoint_action, None, self.open_action, self.restart_action,
                  self.setup_action, None, self.quit_action):
            if a is None:
                self.menu.addSeparator()
            else:
                self.menu.addAction(a)
        self.icon.setContextMenu(self.menu)
        # a click opens the monitor through the menu's action: a lambda over `on_open` (the controller's method),
        # held by the icon the controller holds, was a loop through Qt's connection nothing could free
        self.icon.activated.connect(self._activated)
        self.icon.setToolTip("Strata")
        self.icon.show()

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            self.open_action.trigger()

    def show_status(self, status: ServerStatus) -> None:
        text = f"Server: {status.state}"
        if status.loading_s is not None:      # minutes for a big model: the menu counts them, as the status bar does
            text = f"Server: {status.detail} ({units.elapsed(status.loading_s)} so far)"
        if self.state_action.text() != text:
            self.state_action.setText(text)
        address = f"Copy address {status.endpoint}" if status.endpoint else "Copy address (not yet known)"
        if self.endpoint_action.text() != address:
            self.endpoint_action.setText(address)
            self.endpoint_action.setEnabled(bool(status.endpoint))
        tip = f"Strata \u2014 {status.state}" + (f"\n{status.endpoint}" if status.endpoint else "") + \
              (f"\n{status.detail}" if status.state != "running" else "")
        if self.icon.toolTip() != tip:
            self.icon.setToolTip(tip)

    def notify(self, title: str, text: str, warning: bool = True) -> None:
        kind = QSystemTrayIcon.MessageIcon.Warning if warning else QSystemTrayIcon.MessageIcon.Information
        self.icon.showMessage(title, text, kind, 8000)

    def hide(self) -> None:
        self.icon.hide()
