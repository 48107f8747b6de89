"""The window's Server menu: besides Restart server and Set up again..., the log folder (a failure's reason shows the
server's last line; the logs hold the rest) and Quit (Ctrl+Q). A new-user trial found neither: the logs' place was
only in the docs, and with a tray the window's close hides it, so Quit was only in the tray's menu."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QKeySequence
from strata.app.controller import AppController
from strata.app.restart_policy import RestartConfig


def _menu(controller):
    return [a for a in controller.window.menuBar().actions() if a.text() == "&Server"][0].menu()


class _Opened(QObject):
    """What the desktop was asked to open (QDesktopServices' handler for file: URLs, Qt's own hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url)


def test_the_menu_opens_the_log_folder(qtbot, tmp_path):
    controller = AppController(tmp_path / "config.toml", tmp_path / "logs", theme="light")
    qtbot.addWidget(controller.window)
    names = [a.text() for a in _menu(controller).actions() if not a.isSeparator()]
    assert names == ["Restart server", "Set up again\u2026", "Open log folder", "Quit Strata"]
    opened = _Opened()
    QDesktopServices.setUrlHandler("file", opened, "open")
    try:
        controller.logs_action.trigger()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert [u.toLocalFile() for u in opened.urls] == [str(tmp_path / "logs")]
    assert (tmp_path / "logs").is_dir()                  # made when not there yet (no server started)
    assert str(tmp_path / "logs") in controller.logs_action.toolTip()


def test_ctrl_q_quits_and_stops_the_server(qtbot, app_config, tmp_path):
    controller = AppController(app_config, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=1))
    assert controller.quit_action.shortcut() == QKeySequence("Ctrl+Q")
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=60_000)
        controller.window.activateWindow()
        qtbot.waitActive(controller.window)
        qtbot.keyClick(controller.window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
        qtbot.waitUntil(lambda: controller._shut, timeout=60_000)
        assert controller.supervisor.status().state == "stopped"
        assert "stopping" in (tmp_path / "logs" / "server.log").read_text(encoding="utf-8")
    finally:
        controller.shutdown()
