"""A second launch finds the first and asks it to come forward; strata-app's own argument checks and
its `--strata-cli` pass-through (how the packaged app runs `strata serve`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from strata.app.main import build_parser, main, split_args
from strata.app.quit_wait import wait_for_quitting_app
from strata.app.single_instance import SingleInstance, ask_running_instance, instance_name


def asked(qtbot, call: str):
    """A second launch's ask (`call`, in strata.app.single_instance's names) in a process of its own, as a
    second launch is, while this process's Qt loop lets the first instance answer (in a thread of this process
    the ask's blocking wait holds the interpreter, and the first could not answer)."""
    proc = subprocess.Popen([sys.executable, "-c", f"from strata.app.single_instance import *; print(repr({call}))"],
                            stdout=subprocess.PIPE, text=True)
    qtbot.waitUntil(lambda: proc.poll() is not None, timeout=30_000)
    assert proc.returncode == 0
    return eval(proc.stdout.read().strip())


def test_second_launch_brings_the_first_forward(qtbot):
    name = instance_name("-test-" + uuid.uuid4().hex[:8])
    activated = []
    first = SingleInstance(name, lambda: activated.append(1) or True)
    try:
        assert asked(qtbot, f"ask_running_instance({name!r})") == "forward"
        assert activated == [1]
    finally:
        first.close()
    assert ask_running_instance(name, timeout_ms=200) is None


# an app that is quitting, in a process of its own (as it is: a second launch's blocking ask, in a thread of
# this process, would hold the interpreter and the first could not answer), which ends after argv[2] ms; at
# question argv[4] (the second by default) it is busy for argv[3] seconds before it answers (its GUI thread held)
QUITTING_APP = ("import sys, time\n"
                "from PySide6.QtCore import QCoreApplication, QTimer\n"
                "from strata.app.single_instance import SingleInstance\n"
                "app = QCoreApplication([])\n"
                "asked = []\n"
                "def quitting():\n"
                "    asked.append(1)\n"
                "    if len(asked) == int(sys.argv[4]):\n"
                "        time.sleep(float(sys.argv[3]))\n"
                "    return False\n"
                "first = SingleInstance(sys.argv[1], quitting)\n"
                "print('listening', flush=True)\n"
                "QTimer.singleShot(int(sys.argv[2]), app.quit)\n"
                "app.exec()\n"
                "first.close()\n")


