"""`strata monitor` where there is no display (an SSH session, a server): one line saying so and what to
do, exit status 2, instead of Qt aborting the process (SIGABRT, "Reinstalling the application may fix
this problem"); with --screenshot it renders offscreen, as a picture needs no screen. Not here: the
window itself (tests/monitor)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from strata.cli import no_display

NOTHING_LISTENS = "http://127.0.0.1:9"   # the discard port: no server, so the feed is "cannot reach"


def headless_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}


def strata(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", *argv], env=headless_env(), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("environ,platform,stopped", [
    ({}, "linux", True),
    ({"DISPLAY": ":0"}, "linux", False),
    ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
    ({"QT_QPA_PLATFORM": "offscreen"}, "linux", False),
    ({}, "win32", False),          # Windows and macOS always have a window system
    ({}, "darwin", False),
])
def test_no_display_is_told_only_on_linux_without_one(environ, platform, stopped):
    assert (no_display(environ, platform) is not None) == stopped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check is Linux's")
def test_the_monitor_without_a_display_says_so_instead_of_aborting():
    done = strata("monitor", "--url", NOTHING_LISTENS)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.startswith("strata monitor: no display to open a window on"), done.stderr
    assert "--screenshot PATH" in done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the check is Linux's")
def test_a_screenshot_without_a_display_renders_offscreen(tmp_path):
    png = tmp_path / "monitor.png"
    done = strata("monitor", "--url", NOTHING_LISTENS, "--screenshot", str(png), "--after", "0.5")
    assert done.returncode == 1, (done.returncode, done.stderr)       # saved, but not connected
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
