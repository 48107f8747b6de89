"""docs/install.md's commands that add the app to a Linux desktop's menu, run as written in a fresh HOME: the
entry starts an executable that exists, its icon is where the icon theme finds it, and the app names itself
as the entry does. A new-user trial found `resources/strata.desktop` mentioned (docs/app.md) with no way to
install it, and its `Exec=strata-app` not on PATH for a checkout's `.venv`."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux desktop's menu")


def _commands() -> str:
    section = re.search(r"^### A menu entry \(Linux\)\n(.*?)(?=^#)", DOC, re.M | re.S)
    assert section, "docs/install.md has no '### A menu entry (Linux)' section"
    block = re.search(r"```sh\n(.*?)```", section.group(1), re.S)
    assert block
    return block.group(1)


def _run(home: Path, path: str) -> configparser.SectionProxy:
    env = {**os.environ, "HOME": str(home), "PATH": path}
    subprocess.run(["bash", "-euc", _commands()], cwd=ROOT, env=env, check=True, timeout=60)
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(home / ".local/share/applications/strata.desktop")
    icon = home / ".local/share/icons/hicolor/256x256/apps" / (entry["Desktop Entry"]["Icon"] + ".png")
    assert icon.read_bytes()[16:24] == (256).to_bytes(4, "big") * 2       # a 256x256 PNG where its folder says
    return entry["Desktop Entry"]


def test_the_entry_starts_the_checkouts_app(tmp_path):
    exe = ROOT / ".venv" / "bin" / "strata-app"
    if not exe.is_file():
        pytest.skip("no .venv in this checkout (./run and ./test make it)")
    d = _run(tmp_path, "/usr/bin:/bin")
    assert d["Exec"] == str(exe) and os.access(d["Exec"], os.X_OK)
    assert d["Type"] == "Application" and d["Terminal"] == "false"


def test_the_entry_starts_the_app_pip_put_on_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    app = bin_dir / "strata-app"
    app.write_text("#!/bin/sh\n")
    app.chmod(0o755)
    assert _run(tmp_path / "home", f"{bin_dir}:/usr/bin:/bin")["Exec"] == str(app)


def test_the_app_names_itself_as_the_entry(qtbot, tmp_path):
    """Wayland matches a window to its menu entry by the app id, which Qt takes from desktopFileName."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication
    from strata.app.main import main

    names = []

    def cancel() -> None:
        wizard = QApplication.activeModalWidget()
        if wizard is None:
            QTimer.singleShot(100, cancel)
            return
        names.append(QApplication.desktopFileName())
        wizard.reject()

    QTimer.singleShot(200, cancel)
    app = QApplication.instance()
    try:
        assert main(["--config", str(tmp_path / "missing.toml"), "--log-dir", str(tmp_path / "logs")]) == 1
    finally:
        app.setQuitOnLastWindowClosed(True)
    assert names == ["strata"] and (ROOT / "resources" / f"{names[0]}.desktop").is_file()