@pytest.fixture
def quitting_app():
    """start(ms) -> the name a quitting app listens under, for `ms` milliseconds."""
    procs = []

    def start(ms: int, busy_s: float = 0.0, busy_at: int = 2) -> str:
        name = instance_name("-test-" + uuid.uuid4().hex[:8])
        proc = subprocess.Popen([sys.executable, "-c", QUITTING_APP, name, str(ms), str(busy_s), str(busy_at)],
                                stdout=subprocess.PIPE,
                                text=True, env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
        procs.append(proc)
        assert proc.stdout.readline().strip() == "listening"
        return name

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_an_app_that_is_quitting_says_so(quitting_app):
    assert ask_running_instance(quitting_app(30_000)) == "quitting"


def test_a_quitting_app_slow_to_answer_is_still_heard(quitting_app):
    """Busy 2 s at the knock (a loaded machine held a quitting app's GUI thread 1.5 s): a 1 s wait took the
    silence for "forward", and the second launch exited as the first quit, leaving nothing running."""
    assert ask_running_instance(quitting_app(30_000, busy_s=2.0, busy_at=1)) == "quitting"


def test_a_second_launch_waits_for_a_quitting_app_to_end(qtbot, quitting_app):
    """It then starts (the double-click during a minute-long Quit was answered "already running" by an app about
    to go, and nothing was left running); meanwhile a window says so (a desktop launch has no terminal)."""
    name = quitting_app(1500)
    seen = []
    QTimer.singleShot(300, lambda: seen.append(QApplication.activeModalWidget().labelText()))
    t0 = time.monotonic()
    assert wait_for_quitting_app(name, poll_s=0.1) is None
    assert time.monotonic() - t0 >= 1.0
    assert seen and "is quitting" in seen[0] and "starts when it has ended" in seen[0], seen


def test_the_wait_stays_drawn_while_the_quitting_app_is_slow_to_answer(qtbot, quitting_app):
    """A quitting app busy for 2.5 s: the window keeps being drawn (its loop ran every 50 ms; the ask blocked it
    a second a poll before) and the silence is not taken for "came forward" (the new launch exited then, with
    the old one on its way out): the wait ends when that app has."""
    name = quitting_app(4000, busy_s=2.5)
    ticks = [time.monotonic()]
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(50)
    t0 = time.monotonic()
    assert wait_for_quitting_app(name, poll_s=0.1) is None
    timer.stop()
    assert time.monotonic() - t0 >= 3.0
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert max(gaps) < 0.5, max(gaps)


def test_a_second_launch_gives_up_on_an_app_quitting_for_too_long(qtbot, quitting_app):
    assert wait_for_quitting_app(quitting_app(30_000), limit_s=0.5, poll_s=0.1) == "quitting"


def test_the_wait_for_a_quitting_app_can_be_cancelled(qtbot, quitting_app):
    name = quitting_app(30_000)
    QTimer.singleShot(400, lambda: QApplication.activeModalWidget().cancel())
    assert wait_for_quitting_app(name, poll_s=0.1) == "cancelled"


def test_no_running_instance(qtbot):
    assert ask_running_instance(instance_name("-none-" + uuid.uuid4().hex[:8]), timeout_ms=200) is None


def test_strata_cli_pass_through_runs_the_command():
    r = subprocess.run([sys.executable, "-m", "strata.app.main", "--strata-cli", "--version"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("strata ")


def test_bad_start_retries_is_named(tmp_path):
    env = dict(os.environ, STRATA_START_RETRIES="lots", QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-m", "strata.app.main", "--log-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2
    assert "STRATA_START_RETRIES must be a whole number, got 'lots'" in r.stderr
    assert "STRATA_START_RETRIES" in (tmp_path / "app.log").read_text()


def test_other_options_go_to_the_server():
    args, rest = split_args(["--theme", "dark", "--batch", "4", "--port", "9000"])
    assert args.theme == "dark" and rest == ["--batch", "4", "--port", "9000"]
    args, rest = split_args(["--hidden", "--", "--theme", "x"])
    assert args.hidden and rest == ["--theme", "x"]
    with pytest.raises(SystemExit) as e:
        split_args(["--theme", "purple"])
    assert e.value.code == 2
    usage = " ".join(build_parser().format_help().split())     # --help says both of these
    assert "Any other option goes to `strata serve`" in usage and "--strata-cli ARGS..." in usage


def test_first_run_shows_the_wizard_and_cancel_ends_the_app(qtbot, tmp_path):
    """No configuration file: the real setup wizard opens; Cancel -> exit status 1, nothing started."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    seen = []

    def cancel() -> None:
        wizard = QApplication.activeModalWidget()
        if wizard is None:
            QTimer.singleShot(100, cancel)
            return
        seen.append(type(wizard).__name__)
        wizard.reject()

    QTimer.singleShot(200, cancel)
    app = QApplication.instance()
    try:
        code = main(["--config", str(tmp_path / "missing.toml"), "--log-dir", str(tmp_path / "logs")])
    finally:
        app.setQuitOnLastWindowClosed(True)
    assert code == 1
    assert seen == ["SetupWizard"]
    assert not (tmp_path / "missing.toml").exists()
    log = (tmp_path / "logs" / "app.log").read_text()
    assert "first run, showing the setup wizard" in log and "setup cancelled" in log
    assert "starting the server" not in log


def test_without_a_display_the_app_says_so_instead_of_aborting(tmp_path):
    """Linux with no DISPLAY / WAYLAND_DISPLAY / QT_QPA_PLATFORM (an SSH session): Qt would abort with
    SIGABRT (exit 134) advising a reinstall; the app stops first with one line saying what to do."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the check is for Linux desktops")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = subprocess.run([sys.executable, "-m", "strata.app.main", "--log-dir", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith("strata-app: no display to open a window on"), r.stderr
    assert "strata serve" in r.stderr and "./run" in r.stderr


def test_without_a_display_the_packaged_app_names_its_own_command():
    """The PyInstaller app over SSH said 'run the server alone with `strata serve` (`./run` ...)': it has
    neither a `strata` on PATH nor a checkout. Its own executable, quoted, with --strata-cli."""
    from strata.app.main import server_alone
    from strata.installer.cli import strata_command

    said = server_alone(strata_command(frozen=True, executable="/opt/My Apps/Strata/Strata"), frozen=True)
    assert said == "run the server alone with `'/opt/My Apps/Strata/Strata' --strata-cli serve`"
    # on Windows, PowerShell runs a quoted program only through its call operator: both forms
    said = server_alone(r'"C:\Program Files\Strata\Strata.exe" --strata-cli', frozen=True, windows=True)
    assert said == (r'run the server alone with `"C:\Program Files\Strata\Strata.exe" --strata-cli serve` '
                    r'(in PowerShell: `& "C:\Program Files\Strata\Strata.exe" --strata-cli serve`)')


def test_the_app_runs_then_gives_the_signal_handlers_back(app_config, tmp_path):
    """strata-app's main on a real configuration: the server starts, a quit stops it, and SIGINT / SIGTERM are
    the process's own again (they stayed the app's: Ctrl-C then asked a finished Qt loop to quit, and nothing
    stopped the process). In a subprocess: a Qt loop that has run and quit in the test process leaves later
    tests' bench threads unanswered."""
    logs = tmp_path / "logs"
    script = (
        "import signal, sys\n"
        "from pathlib import Path\n"
        "from PySide6.QtCore import QTimer\n"
        "from PySide6.QtWidgets import QApplication\n"
        "from strata.app.main import main\n"
        "app = QApplication(sys.argv[:1])\n"
        "before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}\n"
        f"log = Path({str(logs / 'server.log')!r})\n"
        "timer = QTimer()\n"
        "timer.timeout.connect(lambda: log.exists() and 'listening on' in log.read_text() and app.quit())\n"
        "timer.start(100)\n"
        f"code = main(['--config', {str(app_config)!r}, '--log-dir', {str(logs)!r}])\n"
        "print(code, all(signal.getsignal(s) is h for s, h in before.items()))\n")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[-2:] == ["0", "True"], (r.stdout, r.stderr[-2000:])
    assert "stopping" in (logs / "server.log").read_text(encoding="utf-8")
